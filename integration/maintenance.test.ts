// Maintenance against a real etcd 3.4, over raw gRPC (integration/differential.ts): Status,
// Alarm, Defragment, MoveLeader and HashKV. HashKV is defined over the same bytes etcd hashes
// (shared/mvcc/hash.ts), so after the same history the two servers give the same hash, and
// the same errors and compact_revision for every revision argument.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { startPair, encodeRequest, type Differ, type Outcome, type Plain } from './differential.js';
import { prng } from '../testkit/prng.js';
import { client, startKvs } from '../testkit/harness.js';
import { rawClient } from '../testkit/raw-client.js';

const MAINTENANCE = 'etcdserverpb.Maintenance';

/** Both servers must give the same answer (header identity fields aside). */
async function same(d: Differ, method: string, req: object): Promise<Outcome> {
  const { etcd, kvs } = await d.both(MAINTENANCE, method, req);
  assert.deepStrictEqual(kvs, etcd, `Maintenance.${method} ${JSON.stringify(req)}: kvs and etcd differ`);
  return etcd;
}

function ok(o: Outcome): Plain {
  if ('error' in o) assert.fail(`failed: ${o.error.code} ${o.error.details}`);
  return o.ok;
}

/** HashKV at every revision from -1 to current + 1 must be the same on both. */
async function hashKVEverywhere(d: Differ, context: string): Promise<number> {
  let hashed = 0;
  for (let rev = -1; rev <= d.revision + 1; rev++) {
    const { etcd, kvs } = await d.both(MAINTENANCE, 'HashKV', { revision: rev });
    assert.deepStrictEqual(kvs, etcd, `HashKV revision ${rev} (${context}, current ${d.revision}, compacted ${d.compacted})`);
    if ('ok' in etcd) hashed++;
  }
  return hashed;
}

test('Maintenance answers as etcd 3.4 does', async (t) => {
  const d = await startPair(t);

  await t.test('Status has every field etcd fills, with the same meaning', async () => {
    await d.put({ key: 'a', value: '1' });
    const { etcd, kvs } = await d.both(MAINTENANCE, 'Status', {});
    for (const [name, o] of [['etcd', etcd], ['kvs', kvs]] as const) {
      const s = ok(o);
      assert.match(s.version, /^3\.4\./, `${name} version`);
      assert.ok(Number(s.dbSize) > 0 && Number(s.dbSizeInUse) > 0, `${name} sizes ${s.dbSize} ${s.dbSizeInUse}`);
      assert.ok(Number(s.dbSizeInUse) <= Number(s.dbSize), `${name}: in use ${s.dbSizeInUse} > size ${s.dbSize}`);
      assert.notEqual(s.leader, '0', `${name} has a leader`);
      assert.ok(Number(s.raftIndex) > 0, `${name} raft index`);
      assert.equal(s.raftAppliedIndex, s.raftIndex, `${name}: a single member has applied what it committed`);
      assert.notEqual(s.raftTerm, '0', `${name} raft term`);
    }
    // What is left must be equal: header revision, errors, isLearner.
    const strip = (o: Outcome) => {
      const { version, dbSize, dbSizeInUse, leader, raftIndex, raftAppliedIndex, raftTerm, ...rest } = ok(o);
      return rest;
    };
    assert.deepStrictEqual(strip(kvs), strip(etcd));
    assert.deepStrictEqual(ok(kvs).errors, []);
  });

  await t.test('Alarm: nothing to list, disarming answers the same empty response', async () => {
    await same(d, 'Alarm', { action: 'GET' });
    await same(d, 'Alarm', { action: 'DEACTIVATE', memberID: 1, alarm: 'NOSPACE' });
    await same(d, 'Alarm', { action: 'DEACTIVATE', memberID: 0, alarm: 'NONE' });
    assert.deepStrictEqual(ok(await same(d, 'Alarm', { action: 'GET' })).alarms, []);
  });

  await t.test('Alarm ACTIVATE is refused by kvs with a clear error (etcd 3.4 raises it)', async () => {
    // Not sent to etcd: ACTIVATE with member 0 makes etcd 3.4.23 exit ("cannot put key into bucket").
    const out = await d.kvs.call('Alarm', encodeRequest('Alarm', { action: 'ACTIVATE', memberID: 1, alarm: 'NOSPACE' }, MAINTENANCE), MAINTENANCE);
    assert.ok('error' in out);
    assert.equal(out.error.code, grpc.status.FAILED_PRECONDITION);
    assert.match(out.error.details, /^kvs: alarms cannot be activated/);
    assert.deepStrictEqual(ok(await same(d, 'Alarm', { action: 'GET' })).alarms, []);
  });

  await t.test('Defragment', async () => {
    assert.deepStrictEqual(ok(await same(d, 'Defragment', {})), { header: null });
  });

  await t.test('MoveLeader: to itself succeeds, to anything else is a bad transferee', async () => {
    for (const target of [0, 12345, '18446744073709551615']) {
      const o = await same(d, 'MoveLeader', { targetID: target });
      assert.deepStrictEqual(o, { error: { code: grpc.status.FAILED_PRECONDITION, details: 'etcdserver: bad leader transferee' } });
    }
    const { etcd, kvs } = await d.both(MAINTENANCE, 'Status', {});
    const [toEtcd, toKvs] = await Promise.all([
      d.etcd.call('MoveLeader', encodeRequest('MoveLeader', { targetID: ok(etcd).leader }, MAINTENANCE), MAINTENANCE),
      d.kvs.call('MoveLeader', encodeRequest('MoveLeader', { targetID: ok(kvs).leader }, MAINTENANCE), MAINTENANCE),
    ]);
    assert.deepStrictEqual(toKvs, toEtcd);
    assert.deepStrictEqual(toKvs, { ok: { header: null } });
  });

  await t.test('HashKV: same hash, errors and compact_revision at every revision', async () => {
    await hashKVEverywhere(d, 'after one put');
    // A history with every kind of change: overwrites, a multi-op txn (sub-revisions),
    // range deletes (several tombstones in one revision), and seeded random operations.
    await d.put({ key: 'b', value: 'x' });
    await d.put({ key: 'a', value: '2' });
    await d.txn({ success: [{ requestPut: { key: 't1', value: 'v' } }, { requestPut: { key: 't2', value: 'w' } }, { requestDeleteRange: { key: 'b' } }] });
    await d.del({ key: 't', rangeEnd: 'u' });
    const rnd = prng(20261121);
    for (let i = 0; i < 40; i++) {
      const key = `r${Math.floor(rnd() * 8)}`;
      if (rnd() < 0.7) await d.put({ key, value: `v${i}`.repeat(1 + Math.floor(rnd() * 5)) });
      else await d.del({ key, rangeEnd: rnd() < 0.5 ? `r${Math.floor(rnd() * 8) + 1}` : '' });
    }
    assert.ok((await hashKVEverywhere(d, 'before compaction')) > 40);

    await d.compact({ revision: 20 });
    await hashKVEverywhere(d, 'compacted at 20');
    for (let i = 0; i < 10; i++) await d.put({ key: `r${i % 3}`, value: `after${i}` });
    await d.compact({ revision: d.revision - 3 });
    await hashKVEverywhere(d, 'compacted again');
    // Everything deleted: etcd's "no key is live" rule for compacted revisions. etcd then
    // hashes whatever its compaction has not yet removed, so wait for it (physical), as kvs
    // always does.
    await d.del({ key: '\0', rangeEnd: '\0' });
    await d.compact({ revision: d.revision - 1, physical: true });
    await hashKVEverywhere(d, 'all keys deleted');
  });

  await t.test('Hash has the header of the current revision (the value is kvs own)', async () => {
    const { etcd, kvs } = await d.both(MAINTENANCE, 'Hash', {});
    assert.equal(ok(kvs).header.revision, ok(etcd).header.revision);
    assert.equal(typeof ok(kvs).hash, 'number');
  });
});

// HashKV and Hash read the whole history: on a long one that takes long, and the gateway used
// to compute them on its event loop, so every other client of the node waited (seconds over
// 600,000 revisions). They run on a worker thread now.
test('a HashKV over a long history does not hold up other requests to the node', async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  // About 150,000 changes (history records, what HashKV reads): Txns of 128 puts, 16 at a time.
  const value = 'v'.repeat(64);
  for (let batch = 0; batch < 1200; batch += 16) {
    await Promise.all(
      Array.from({ length: 16 }, (_, j) => {
        const txn = c.if(`k/${batch + j}/0`, 'Version', '>', -1);
        return txn.then(...Array.from({ length: 128 }, (_, i) => c.put(`k/${(batch + j) % 50}/${i}`).value(value))).commit();
      }),
    );
  }
  const revision = Number((await c.maintenance.status()).header.revision);
  assert.equal(revision, 1201);

  // Serial gets while one HashKV runs: none may wait as long as the hash takes.
  let hashing = true;
  const waits: number[] = [];
  const reader = (async () => {
    while (hashing) {
      const at = performance.now();
      await c.get('k/0/0').string();
      waits.push(performance.now() - at);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  const started = performance.now();
  const h = await rawClient(t, node.endpoint, MAINTENANCE)('HashKV', 'etcdserverpb.HashKVRequest', { revision: 0 });
  const tookMs = performance.now() - started;
  hashing = false;
  await reader;
  assert.equal(h.err, undefined);
  const longest = Math.max(...waits);
  t.diagnostic(`HashKV over 153,600 changes took ${Math.round(tookMs)} ms; ${waits.length} gets meanwhile, the longest ${Math.round(longest)} ms`);
  assert.ok(tookMs > 300, `the hash took only ${Math.round(tookMs)} ms: too short a history to show anything`);
  assert.ok(longest < tookMs / 2, `a get waited ${Math.round(longest)} ms while the hash took ${Math.round(tookMs)} ms`);
});
