import { test } from 'node:test';
import assert from 'node:assert/strict';
import { META, type MvccDb } from '../../../shared/mvcc/schema.js';
import { liveCount } from '../../../shared/mvcc/keyindex.js';
import { range, type RangeParams } from '../../../shared/mvcc/range.js';
import { readHistory, compactionPending } from '../../../shared/mvcc/history.js';
import { hashAll, hashKV } from '../../../shared/mvcc/hash.js';
import { prng } from '../../../testkit/prng.js';
import { putRequest as put, randomWrite, tempMvccDb } from '../../../testkit/mvcc-fixtures.js';
import { Executor } from './execute.js';
import { compactStep, finishCompaction } from './compaction.js';
import { dump } from './dump.js';

const id = { clusterId: '1', memberId: '2', raftTerm: 1 };
const b = (s: string) => Buffer.from(s);
const NONE = new Uint8Array(0);
const all = (over: Partial<RangeParams> = {}): RangeParams => ({
  key: Buffer.from([0]), rangeEnd: Buffer.from([0]), limit: 0, revision: 0, sortOrder: 0, sortTarget: 0,
  keysOnly: false, countOnly: false, minModRevision: 0, maxModRevision: 0, minCreateRevision: 0, maxCreateRevision: 0, ...over,
});

const tempDb = (t: { after(fn: () => unknown): void }): MvccDb => tempMvccDb(t, 'kvs-compaction-');

/** What readers can observe of a store: Range (and counts) at every readable revision, HashKV, Hash, watch history. */
function observe(db: MvccDb): unknown {
  const current = db.meta.get(META.revision) as number;
  const compacted = (db.meta.get(META.compactRevision) as number | undefined) ?? 0;
  const out: unknown[] = [];
  for (let rev = Math.max(1, compacted); rev <= current; rev++) {
    const r = range(db, all({ revision: rev }));
    out.push([rev, r.count, r.kvs.map((kv) => kv.toString('hex')), range(db, all({ revision: rev, countOnly: true })).count]);
    out.push(hashKV(db, rev === compacted ? 0 : rev));
  }
  out.push(range(db, all({ limit: 2 })).count, liveCount(db, { start: Buffer.alloc(0) }));
  out.push(hashAll(db));
  const from = Math.max(1, compacted);
  out.push(readHistory(db, from, current).changes.map((c) => [c.revision, c.type, c.kv.toString('hex')]));
  return out;
}

test('compaction in small steps: readers see exactly what they see after an immediate removal, at every step', (t) => {
  const eager = tempDb(t);
  const stepped = tempDb(t);
  const exE = new Executor(eager, id);
  const exS = new Executor(stepped, id);
  const rnd = prng(7);
  const keys = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
  let steps = 0;
  let sawPending = 0;
  for (let i = 0; i < 400; i++) {
    const write = randomWrite(rnd, keys, i, exE);
    if (!write) continue;
    const { op } = write;
    eager.env.transactionSync(() => {
      op(exE);
      finishCompaction(eager);
    });
    stepped.env.transactionSync(() => op(exS));
    // Steps of one to three records, not after every write.
    if (rnd() < 0.4) {
      stepped.env.transactionSync(() => compactStep(stepped, 1 + Math.floor(rnd() * 3)));
      steps++;
    }
    if (compactionPending(stepped)) sawPending++;
    stepped.env.transactionSync(() => {
      eager.env.transactionSync(() => assert.deepEqual(observe(stepped), observe(eager), `after op ${i}`));
    });
  }
  assert.ok(steps > 100 && sawPending > 50, `the removal was pending during many checks (${sawPending}, ${steps} steps)`);
  stepped.env.transactionSync(() => finishCompaction(stepped));
  assert.equal(compactionPending(stepped), false);
  assert.equal(stepped.meta.get(META.compactCursor), undefined);
  assert.deepEqual(dump(stepped), dump(eager), 'once finished, the tables are identical');
});

test('a key with many versions is removed across steps, oldest first; its deletion goes last', (t) => {
  const db = tempDb(t);
  const ex = new Executor(db, id);
  const tx = <T>(fn: () => T): T => db.env.transactionSync(fn) as T;
  for (let i = 0; i < 50; i++) tx(() => ex.put(put('hot', `v${i}`))); // revs 2..51
  tx(() => ex.put(put('other', 'x'))); // 52
  tx(() => ex.deleteRange({ key: b('hot'), rangeEnd: NONE, prevKv: false })); // 53
  tx(() => ex.put(put('later', 'y'))); // 54
  tx(() => ex.compact({ revision: 53, physical: false }));
  assert.equal(db.history.getCount(), 53);
  let steps = 0;
  while (!tx(() => compactStep(db, 10))) {
    steps++;
    // Until its last version goes, 'hot' stays in both the index and the deleted keys.
    const refs = db.keyrevs.getValuesCount(b('hot'));
    assert.equal(db.deleted.get(b('hot')) !== undefined, refs > 0);
    assert.equal(range(db, all({ revision: 53 })).count, 1);
    assert.equal(range(db, all({ countOnly: true })).count, 2);
  }
  assert.ok(steps >= 5, `${steps} steps of 10 records`);
  assert.deepEqual([...db.history.getRange({})].length, 2, 'other@52 and later@54 remain');
  assert.equal(db.keyrevs.getValuesCount(b('hot')), 0);
  assert.equal(db.deleted.get(b('hot')), undefined);
  assert.equal(db.meta.get(META.compactedThrough), 53);
});

test('a compaction to a higher revision while one is pending moves the target; the walk continues from its cursor', (t) => {
  const db = tempDb(t);
  const ref = tempDb(t);
  for (const [x, eager] of [[db, false], [ref, true]] as const) {
    const ex = new Executor(x, id);
    const tx = <T>(fn: () => T): T => x.env.transactionSync(fn) as T;
    for (let i = 0; i < 60; i++) tx(() => ex.put(put(`k${i % 6}`, `v${i}`)));
    tx(() => ex.compact({ revision: 30, physical: false }));
    if (eager) tx(() => finishCompaction(x));
    else tx(() => compactStep(x, 20));
    if (!eager) assert.ok(x.meta.get(META.compactCursor), 'a cursor is kept between steps');
    tx(() => ex.compact({ revision: 55, physical: false }));
    tx(() => finishCompaction(x));
  }
  assert.deepEqual(dump(db), dump(ref));
  assert.equal(db.history.getCount(), 6 + 6, 'each key once at 55, and the 6 later puts (56..61)');
});

test('HashKV when no key is live (every stored change counts) does not count what the pending removal will delete', (t) => {
  const [pending, done] = [tempDb(t), tempDb(t)];
  for (const db of [pending, done]) {
    const ex = new Executor(db, id);
    const tx = <T>(fn: () => T): T => db.env.transactionSync(fn) as T;
    tx(() => ex.put(put('a', '1'))); // 2
    tx(() => ex.put(put('a', '2'))); // 3
    tx(() => ex.deleteRange({ key: b('a'), rangeEnd: NONE, prevKv: false })); // 4
    tx(() => ex.put(put('b', '1'))); // 5
    tx(() => ex.deleteRange({ key: b('b'), rangeEnd: NONE, prevKv: false })); // 6
    tx(() => ex.compact({ revision: 5, physical: false }));
    if (db === done) tx(() => finishCompaction(db));
  }
  assert.equal(compactionPending(pending), true);
  assert.equal(pending.history.getCount(), 5);
  assert.deepEqual(hashKV(pending, 6), hashKV(done, 6));
  assert.deepEqual(hashKV(pending, 0), hashKV(done, 0));
  assert.equal(hashAll(pending), hashAll(done));
});
