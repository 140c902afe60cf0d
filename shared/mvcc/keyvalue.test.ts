import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeKeyValue, decodeKeyValue, valueFieldSpan, type KeyValue } from './keyvalue.js';
import { encode, decode, bigint, num } from '../proto/index.js';

const cases: KeyValue[] = [
  { key: Buffer.from('a'), createRevision: 2, modRevision: 2, version: 1, value: Buffer.from('v'), lease: 0n },
  { key: Buffer.from('key'), createRevision: 0, modRevision: 9, version: 0, value: new Uint8Array(0), lease: 0n },
  { key: Buffer.alloc(300, 7), createRevision: 2 ** 40 + 3, modRevision: 2 ** 52, version: 127, value: Buffer.alloc(70_000, 1), lease: 7587862072907261195n },
  { key: Buffer.from([0]), createRevision: 128, modRevision: 16384, version: 2 ** 31, value: Buffer.from([0, 255]), lease: -1n },
];

/** The object protobufjs should encode: like Go, only fields that differ from their default. */
function pbObject(kv: KeyValue): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  if (kv.key.length) o.key = kv.key;
  if (kv.createRevision) o.createRevision = kv.createRevision;
  if (kv.modRevision) o.modRevision = kv.modRevision;
  if (kv.version) o.version = kv.version;
  if (kv.value.length) o.value = kv.value;
  if (kv.lease) o.lease = kv.lease.toString();
  return o;
}

test('KeyValue encoding is byte-identical to protobuf mvccpb.KeyValue', () => {
  for (const kv of cases) {
    const ours = encodeKeyValue(kv);
    const theirs = encode('mvccpb.KeyValue', pbObject(kv));
    assert.deepEqual(ours, theirs);
  }
});

test('KeyValue decoding reads protobuf mvccpb.KeyValue, 64-bit leases included', () => {
  for (const kv of cases) {
    const back = decodeKeyValue(encode('mvccpb.KeyValue', pbObject(kv)));
    assert.deepEqual(Buffer.from(back.key), Buffer.from(kv.key));
    assert.deepEqual(Buffer.from(back.value), Buffer.from(kv.value));
    assert.equal(back.createRevision, kv.createRevision);
    assert.equal(back.modRevision, kv.modRevision);
    assert.equal(back.version, kv.version);
    assert.equal(back.lease, kv.lease);
    const viaPb = decode<any>('mvccpb.KeyValue', encodeKeyValue(kv));
    assert.equal(bigint(viaPb.lease), kv.lease);
    assert.equal(num(viaPb.modRevision), kv.modRevision);
  }
});

test('a KeyValue without its value field is what protobuf encodes with an empty value; a cut record is refused', () => {
  for (const kv of cases) {
    const rec = encodeKeyValue(kv);
    const [from, to] = valueFieldSpan(rec);
    const without = Buffer.concat([rec.subarray(0, from), rec.subarray(to)]);
    assert.deepEqual(without, encode('mvccpb.KeyValue', pbObject({ ...kv, value: new Uint8Array(0) })));
  }
  // Cut inside the value's length, or inside the key: damage, not a read past the end.
  const rec = encodeKeyValue(cases[2]!);
  assert.throws(() => valueFieldSpan(rec.subarray(0, 2)), /corrupt KeyValue record/);
  // The 70,000-byte value's length takes three bytes: keep the tag and the first of them.
  assert.throws(() => valueFieldSpan(rec.subarray(0, valueFieldSpan(rec)[0] + 2)), /corrupt KeyValue record/);
  // Cut inside the value's bytes, and inside the key's.
  assert.throws(() => valueFieldSpan(rec.subarray(0, valueFieldSpan(rec)[1] - 1)), /corrupt KeyValue record/);
  assert.throws(() => valueFieldSpan(rec.subarray(0, 4)), /corrupt KeyValue record/);
});
