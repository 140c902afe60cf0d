// The embedding API's pure conversions: keys and prefixes to etcd ranges, txn shapes to etcd's
// TxnRequest (and the write kinds storage counts them as), responses back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode, encode } from '../shared/proto/index.js';
import { classifyTxn } from '../shared/mvcc/write-kind.js';
import { encodeKeyValue } from '../shared/mvcc/keyvalue.js';
import { encodeTxn, keyValueOf, leaseId, rangeOf, toBytes, txnMessage, txnResult } from './codec.js';

test('keys: strings are UTF-8, bytes are used as they are; a prefix is etcd\'s prefix range', () => {
  assert.deepEqual([...toBytes('é')], [0xc3, 0xa9]);
  const bytes = new Uint8Array([1, 2, 3]);
  assert.equal(toBytes(bytes).buffer, bytes.buffer);
  assert.throws(() => toBytes(7 as unknown as string), /key must be a string or a Uint8Array, got number/);
  assert.deepEqual(rangeOf(Buffer.from('a'), false).map((b) => b.toString('hex')), ['61', '']);
  assert.deepEqual(rangeOf(Buffer.from('a/'), true).map((b) => b.toString()), ['a/', 'a0']);
  assert.deepEqual(rangeOf(Buffer.from([0x61, 0xff]), true).map((b) => b.toString('hex')), ['61ff', '62']);
  assert.deepEqual(rangeOf(Buffer.alloc(0), true).map((b) => b.toString('hex')), ['00', '00'], "'' is every key");
  assert.equal(leaseId({ id: 5n, ttl: 10 }), 5n);
  assert.equal(leaseId(undefined), 0n);
  assert.throws(() => leaseId(5 as unknown as bigint), /lease must be a bigint lease id/);
});

test('txn shapes: create, update and guarded delete are the Kubernetes shapes storage counts as such', () => {
  const guard = (rev: number) => [{ key: 'k', target: 'modRevision' as const, op: '==' as const, value: rev }];
  const roundTrip = (m: ReturnType<typeof txnMessage>) => decode('etcdserverpb.TxnRequest', encodeTxn(m));
  assert.equal(classifyTxn(roundTrip(txnMessage(guard(0), [{ put: 'k', value: 'v' }], [{ get: 'k' }]))).kind, 'create');
  assert.equal(classifyTxn(roundTrip(txnMessage(guard(4), [{ put: 'k', value: 'v' }], [{ get: 'k' }]))).kind, 'update');
  assert.equal(classifyTxn(roundTrip(txnMessage(guard(4), [{ delete: 'k' }], [{ get: 'k' }]))).kind, 'delete_if_revision');
  assert.equal(classifyTxn(roundTrip(txnMessage([], [{ put: 'a', value: '1' }, { put: 'b', value: '2' }], []))).kind, 'txn');
  const m = roundTrip(txnMessage(
    [{ key: 'v', target: 'value', op: '!=', value: 'x' }, { key: 'l', target: 'lease', op: '<', value: 9n }, { key: 'c', target: 'createRevision', op: '>', value: 3 }],
    [{ delete: 'p/', prefix: true }, { get: 'p/', prefix: true, limit: 2 }],
    [],
  ));
  assert.deepEqual(m.compare.map((c: { result: number; target: number }) => [c.result, c.target]), [[3, 3], [2, 4], [1, 1]]);
  assert.equal(Buffer.from(m.success[0].requestDeleteRange.rangeEnd).toString(), 'p0');
  assert.equal(Number(m.success[1].requestRange.limit), 2);
  assert.throws(() => txnMessage([{ key: 'k', target: 'modRevision', op: '=' as never, value: 1 }], [], []), /compare op must be one of ==, !=, <, >/);
  assert.throws(() => txnMessage([], [{ nothing: 1 } as never], []), /a txn operation is/);
});

test('responses: a TxnResponse as results in branch order; a stored record as a KeyValue copy', () => {
  const kv = { key: Buffer.from('k'), value: Buffer.from('v'), createRevision: 2, modRevision: 3, version: 2, lease: 0n };
  const body = encode('etcdserverpb.TxnResponse', {
    header: { revision: 7 },
    succeeded: true,
    responses: [{ responsePut: { header: { revision: 7 } } }, { responseDeleteRange: { deleted: 2 } }, { responseRange: { kvs: [{ ...kv, lease: 0 }], count: 1 } }],
  });
  const r = txnResult(body);
  assert.equal(r.succeeded, true);
  assert.equal(r.revision, 7);
  assert.deepEqual(r.results.map((x) => x.type), ['put', 'delete', 'get']);
  assert.equal(r.results[1]!.type === 'delete' && r.results[1]!.deleted, 2);
  assert.deepEqual(r.results[2]!.type === 'get' && r.results[2]!.kvs[0], kv);
  const stored = encodeKeyValue({ ...kv, lease: 2n ** 62n });
  const copy = keyValueOf(stored);
  assert.equal(copy.lease, 2n ** 62n, 'lease ids keep all 64 bits');
  stored.fill(0);
  assert.equal(copy.value.toString(), 'v', 'a copy, not a view of LMDB memory');
});
