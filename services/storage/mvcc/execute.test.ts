import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { tempMvccDb } from '../../../testkit/mvcc-fixtures.js';
import { decodeKeyValue, encodeKeyValue } from '../../../shared/mvcc/keyvalue.js';
import { liveCount, liveVersion } from '../../../shared/mvcc/keyindex.js';
import { mainOf, refIsPut, refMain, refRevKey, revKey } from '../../../shared/mvcc/revision.js';
import { prng } from '../../../testkit/prng.js';
import { range, type RangeParams } from '../../../shared/mvcc/range.js';
import { decode, num } from '../../../shared/proto/index.js';
import { Executor } from './execute.js';
import { applyEntry } from './apply.js';
import { MUTATION_PUT, type WalEntry } from '../../../shared/wal/entry.js';
import { dump } from './dump.js';
import { compactStep, finishCompaction } from './compaction.js';
import { Lessor } from '../lease/lessor.js';

const id = { clusterId: '1', memberId: '2', raftTerm: 1 };

function tempDb(t: { after(fn: () => unknown): void }): MvccDb {
  return tempMvccDb(t, 'kvs-exec-');
}

const b = (s: string) => Buffer.from(s);
const put = (key: string, value: string) => ({ key: b(key), value: b(value), lease: 0, prevKv: false, ignoreValue: false, ignoreLease: false });
const all = (over: Partial<RangeParams> = {}): RangeParams => ({
  key: Buffer.from([0]), rangeEnd: Buffer.from([0]), limit: 0, revision: 0, sortOrder: 0, sortTarget: 0,
  keysOnly: false, countOnly: false, minModRevision: 0, maxModRevision: 0, minCreateRevision: 0, maxCreateRevision: 0, ...over,
});

test('replaying the WAL entries of a history rebuilds the identical database', (t) => {
  const live = tempDb(t);
  const replica = tempDb(t);
  const ex = new Executor(live, id);
  const entries: WalEntry[] = [];
  const run = (fn: () => { entry?: WalEntry }) => live.env.transactionSync(() => {
    const { entry } = fn();
    if (entry) entries.push(entry);
  });
  for (let i = 0; i < 20; i++) run(() => ex.put(put(`k${i % 7}`, `v${i}`)));
  run(() => ex.deleteRange({ key: b('k2'), rangeEnd: b('k4'), prevKv: true }));
  run(() => ex.txn({
    compare: [{ result: 0, target: 0, key: b('k0'), rangeEnd: new Uint8Array(0), targetUnion: 'version', version: 3, createRevision: 0, modRevision: 0, value: new Uint8Array(0), lease: 0 }],
    success: [{ requestPut: put('t1', 'x') }, { requestDeleteRange: { key: b('k5'), rangeEnd: new Uint8Array(0), prevKv: false } }],
    failure: [{ requestPut: put('t2', 'y') }],
  }));
  run(() => ex.compact({ revision: 15, physical: true }));
  for (let i = 0; i < 5; i++) run(() => ex.put(put(`k${i}`, `w${i}`)));
  // Leases: keys attached by put and txn put, moved to another lease, detached by a put
  // without one and by a delete, kept by ignore_lease; a revoke deletes the rest.
  const lessor = new Lessor(live, ex, id.memberId, () => {});
  run(() => lessor.grant({ ID: 7, TTL: 60 }));
  run(() => lessor.grant({ ID: 8, TTL: 0 }));
  run(() => lessor.grant({ ID: 0, TTL: 30 }));
  for (const k of ['la', 'lb', 'lc', 'ld', 'le']) run(() => ex.put({ ...put(k, 'x'), lease: 7 }));
  run(() => ex.txn({ compare: [], success: [{ requestPut: { ...put('lf', 'y'), lease: 7 } }], failure: [] }));
  run(() => ex.put({ ...put('lb', 'z'), lease: 8 }));
  run(() => ex.put(put('lc', 'no lease')));
  run(() => ex.put({ ...put('ld', ''), ignoreValue: true, ignoreLease: true }));
  run(() => ex.deleteRange({ key: b('le'), rangeEnd: new Uint8Array(0), prevKv: false }));
  assert.deepEqual(
    [...live.leasekeys.getRange({})].map(({ value }) => value.toString()),
    ['la', 'ld', 'lf', 'lb'],
    'lease 7 holds la, ld, lf; lease 8 holds lb',
  );
  const before = ex.revision;
  run(() => lessor.revoke({ ID: 7 }));
  assert.equal(ex.revision, before + 1, 'a revoke deletes all its keys in one revision');
  run(() => lessor.revoke({ ID: 8 }));
  assert.deepEqual([...live.leasekeys.getRange({})], []);
  assert.equal(liveVersion(live, b('la')), undefined);
  assert.ok(liveVersion(live, b('lc')));

  replica.env.transactionSync(() => entries.forEach((e, i) => applyEntry(replica, e, i + 1)));
  live.env.transactionSync(() => live.meta.putSync('appliedIndex', entries.length));
  assert.deepEqual(dump(replica), dump(live));
});

test('compaction removes superseded history but keeps every live key and later history', (t) => {
  const db = tempDb(t);
  const ex = new Executor(db, id);
  const tx = <T>(fn: () => T): T => db.env.transactionSync(fn) as T;
  tx(() => ex.put(put('a', '1'))); // rev 2
  tx(() => ex.put(put('a', '2'))); // rev 3
  tx(() => ex.put(put('b', '1'))); // rev 4
  tx(() => ex.deleteRange({ key: b('b'), rangeEnd: new Uint8Array(0), prevKv: false })); // rev 5
  tx(() => ex.put(put('a', '3'))); // rev 6
  tx(() => ex.compact({ revision: 5, physical: true }));
  tx(() => finishCompaction(db));

  // Only a@3 (live at 5) and a@6 remain in history; b's versions and tombstone are gone.
  const revs = [...db.history.getRange({})].map(({ value }) => decodeKeyValue(value).modRevision);
  assert.deepEqual(revs, [3, 6]);
  const at5 = range(db, all({ revision: 5 }));
  assert.deepEqual(at5.kvs.map((kv) => Buffer.from(decodeKeyValue(kv).value).toString()), ['2']);
  assert.throws(() => range(db, all({ revision: 4 })), /required revision has been compacted/);
  const now = range(db, all());
  assert.deepEqual(now.kvs.map((kv) => Buffer.from(decodeKeyValue(kv).value).toString()), ['3']);
  assert.throws(() => tx(() => ex.compact({ revision: 5, physical: false })), /compacted/);
  assert.throws(() => tx(() => ex.compact({ revision: 99, physical: false })), /future revision/);
});

test('a put response carries the new revision and the previous version on request', (t) => {
  const db = tempDb(t);
  const ex = new Executor(db, id);
  db.env.transactionSync(() => ex.put(put('k', 'old')));
  const { response } = db.env.transactionSync(() => ex.put({ ...put('k', 'new'), prevKv: true })) as { response: Buffer };
  const res = decode<any>('etcdserverpb.PutResponse', response);
  assert.equal(num(res.header.revision), 3);
  assert.equal(res.prevKv.value.toString(), 'old');
  assert.equal(num(res.prevKv.modRevision), 2);
});

/** Every ref names a history record of its key and revision; every record is named once; `deleted` is exactly the keys whose newest change is a deletion. */
function checkTables(db: MvccDb): void {
  let refs = 0;
  const deletedByIndex: string[] = [];
  for (const key of db.keyrevs.getKeys()) {
    const changes = [...db.keyrevs.getValues(key)];
    const mains = changes.map(refMain);
    assert.deepEqual(mains, [...mains].sort((x, y) => y - x), 'newest change first');
    for (const ref of changes) {
      const rec = db.history.get(refRevKey(ref));
      assert.ok(rec, `history has the change of ${key} at ${refMain(ref)}`);
      const kv = decodeKeyValue(rec);
      assert.equal(Buffer.from(kv.key).toString(), Buffer.from(key).toString());
      assert.equal(kv.modRevision, refMain(ref));
      assert.equal(kv.version === 0, !refIsPut(ref), 'a tombstone exactly for a deletion');
    }
    refs += changes.length;
    if (!refIsPut(changes[0]!)) deletedByIndex.push(Buffer.from(key).toString());
  }
  assert.equal(db.history.getCount(), refs, 'no history record without a ref');
  assert.deepEqual([...db.deleted.getKeys()].map((k) => Buffer.from(k).toString()), deletedByIndex);
}

test('random writes and compactions: the key index, deleted keys and history agree; reads now match a model; replay rebuilds them', (t) => {
  const db = tempDb(t);
  const replica = tempDb(t);
  const ex = new Executor(db, id);
  const rnd = prng(20240611);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const keys = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l'];
  const model = new Map<string, string>();
  const entries: WalEntry[] = [];
  const run = (fn: () => { entry?: WalEntry }) =>
    db.env.transactionSync(() => {
      const { entry } = fn();
      if (entry) entries.push(entry);
    });
  for (let i = 0; i < 600; i++) {
    const r = rnd();
    if (r < 0.6) {
      const k = pick(keys);
      const v = `v${i}`;
      run(() => ex.put(put(k, v)));
      model.set(k, v);
    } else if (r < 0.85) {
      const [x, y] = [pick(keys), pick(keys)].sort();
      run(() => ex.deleteRange({ key: b(x!), rangeEnd: b(`${y}\0`), prevKv: false }));
      for (const k of model.keys()) if (k >= x! && k <= y!) model.delete(k);
    } else if (r < 0.95) {
      const k = pick(keys);
      run(() => ex.txn({ compare: [], success: [{ requestDeleteRange: { key: b(k), rangeEnd: new Uint8Array(0), prevKv: false } }, { requestPut: put(`${k}2`, 't') }], failure: [] }));
      model.delete(k);
      model.set(`${k}2`, 't');
    } else {
      const to = ex.compactRevision + 1 + Math.floor(rnd() * (ex.revision - ex.compactRevision));
      if (to > ex.compactRevision && to <= ex.revision) run(() => ex.compact({ revision: to, physical: true }));
    }
    // The removal of compacted history advances in small steps between the writes.
    if (rnd() < 0.5) db.env.transactionSync(() => compactStep(db, 1 + Math.floor(rnd() * 3)));
    checkTables(db);
    const live = [...model].sort(([x], [y]) => (x < y ? -1 : 1));
    db.env.transactionSync(() => {
      const now = range(db, all());
      assert.deepEqual(now.kvs.map((kv) => { const d = decodeKeyValue(kv); return [Buffer.from(d.key).toString(), Buffer.from(d.value).toString()]; }), live, `op ${i}`);
      assert.equal(range(db, all({ countOnly: true })).count, live.length);
      assert.equal(liveCount(db, { start: Buffer.alloc(0) }), live.length);
      const limited = range(db, all({ limit: 2 }));
      assert.deepEqual([limited.kvs.length, limited.count, limited.more], [Math.min(2, live.length), live.length, live.length > 2]);
    });
  }
  replica.env.transactionSync(() => entries.forEach((e, i) => applyEntry(replica, e, i + 1)));
  db.env.transactionSync(() => db.meta.putSync('appliedIndex', entries.length));
  for (const x of [db, replica]) x.env.transactionSync(() => finishCompaction(x));
  assert.deepEqual(dump(replica), dump(db));
});

test('a history record below the last one (append refused) is stored by a plain put', (t) => {
  const db = tempDb(t);
  const entry = (key: string, rev: number): WalEntry => ({
    revision: rev,
    compactRevision: 0,
    mutations: [{ type: MUTATION_PUT, kv: encodeKeyValue({ key: b(key), createRevision: rev, modRevision: rev, version: 1, value: b(`${key}@${rev}`), lease: 0n }) }],
  });
  db.env.transactionSync(() => {
    applyEntry(db, entry('a', 10), 1);
    applyEntry(db, entry('b', 5), 2);
    applyEntry(db, entry('b', 5), 3); // the same record again
  });
  assert.deepEqual([...db.history.getKeys()].map((k) => mainOf(k)), [5, 10]);
  assert.equal(Buffer.from(decodeKeyValue(db.history.get(revKey(5, 0))!).value).toString(), 'b@5');
  assert.equal(Buffer.from(decodeKeyValue(liveVersion(db, b('a'))!).value).toString(), 'a@10');
  assert.equal(Buffer.from(decodeKeyValue(liveVersion(db, b('b'))!).value).toString(), 'b@5');
});
