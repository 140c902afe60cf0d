import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { tempMvccDb } from '../../../testkit/mvcc-fixtures.js';
import { encodedRange, range, readRevisions, type RangeParams } from '../../../shared/mvcc/range.js';
import { build, rangeResponse, rangeResponseRecycler, recycleRangeResponse, type Header } from '../../../shared/mvcc/responses.js';
import { Executor } from './execute.js';

const b = (s: string) => Buffer.from(s);
const header = (revision: number): Header => ({ clusterId: '14841639068965178418', memberId: '10276657743932975437', revision, raftTerm: 3 });
const params = (over: Partial<RangeParams>): RangeParams => ({
  key: b('k'), rangeEnd: new Uint8Array(0), limit: 0, revision: 0, sortOrder: 0, sortTarget: 0,
  keysOnly: false, countOnly: false, minModRevision: 0, maxModRevision: 0, minCreateRevision: 0, maxCreateRevision: 0, ...over,
});

/** A fresh MVCC database in a temporary directory (removed after the test) and its executor. */
function openStore(t: TestContext) {
  const db = tempMvccDb(t, 'kvs-range-');
  return { db, ex: new Executor(db, { clusterId: '1', memberId: '2', raftTerm: 1 }) };
}

test('encodedRange: the same bytes (or error) as range() and rangeResponse() for every kind of Range', (t) => {
  const { db, ex } = openStore(t);
  const put = (key: string, value: Buffer) => db.env.transactionSync(() => ex.put({ key: b(key), value, lease: 0, prevKv: false, ignoreValue: false, ignoreLease: false }));
  const name = (i: number) => `k${String(i).padStart(3, '0')}`;
  // Versions, deletions, and values around a varint length boundary and above the scratch's 64 KiB.
  for (let i = 0; i < 300; i++) put(name(i), Buffer.alloc(i % 3 === 0 ? 127 : i % 3 === 1 ? 128 : 20, i));
  for (let i = 0; i < 300; i += 7) put(name(i), Buffer.alloc(300, 1));
  db.env.transactionSync(() => ex.deleteRange({ key: b(name(40)), rangeEnd: b(name(60)), prevKv: false }));
  put(name(5), Buffer.alloc(200_000, 5));
  const past = 150;
  const { current } = readRevisions(db);

  const ranges: Partial<RangeParams>[] = [
    { key: b(name(3)) }, { key: b(name(45)) }, { key: b('nope') },
    { key: b(name(10)), rangeEnd: b(name(90)) }, { key: b(name(0)), rangeEnd: Buffer.from([0]) },
    { key: Buffer.from([0]), rangeEnd: Buffer.from([0]) }, { key: b(name(90)), rangeEnd: b(name(10)) },
    { key: b('k'.repeat(600)), rangeEnd: Buffer.from([0]) },
  ];
  const options: Partial<RangeParams>[] = [
    {}, { limit: 1 }, { limit: 5 }, { limit: 1000 }, { revision: past }, { revision: past, limit: 3 }, { revision: current },
    { sortOrder: 1 }, { sortOrder: 1, limit: 4 }, { sortOrder: 2, limit: 4 }, { sortTarget: 3 }, { sortOrder: 2, sortTarget: 4, limit: 2 },
    { keysOnly: true }, { countOnly: true }, { countOnly: true, limit: 2 }, { minModRevision: 100 }, { maxCreateRevision: 50, limit: 2 },
  ];
  let compared = 0;
  for (const r of ranges) {
    for (const o of options) {
      const p = params({ ...r, ...o });
      const rr = range(db, p);
      const expected = build((w) => rangeResponse(w, header(rr.revision), rr.kvs, rr.more, rr.count));
      assert.ok(encodedRange(db, p, header).equals(expected), `${JSON.stringify({ ...r, ...o })}`);
      compared++;
    }
  }
  assert.equal(compared, ranges.length * options.length);
  // The errors are range()'s: an empty key, a future revision.
  for (const p of [params({ key: new Uint8Array(0) }), params({ revision: current + 1 })]) {
    const err = (() => {
      try {
        range(db, p);
      } catch (e) {
        return e as Error;
      }
    })();
    assert.ok(err);
    assert.throws(() => encodedRange(db, p, header), (e: Error) => e.message === err.message);
  }
});

test('encodedRange: a large response keeps its bytes until it is given back, and its buffer then serves a later Range', (t) => {
  const { db, ex } = openStore(t);
  // 400 keys of 1 KiB: a Range of all of them is above the 64 KiB a response is handed over at.
  for (let i = 0; i < 400; i++) {
    db.env.transactionSync(() => ex.put({ key: b(`k${String(i).padStart(3, '0')}`), value: Buffer.alloc(1024, i), lease: 0, prevKv: false, ignoreValue: false, ignoreLease: false }));
  }
  const all = params({ key: b('k'), rangeEnd: b('l') });
  const firstHalf = params({ key: b('k'), rangeEnd: b('k200') });
  const expected = (p: RangeParams) => {
    const rr = range(db, p);
    return build((w) => rangeResponse(w, header(rr.revision), rr.kvs, rr.more, rr.count));
  };

  // Two responses in flight at once: neither is written over by the other.
  const a = encodedRange(db, all, header);
  const aBytes = Buffer.from(a);
  const c = encodedRange(db, firstHalf, header);
  assert.notEqual(c.buffer, a.buffer);
  assert.ok(a.equals(aBytes) && a.equals(expected(all)));
  assert.ok(c.equals(expected(firstHalf)));

  // Given back (its bytes are in the socket), a's buffer is where a later Range is encoded.
  recycleRangeResponse(a);
  recycleRangeResponse(a); // twice is once
  encodedRange(db, firstHalf, header); // takes the scratch that was allocated after c
  const d = encodedRange(db, all, header);
  assert.equal(d.buffer, a.buffer);
  assert.ok(d.equals(expected(all)));
  assert.ok(c.equals(expected(firstHalf)), 'a response not given back is never reused');

  // A small response is a copy of its own; giving it back changes nothing.
  const small = encodedRange(db, params({ key: b('k001') }), header);
  assert.equal(rangeResponseRecycler(small), undefined);
  assert.ok(rangeResponseRecycler(c));
  recycleRangeResponse(small);
  assert.ok(small.equals(expected(params({ key: b('k001') }))));
});
