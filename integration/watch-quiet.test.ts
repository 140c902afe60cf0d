// A gateway that nothing needs the feed for (no watcher, nothing waiting on a revision) asks
// storage for quiet after a second (services/gateway/watch/feed-link.ts) and sleeps through
// writes. What must hold, end to end on real processes with the etcd3 client: a watcher made
// then sees every change from its start revision, once and in order, the ones committed while
// the gateway was quiet included; a follower that was quiet still answers a linearizable read
// with the leader's last write; and the gateway asks for the feed again
// (kvs_watch_feed_quiet, a gauge of its /metrics, goes back to 0).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { once } from 'node:events';
import type { Etcd3, IKeyValue, WatchBuilder } from 'etcd3';
import { client, freePort, onCleanup, pollUntil, startKvs, type Ctx } from '../testkit/harness.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';
import { scrape, value } from '../testkit/metrics-scrape.js';

/** Puts `prefix<n>` until the gateway at `metricsAddr` says it asked for quiet; returns the keys put. */
async function putUntilQuiet(c: Etcd3, metricsAddr: string, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  await pollUntil(`the gateway at ${metricsAddr} to ask for quiet`, async () => {
    const key = `${prefix}${String(keys.length).padStart(4, '0')}`;
    await c.put(key).value('v');
    keys.push(key);
    return value(await scrape(metricsAddr), 'kvs_watch_feed_quiet') === 1 ? true : undefined;
  }, 20_000);
  return keys;
}

/**
 * Starts a watcher, listening before it connects (events from history may come at once), and
 * returns the keys it sees, with their revisions, and a way to wait for `n` of them.
 */
async function collect(t: Ctx, builder: WatchBuilder) {
  const w = builder.watcher();
  onCleanup(t, () => w.cancel());
  const seen: { key: string; rev: number }[] = [];
  let waiting: { n: number; resolve: () => void } | undefined;
  w.on('put', (kv: IKeyValue) => {
    seen.push({ key: kv.key.toString(), rev: Number(kv.mod_revision) });
    if (waiting && seen.length >= waiting.n) waiting.resolve();
  });
  await Promise.race([once(w, 'connected'), once(w, 'error').then(([err]) => Promise.reject(err))]);
  return {
    seen,
    count: (n: number) => (seen.length >= n ? Promise.resolve() : new Promise<void>((resolve) => (waiting = { n, resolve }))),
  };
}

async function metricsArgs(): Promise<{ addr: string; args: string[] }> {
  const addr = `127.0.0.1:${await freePort()}`;
  return { addr, args: ['--metrics-addr', addr] };
}

test('single node: watchers made while the gateway was quiet see every change from their start, once and in order', async (t) => {
  const m = await metricsArgs();
  const node = await startKvs(t, { args: m.args });
  const c = client(t, node.endpoint);
  const before = await putUntilQuiet(c, m.addr, 'q/before-');
  const start = Number((await c.get(before[0]!).exec()).kvs[0]!.mod_revision);
  // Committed while the gateway is quiet: storage sends it none of these.
  const quiet: string[] = [];
  for (let i = 0; i < 10; i++) {
    quiet.push(`q/quiet-${i}`);
    await c.put(`q/quiet-${i}`).value('v');
  }
  assert.equal(value(await scrape(m.addr), 'kvs_watch_feed_quiet'), 1, 'still quiet: nothing asked for the feed');

  const a = await collect(t, c.watch().prefix('q/').startRevision(String(start)));
  const b = await collect(t, c.watch().prefix('q/'));
  const after = ['q/after-0', 'q/after-1', 'q/after-2'];
  for (const k of after) await c.put(k).value('v');

  const all = [...before, ...quiet, ...after];
  await a.count(all.length);
  await b.count(after.length);
  assert.deepEqual(a.seen.map((e) => e.key), all, 'the watcher from the start: every key once, in order');
  assert.deepEqual(a.seen.map((e) => e.rev), a.seen.map((_, i) => start + i), 'one revision after another');
  assert.deepEqual(b.seen.map((e) => e.key), after, 'the watcher from now: only what came after it');
  assert.equal(value(await scrape(m.addr), 'kvs_watch_feed_quiet'), 0, 'the watchers asked for the feed again');
});

test('cluster: a quiet follower answers a linearizable read with the leader\'s last write, and its watcher sees the writes made meanwhile', { timeout: 120_000 }, async (t) => {
  const metrics = new Map<string, string>();
  const cluster = await startCluster(t, 3, {
    nodeArgs: async (id) => {
      const m = await metricsArgs();
      metrics.set(id, m.addr);
      return m.args;
    },
  });
  const leader = await waitForLeader(cluster.nodes);
  const follower = cluster.nodes.find((n) => n !== leader)!;
  const followerMetrics = metrics.get(follower.id)!;
  // Writes through the leader until the follower's gateway has gone quiet.
  const before = await putUntilQuiet(leader.client, followerMetrics, 'c/before-');
  const start = Number((await leader.client.get(before[0]!).exec()).kvs[0]!.mod_revision);
  await leader.client.put('c/read').value('v1');
  // Linearizable (etcd3's default): it must see the write the leader just acknowledged.
  assert.equal(await follower.client.get('c/read').string(), 'v1', 'the quiet follower\'s read after the leader\'s write');
  // Quiet again, then writes the follower's gateway sleeps through.
  const between = await putUntilQuiet(leader.client, followerMetrics, 'c/between-');
  const quiet = Array.from({ length: 5 }, (_, i) => `c/quiet-${i}`);
  for (const k of quiet) await leader.client.put(k).value('v');
  const seen = await collect(t, follower.client.watch().prefix('c/').startRevision(String(start)));
  await leader.client.put('c/after').value('v');
  const all = [...before, 'c/read', ...between, ...quiet, 'c/after'];
  await seen.count(all.length);
  assert.deepEqual(seen.seen.map((e) => e.key), all, 'the follower\'s watcher: every key once, in order');
  assert.equal(value(await scrape(followerMetrics), 'kvs_watch_feed_quiet'), 0, 'the watcher asked for the feed again');
});
