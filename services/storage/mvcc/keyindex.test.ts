import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { tempMvccDb } from '../../../testkit/mvcc-fixtures.js';
import { walkRange } from '../../../shared/mvcc/range.js';
import { decodeKeyValue } from '../../../shared/mvcc/keyvalue.js';
import { Executor } from './execute.js';
import { prng } from '../../../testkit/prng.js';

/** A fresh MVCC database in a temporary directory (removed after the test) and its executor. */
function openStore(t: TestContext) {
  const db = tempMvccDb(t, 'kvs-keyindex-');
  return { db, ex: new Executor(db, { clusterId: '1', memberId: '2', raftTerm: 1 }) };
}

// A walk reads every dup with its value until keys with many changes make it go on with keys
// alone (keyindex.ts). Both ways, and the switch in the middle of a walk, must return what a
// plain model of the history says, at the current revision and at every past one.
test('walkRange: keys with one change and keys with many, puts and deletions, at every revision', (t) => {
  const { db, ex } = openStore(t);
  const name = (i: number) => Buffer.from(`key/${String(i).padStart(3, '0')}`);
  const KEYS = 80;
  // Keys 20-49 are busy (dozens of changes each), the others written about once: walks start
  // among quiet keys, cross busy ones, and come back to quiet ones.
  const random = prng(20261129);
  /** Every change, in revision order: [revision, key index, value or null for a deletion]. */
  const changes: [number, number, string | null][] = [];
  const live = new Set<number>();
  const put = (i: number, value: string) => {
    db.env.transactionSync(() => ex.put({ key: name(i), value: Buffer.from(value), lease: 0, prevKv: false, ignoreValue: false, ignoreLease: false }));
    changes.push([ex.revision, i, value]);
    live.add(i);
  };
  for (let i = 0; i < KEYS; i++) put(i, `first ${i}`);
  for (let n = 0; n < 1500; n++) {
    const i = random() < 0.97 ? 20 + Math.floor(random() * 30) : Math.floor(random() * KEYS);
    if (live.has(i) && random() < 0.15) {
      db.env.transactionSync(() => ex.deleteRange({ key: name(i), rangeEnd: new Uint8Array(0), prevKv: false }));
      changes.push([ex.revision, i, null]);
      live.delete(i);
    } else {
      put(i, `${i} at ${n}`);
    }
  }
  const current = ex.revision;
  const expected = (rev: number, from: number, to: number) => {
    const at = new Map<number, string | null>();
    for (const [r, i, v] of changes) if (r <= rev && i >= from && i < to) at.set(i, v);
    return [...at].filter(([, v]) => v !== null).sort(([a], [b]) => a - b).map(([i, v]) => `${name(i)}=${v}`);
  };
  let walks = 0;
  for (const [from, to] of [[0, KEYS], [0, 25], [25, 60], [45, KEYS]] as const) {
    for (let rev = 2; rev <= current; rev += rev < 100 ? 1 : 7) {
      const want = expected(rev, from, to);
      const got: string[] = [];
      const count = walkRange(db, name(from), name(to), rev, current, 0, false, (record) => {
        const kv = decodeKeyValue(Buffer.from(record));
        assert.ok(kv.modRevision <= rev);
        got.push(`${kv.key.toString()}=${kv.value.toString()}`);
      });
      assert.deepEqual(got, want, `keys [${from}, ${to}) at revision ${rev} of ${current}`);
      assert.equal(count, want.length);
      // With a limit the walk stops visiting but counts every key; countOnly visits none.
      const limited: string[] = [];
      const limitedCount = walkRange(db, name(from), name(to), rev, current, 3, false, (record) => {
        limited.push(decodeKeyValue(Buffer.from(record)).key.toString());
      });
      assert.deepEqual(limited, want.slice(0, 3).map((s) => s.split('=')[0]));
      assert.equal(limitedCount, want.length);
      assert.equal(walkRange(db, name(from), name(to), rev, current, 0, true, () => assert.fail('countOnly visited a key')), want.length);
      walks++;
    }
  }
  assert.ok(walks > 400);
  // The busy keys did get dozens of changes each: the keys-alone iteration ran.
  assert.ok(changes.filter(([, i]) => i === 30).length > 20);
});
