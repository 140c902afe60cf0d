// Watchers through the etcd3 npm client, across component restarts, and a stalled consumer.
// Each key is put once, so a watcher's events must be exactly the keys in the store: every
// committed put once (none lost), nothing twice (no duplicate), in revision order. Puts whose
// answer was lost in a restart may or may not have been committed: the store decides.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test, type TestContext } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Etcd3, type IKeyValue, type Watcher } from 'etcd3';
import { noop } from 'cockatiel';
import { service } from '../shared/proto/index.js';
import { client, component, onCleanup, startKvs, waitComponent, type KvsNode } from '../testkit/harness.js';

/** One writer putting `prefix<n>` in a loop, each key once; failures are left to the store. */
class Writer {
  acked = 0;
  private stopped = false;
  private readonly done: Promise<void>;
  private readonly c: Etcd3;

  constructor(t: TestContext, endpoint: string, private readonly prefix: string) {
    this.c = new Etcd3({
      hosts: `http://${endpoint}`,
      // Every put is sent at most once; one that fails is not retried.
      faultHandling: { host: () => noop, global: noop },
      grpcOptions: { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 500 },
    });
    onCleanup(t, () => this.c.close());
    this.done = this.run();
  }

  private async run(): Promise<void> {
    for (let n = 0; !this.stopped; n++) {
      try {
        await this.c.put(`${this.prefix}${String(n).padStart(6, '0')}`).value(`v${n}`);
        this.acked++;
      } catch {
        // unavailable while a component restarts: go on with the next key
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

/** What an etcd3 watcher saw. */
class Seen {
  readonly events: { key: string; rev: number }[] = [];
  disconnects = 0;
  private waiters: { n: number; resolve: () => void }[] = [];

  constructor(readonly watcher: Watcher) {
    watcher.on('put', (kv: IKeyValue) => {
      this.events.push({ key: kv.key.toString(), rev: Number(kv.mod_revision) });
      this.waiters = this.waiters.filter((w) => (this.events.length >= w.n ? (w.resolve(), false) : true));
    });
    watcher.on('disconnected', () => this.disconnects++);
  }

  /** Resolves once `n` events in all have been seen. */
  until(n: number): Promise<void> {
    if (this.events.length >= n) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ n, resolve }));
  }
}

/** The watcher saw every key in the store under `prefix` exactly once, in revision order. */
async function assertExactlyTheStore(c: Etcd3, prefix: string, seen: Seen): Promise<void> {
  const stored = await c.getAll().prefix(prefix).exec();
  const want = stored.kvs.map((kv) => ({ key: kv.key.toString(), rev: Number(kv.mod_revision) })).sort((a, b) => a.rev - b.rev);
  const keys = seen.events.map((e) => e.key);
  assert.equal(new Set(keys).size, keys.length, 'no event was delivered twice');
  assert.deepEqual(seen.events, want, 'the events are exactly the committed puts, in revision order');
}

async function underRestart(t: TestContext, restart: (node: KvsNode) => Promise<void>, expectDisconnect: boolean): Promise<void> {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  const prefix = 'w/';
  const watcher = await c.watch().prefix(prefix).create();
  // Before the client closes: a watcher left open keeps reconnecting to a stopped node.
  onCleanup(t, () => watcher.cancel());
  const seen = new Seen(watcher);
  const writer = new Writer(t, node.endpoint, prefix);
  await seen.until(50);
  await restart(node);
  const after = seen.events.length;
  await seen.until(after + 50);
  await writer.stop();
  await c.put(`${prefix}~last`).value('x');
  await seen.until((await c.getAll().prefix(prefix).count()));
  t.diagnostic(`${seen.events.length} events, ${writer.acked} puts acknowledged, ${seen.disconnects} disconnects`);
  // A gateway restart drops the client's stream (it resumes from its last revision); a
  // storage restart does not: the gateway refills its feed from history.
  assert.equal(seen.disconnects > 0, expectDisconnect, `${seen.disconnects} disconnects`);
  await assertExactlyTheStore(c, prefix, seen);
}

test('an etcd3 watcher survives kvs ctl restart gateway: nothing lost, nothing twice', { timeout: 120_000 }, async (t) => {
  await underRestart(t, async (node) => {
    const r = await node.ctl(['restart', 'gateway']);
    assert.equal(r.exitCode, 0, r.stderr);
  }, true);
});

test('an etcd3 watcher survives kill -9 of storage: nothing lost, nothing twice', { timeout: 120_000 }, async (t) => {
  await underRestart(t, async (node) => {
    const before = await component(node, 'storage');
    process.kill(before.pid, 'SIGKILL');
    await waitComponent(node, 'storage', (s) => s.state === 'ready' && s.pid !== before.pid);
  }, false);
});

const WatchClient = grpc.makeGenericClientConstructor(service('etcdserverpb.Watch'), 'Watch');
interface Resp { watchId: unknown; created: boolean; events: { kv: { key: Uint8Array; modRevision: unknown } }[] }

/** A raw Watch stream on its own connection, watching `prefix`. */
function rawWatch(t: TestContext, endpoint: string, prefix: string) {
  const c = new WatchClient(endpoint, grpc.credentials.createInsecure()) as unknown as grpc.Client & { Watch(): grpc.ClientDuplexStream<unknown, Buffer> };
  const call = c.Watch();
  call.on('error', (err: grpc.ServiceError) => {
    if (err.code !== grpc.status.CANCELLED) throw err;
  });
  onCleanup(t, () => {
    call.cancel();
    c.close();
  });
  const end = Buffer.from(prefix);
  end[end.length - 1]!++;
  call.write({ createRequest: { key: Buffer.from(prefix), rangeEnd: end } });
  return call;
}

test('a stalled watcher blocks neither writes nor other watchers, and catches up from history', { timeout: 180_000 }, async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  const prefix = 'slow/';
  const N = 400;
  const value = Buffer.alloc(64 * 1024, 'v');

  const stalled = rawWatch(t, node.endpoint, prefix);
  const live = rawWatch(t, node.endpoint, prefix);
  const revs = { stalled: [] as number[][], live: [] as number[][] };
  const collect = (name: 'stalled' | 'live') => (r: Resp) => {
    if (!r.created) revs[name].push(r.events.map((e) => Number(e.kv.modRevision)));
  };
  // The stalled stream reads its created response, then stops reading: grpc flow control backs
  // up to the gateway, whose writes to that stream stop draining.
  const [first] = (await once(stalled, 'data')) as [Resp];
  assert.equal(first.created, true);
  stalled.pause();
  stalled.on('data', collect('stalled'));
  live.on('data', collect('live'));
  await once(live, 'data');

  const written: number[] = [];
  for (let i = 0; i < N; i++) {
    const r = await c.put(`${prefix}${i}`).value(value).exec();
    written.push(Number(r.header.revision));
  }
  // The live watcher got every put, one response per revision, while the other stalled.
  const liveDone = () => revs.live.flat().length >= N;
  while (!liveDone()) await once(live, 'data');
  assert.deepEqual(revs.live, written.map((r) => [r]));
  assert.equal(revs.stalled.flat().length < N, true, 'the stalled watcher was still behind');

  // Resumed, it gets everything, in order, once; what it missed comes back batched from
  // history, in responses that fit a default client's 4 MiB limit.
  stalled.resume();
  while (revs.stalled.flat().length < N) await once(stalled, 'data');
  assert.deepEqual(revs.stalled.flat(), written);
  assert.ok(revs.stalled.some((r) => r.length > 1), 'the stalled watcher was served from history (several revisions per response)');
  assert.equal((await component(node, 'gateway')).restarts, 0);
});

