import { test } from 'node:test';
import assert from 'node:assert/strict';
import protobuf from 'protobufjs';
import { encodeLease, etcdRevisionKey } from './write.js';

test("etcd's revision key: 8-byte big-endian main, '_', 8-byte big-endian sub, 't' for a deletion", () => {
  const k = etcdRevisionKey(2 ** 40 + 5, 3, false);
  const expected = Buffer.alloc(17);
  expected.writeBigInt64BE(BigInt(2 ** 40 + 5), 0);
  expected[8] = 0x5f;
  expected.writeBigInt64BE(3n, 9);
  assert.deepEqual(k, expected);
  assert.deepEqual(etcdRevisionKey(7, 0, true), Buffer.concat([Buffer.from('00000000000000075f0000000000000000', 'hex'), Buffer.from('t')]));
});

test('leasepb.Lease {ID = 1, TTL = 2 (int64)} as protobufjs encodes it', () => {
  // etcd's lease/leasepb/lease.proto, the fields a lease bucket holds.
  const Lease = new protobuf.Type('Lease').add(new protobuf.Field('ID', 1, 'int64')).add(new protobuf.Field('TTL', 2, 'int64'));
  for (const [id, ttl] of [[1n, 5], [0x340aa2340e9d6001n, 300], [-1n, 1], [2n ** 62n, 9_000_000_000]] as const) {
    const expected = Buffer.from(Lease.encode(Lease.fromObject({ ID: id.toString(), TTL: ttl })).finish());
    assert.deepEqual(encodeLease(id, ttl), expected, `lease ${id} ttl ${ttl}`);
  }
});
