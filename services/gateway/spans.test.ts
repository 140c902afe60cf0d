import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readKind, writeKind } from './spans.js';
import { encode } from '../../shared/proto/index.js';
import { Op } from '../../shared/storage/ops.js';

const k = (s: string) => Buffer.from(s);

test('a Range is get, exists, list or count by its shape; a serializable one has no span', () => {
  assert.equal(readKind({ key: k('/a/b') }), 'get');
  assert.equal(readKind({ key: k('/a/b'), keysOnly: true }), 'exists');
  assert.equal(readKind({ key: k('/a/'), rangeEnd: k('/a0') }), 'list');
  assert.equal(readKind({ key: k('/a/'), rangeEnd: k('/a0'), keysOnly: true }), 'list');
  assert.equal(readKind({ key: k('/a/'), rangeEnd: k('/a0'), countOnly: true }), 'count');
  assert.equal(readKind({ key: k('/a/b'), countOnly: true }), 'count');
  assert.equal(readKind({ key: k('/a/b'), rangeEnd: new Uint8Array(0) }), 'get', 'an empty range_end is one key');
  assert.equal(readKind({ key: k('/a/b'), serializable: true }), undefined);
});

test('a write is named from its undecoded body', () => {
  assert.deepEqual(writeKind(Op.PUT, encode('etcdserverpb.PutRequest', { key: k('/r/p/x'), value: k('v') })), { kind: 'put', key: k('/r/p/x') });
  assert.deepEqual(writeKind(Op.DELETE_RANGE, encode('etcdserverpb.DeleteRangeRequest', { key: k('/r/p/'), rangeEnd: k('/r/p0') })), { kind: 'delete', key: k('/r/p/') });
  const create = { compare: [{ result: 0, target: 2, key: k('/r/p/x'), modRevision: 0 }], success: [{ requestPut: { key: k('/r/p/x') } }] };
  assert.equal(writeKind(Op.TXN, encode('etcdserverpb.TxnRequest', create)).kind, 'create');
  assert.deepEqual(writeKind(Op.COMPACT, encode('etcdserverpb.CompactionRequest', { revision: 3 })), { kind: 'compact' });
});

test('a body that does not decode is still named by its operation, without a key', () => {
  const garbage = Buffer.from([0x0a, 0xff, 0xff]);
  assert.deepEqual(writeKind(Op.PUT, garbage), { kind: 'put' });
  assert.deepEqual(writeKind(Op.DELETE_RANGE, garbage), { kind: 'delete' });
  assert.deepEqual(writeKind(Op.TXN, garbage), { kind: 'txn' });
});
