// Fencing rule "WAL objects carry the term; a deposed leader's late uploads never enter the
// history" (docs/cluster.md, "Terms in the object store"): a leader cut off from its followers
// asks for a batch to be uploaded before it acknowledges it (the object store is its replica).
// When that upload hangs and a follower takes over meanwhile, the upload can still land later,
// under the old term, at an index the new leader's term has taken. This test makes exactly that
// happen — the old leader's store hangs (its own local-store failpoint, `hang`: the PUT waits,
// then goes through) while its followers are cut off (peer proxies) — then checks that the
// record is in the object store and yet in no history: not on the nodes, not on a node that
// joins with an empty data directory (it restores from the object store), not on a single node
// restored from a copy of the bucket.
//
// Checked to fail without the rule: with historyOf() cutting nothing (dist/shared/objectstore/
// wal-history.js patched, source untouched), the single node restored from the bucket held the
// deposed leader's unacknowledged key and lacked the new leader's first write.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cp, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startCluster } from '../testkit/node-cluster.js';
import { LockWatch, NO_LEADER, onceClient, within } from './fencing-helpers.js';
import { localObjectStore, pollUntil, startKvs, tempDir } from '../testkit/harness.js';
import { FAILPOINT_ENV } from '../shared/objectstore/failpoint.js';
import { openObjectStore } from '../shared/objectstore/index.js';
import { TERM_PREFIX, WAL_PREFIX, parseTermStartKey, parseWalKey } from '../shared/objectstore/layout.js';
import type { ObjectStoreSpec } from '../testkit/harness.js';

const TTL_MS = 4500;

async function listed(spec: ObjectStoreSpec) {
  const store = await openObjectStore(spec);
  try {
    const wal = [];
    for await (const o of store.list(WAL_PREFIX)) {
      const k = parseWalKey(o.key);
      if (k) wal.push(k);
    }
    const starts = [];
    for await (const o of store.list(TERM_PREFIX)) {
      const k = parseTermStartKey(o.key);
      if (k) starts.push(k);
    }
    return { wal, starts };
  } finally {
    store.close();
  }
}

test("a deposed leader's upload that lands after a follower took over is in the object store but in no node's history, nor in a restore from the store", async (t) => {
  const failpoint = path.join(await tempDir(t, 'kvs-fencing-'), 'n1.objectstore-fault');
  await writeFile(failpoint, 'pass\n');
  const objectStore = await localObjectStore(t, 'cluster/');
  const cluster = await startCluster(t, 3, {
    objectStore,
    peerProxies: true,
    args: ['--leader-liveness-ttl', `${TTL_MS}ms`],
    nodeEnv: (id): Record<string, string> => (id === 'n1' ? { [FAILPOINT_ENV]: failpoint } : {}),
  });
  const [n1] = cluster.nodes;
  const watch = await LockWatch.start(t, objectStore);
  assert.equal(watch.current.nodeId, 'n1', 'n1 started first and leads');
  const oldTerm = watch.current.term;
  for (let i = 0; i < 5; i++) await n1.client.put(`before/${i}`).value('v').exec();

  // One follower disconnected: the leader is degraded (every batch is uploaded before it is
  // acknowledged) and touches its lock every 1.5 s. Wait for a touch, so the lock is fresh.
  n1.peerProxy!.setFor('n3', 'refuse');
  await watch.next((v) => v.nodeId === 'n1', 10_000, watch.versions.length + 1);
  // A degraded write goes to the object store under this term before it is acknowledged, so
  // the next upload the archiver makes is a PUT (not first a read of where the store stands).
  await n1.client.put('before/degraded').value('v').exec();

  // The cut: no follower, and the object store hangs. The write that follows is appended to
  // the leader's WAL and its upload is asked for (the lock is fresh), then waits in the store.
  n1.peerProxy!.set('refuse');
  await writeFile(failpoint, 'hang\n');
  const writer = onceClient(t, n1.endpoint);
  const late = writer.put('late/unacknowledged').value('from the deposed leader').options(within(30_000)).exec().then(() => 'acknowledged', (err: Error) => err.message);

  // A follower takes over and writes under its term.
  const taken = await watch.next((v) => v.nodeId !== 'n1', 30_000);
  assert.ok(taken.term > oldTerm);
  const fresh = cluster.nodes.find((n) => n.id === taken.nodeId)!;
  const next = onceClient(t, fresh.endpoint);
  await pollUntil('the new leader acknowledging a write', () => next.put('after/0').value('new').options(within(5000)).exec().then(() => true, () => undefined), 30_000);
  for (let i = 1; i < 5; i++) await next.put(`after/${i}`).value('new').options(within(10_000)).exec();
  const outcome = await late;
  assert.match(outcome, NO_LEADER, 'the write on the cut-off leader was not acknowledged');

  // Heal: the held upload goes through, under the old term, at an index the new term owns.
  await writeFile(failpoint, 'pass\n');
  n1.peerProxy!.heal();
  const start = (await pollUntil('the new term\'s start in the object store', async () => (await listed(objectStore)).starts.find((s) => s.term === taken.term), 10_000)).startIndex;
  const lateObject = await pollUntil(`an object of term ${oldTerm} at or past index ${start}`, async () => (await listed(objectStore)).wal.find((w) => w.term === oldTerm && w.last >= start), 30_000).catch(async (err: Error) => {
    throw new Error(`${err.message}; listed: ${JSON.stringify(await listed(objectStore), (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v))}\n${n1.kvs.output().slice(-6000)}`);
  });
  t.diagnostic(`term ${taken.term} starts at ${start}; the deposed leader's upload landed as records ${lateObject.first}..${lateObject.last} of term ${oldTerm}`);

  const expected = ['after/0', 'after/1', 'after/2', 'after/3', 'after/4', 'before/0', 'before/1', 'before/2', 'before/3', 'before/4', 'before/degraded'];
  const keysOn = async (endpoint: string) => (await onceClient(t, endpoint).getAll().prefix('').options(within(10_000)).keys()).filter((k) => !k.startsWith('\0')).sort();

  // The old leader follows the new one, without the record it never acknowledged.
  await pollUntil('the old leader following the new one', async () => ((await onceClient(t, n1.endpoint).get('after/4').options(within(5000)).string().catch(() => undefined)) === 'new' ? true : undefined), 30_000);
  for (const n of cluster.nodes) assert.deepEqual(await keysOn(n.endpoint), expected, `${n.id}'s keys`);

  // A node with an empty data directory restores from the object store, then follows.
  const n4 = await cluster.add('n4');
  await pollUntil('n4 caught up', async () => ((await onceClient(t, n4.endpoint).get('after/4').options(within(5000)).string().catch(() => undefined)) === 'new' ? true : undefined), 30_000);
  assert.deepEqual(await keysOn(n4.endpoint), expected, 'a node restored from the object store');

  // A single node restored from a copy of the bucket (it continues the newest term).
  const copy = await localObjectStore(t, 'cluster/');
  await cp(objectStore.root, copy.root, { recursive: true });
  const single = await startKvs(t, { objectStore: copy });
  assert.deepEqual(await keysOn(single.endpoint), expected, 'a single node restored from a copy of the object store');
});
