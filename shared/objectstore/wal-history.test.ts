import assert from 'node:assert/strict';
import { test } from 'node:test';
import { historyOf, type ListedWal } from './wal-history.js';

const o = (first: number, last: number, term: number): ListedWal => ({ key: `${first}-${last}.t${term}`, first: BigInt(first), last: BigInt(last), term, size: 1 });
const ranges = (h: ReturnType<typeof historyOf>) => h.map((x) => `${x.first}-${x.last}.t${x.term}`);

test('a single term (or a single node, term 0): every object is history', () => {
  assert.deepEqual(ranges(historyOf([o(1, 10, 0), o(11, 20, 0)], new Map())), ['1-10.t0', '11-20.t0']);
  assert.deepEqual(ranges(historyOf([o(1, 10, 2), o(11, 20, 2)], new Map([[2, 1n]]))), ['1-10.t2', '11-20.t2']);
});

test("a deposed leader's late upload at or past the new term's start is not history, even where the new term has nothing yet", () => {
  const starts = new Map([[3, 1n], [4, 101n]]);
  // term 3 acknowledged through 100; its upload of 101..110 landed after term 4 began at 101
  assert.deepEqual(ranges(historyOf([o(1, 100, 3), o(101, 110, 3)], starts)), ['1-100.t3']);
  assert.deepEqual(ranges(historyOf([o(1, 100, 3), o(101, 110, 3), o(101, 103, 4)], starts)), ['1-100.t3', '101-103.t4']);
});

test('an object straddling the start of a newer term is cut there, keeping its own last record', () => {
  const [a] = historyOf([o(95, 110, 3)], new Map([[3, 1n], [4, 101n]]));
  assert.equal(a!.last, 100n);
  assert.equal(a!.objectLast, 110n);
});

test("records a leader uploads again below its start repeat the history: they neither move its start nor cut older terms", () => {
  // term 4 began at 101 but re-uploaded 50..60 (all it reached before a crash): term 3's 61..100 stay
  const h = historyOf([o(1, 100, 3), o(50, 60, 4), o(101, 120, 4)], new Map([[3, 1n], [4, 101n]]));
  assert.deepEqual(ranges(h), ['1-100.t3', '50-60.t4', '101-120.t4']);
});

test('several terms: each is cut by the earliest start of any newer one; a term started below an older one voids it there', () => {
  const starts = new Map([[2, 1n], [3, 51n], [5, 41n]]);
  const h = historyOf([o(1, 60, 2), o(51, 80, 3), o(41, 45, 5)], starts);
  assert.deepEqual(ranges(h), ['1-40.t2', '41-45.t5']);
});

test('a term without a start record begins at its first object (objects from before terms were recorded)', () => {
  assert.deepEqual(ranges(historyOf([o(1, 30, 0), o(21, 40, 1)], new Map())), ['1-20.t0', '21-40.t1']);
});
