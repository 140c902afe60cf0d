import { test } from 'node:test';
import assert from 'node:assert/strict';
import { byRevision, entryOf } from './follow.js';
import { decodeKeyValue } from '../../../shared/mvcc/keyvalue.js';
import { MUTATION_DELETE, MUTATION_PUT } from '../../../shared/wal/entry.js';

const kv = (key: string, mod: number, extra: Partial<{ createRevision: number; version: number; value: string; lease: number }> = {}) => ({
  key: Buffer.from(key),
  createRevision: extra.createRevision ?? mod,
  modRevision: mod,
  version: extra.version ?? 1,
  value: Buffer.from(extra.value ?? ''),
  lease: extra.lease ?? 0,
});

test('a watch response splits into revisions in order, a Txn\'s changes together', () => {
  const events = [
    { type: 0, kv: kv('a', 5) },
    { type: 0, kv: kv('b', 6) },
    { type: 1, kv: kv('c', 6) },
    { type: 0, kv: kv('a', 7, { version: 2, createRevision: 5 }) },
  ];
  assert.deepEqual(byRevision(events).map((g) => [g.revision, g.events.length]), [[5, 1], [6, 2], [7, 1]]);
});

test('a revision\'s events become the WAL entry kvs would write: puts keep etcd\'s revisions, deletions are tombstones', () => {
  const e = entryOf(9, [
    { type: 0, kv: kv('k', 9, { createRevision: 3, version: 4, value: 'v', lease: 7 }) },
    { type: 1, kv: { ...kv('gone', 9), createRevision: 0, version: 0 } },
  ]);
  assert.equal(e.revision, 9);
  assert.deepEqual(e.mutations.map((m) => m.type), [MUTATION_PUT, MUTATION_DELETE]);
  const put = decodeKeyValue(e.mutations[0]!.kv);
  assert.deepEqual([Buffer.from(put.key).toString(), put.createRevision, put.modRevision, put.version, Buffer.from(put.value).toString(), put.lease], ['k', 3, 9, 4, 'v', 7n]);
  const del = decodeKeyValue(e.mutations[1]!.kv);
  assert.deepEqual([Buffer.from(del.key).toString(), del.modRevision, del.version], ['gone', 9, 0]);
});
