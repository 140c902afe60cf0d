// The etcd schema reader on fixture files (testkit/etcd-fixture.ts), among them an etcd 3.5
// layout: 3.5 (server/mvcc/buckets/bucket.go) keeps the same buckets and adds the meta keys
// `term` and `confState`; 3.6 adds `storageVersion`. Real etcd 3.4 files are read by the
// integration test (integration/etcd-import.test.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bufferSink, writeBolt, writeEtcdFixture, type BoltBucketSpec } from '../../testkit/etcd-fixture.js';
import { bufferSource } from '../bbolt/read.js';
import { decodeKeyValue, encodeKeyValue } from '../mvcc/keyvalue.js';
import { EtcdSnapshot, EtcdSnapshotError } from './read.js';
import { BUCKET, META_KEY, decodeRevisionKey, encodeRevisionKey, encodeUint64 } from './schema.js';

function snapshotOf(write: (sink: ReturnType<typeof bufferSink>) => void): EtcdSnapshot {
  const sink = bufferSink();
  write(sink);
  return new EtcdSnapshot(bufferSource(sink.buffer()));
}

test('revision keys: etcd\'s 17 bytes, and 18 with the tombstone mark', () => {
  const k = encodeRevisionKey(0x0102030405, 7);
  assert.equal(k.toString('hex'), '0000000102030405' + '5f' + '0000000000000007');
  assert.deepEqual(decodeRevisionKey(k), { main: 0x0102030405, sub: 7, tombstone: false });
  assert.deepEqual(decodeRevisionKey(encodeRevisionKey(9, 0, true)), { main: 9, sub: 0, tombstone: true });
  assert.match(String(decodeRevisionKey(Buffer.alloc(16))), /17 or 18 bytes/);
  assert.match(String(decodeRevisionKey(Buffer.alloc(17))), /'_' at byte 8/);
});

test('an etcd 3.5 layout: its meta keys and unknown buckets are tolerated, the rest read', () => {
  const snap = snapshotOf((sink) =>
    writeEtcdFixture(sink, {
      keys: 30,
      revisions: 3,
      valueBytes: 20,
      compact: 40,
      leases: [{ id: -5n, ttl: 30 }, { id: 77n, ttl: 1 }],
      users: [{ name: Buffer.from('root'), password: Buffer.from('$2a$10$x'), roles: ['root'], noPassword: false }, { name: Buffer.from('np'), password: Buffer.alloc(0), roles: [], noPassword: true }],
      roles: [{ name: Buffer.from('r'), perms: [{ permType: 0, key: Buffer.from('a'), rangeEnd: Buffer.alloc(0) }] }],
      authEnabled: true,
      extraMeta: [
        [Buffer.from(META_KEY.term), encodeUint64(4)],
        [Buffer.from(META_KEY.confState), Buffer.from('{"voters":[1]}')],
        [Buffer.from('storageVersion'), Buffer.from('3.6.0')],
      ],
      extraBuckets: [{ name: 'test', entries: [] }, { name: BUCKET.alarm, entries: [] }],
    }),
  );
  assert.deepEqual(snap.unknownBuckets(), ['test']);
  assert.deepEqual(snap.compaction(), { finished: 40, scheduled: 40 });
  const changes = [...snap.changes()].flat();
  // Compacted at 40: keys 0..8 lost their first put (superseded at 32..40), the others kept it.
  assert.equal(changes.length, 21 + 30 + 30);
  assert.deepEqual(changes.slice(0, 2).map((c) => c.main), [11, 12]);
  for (const c of changes) {
    const kv = decodeKeyValue(c.kv);
    assert.equal(kv.modRevision, c.main);
    assert.ok(c.key.equals(kv.key));
  }
  assert.deepEqual(snap.leases(), [{ id: -5n, ttl: 30, remainingTTL: 0 }, { id: 77n, ttl: 1, remainingTTL: 0 }].sort((a, b) => (BigInt.asUintN(64, a.id) < BigInt.asUintN(64, b.id) ? -1 : 1)));
  const auth = snap.auth();
  assert.equal(auth.enabled, true);
  assert.deepEqual(auth.users.map((u) => [u.name.toString(), u.noPassword]), [['np', true], ['root', false]]);
  assert.deepEqual(auth.roles[0]!.perms[0]!.rangeEnd, Buffer.alloc(0));
});

/** A database of just `key` and `meta` buckets holding these key-bucket records. */
function withRecords(records: [Buffer, Buffer][], more: BoltBucketSpec[] = []): EtcdSnapshot {
  return snapshotOf((sink) => writeBolt(sink, [{ name: BUCKET.key, entries: records }, { name: BUCKET.meta, entries: [] }, ...more]));
}

test('deletions, Txn sub-revisions and non-canonical records', () => {
  const kv = (key: string, main: number, version: number, create = main) => encodeKeyValue({ key: Buffer.from(key), createRevision: create, modRevision: main, version, value: Buffer.from('v'), lease: 0n });
  // A record with a field etcd does not write (number 9): decoded by protobufjs, re-encoded canonical.
  const extra = Buffer.concat([kv('c', 3, 1), Buffer.from([0x48, 0x01])]);
  const snap = withRecords([
    [encodeRevisionKey(2, 0), kv('a', 2, 1)],
    [encodeRevisionKey(2, 1), kv('b', 2, 1)],
    [encodeRevisionKey(3, 0), extra],
    [encodeRevisionKey(4, 0, true), encodeKeyValue({ key: Buffer.from('a'), createRevision: 0, modRevision: 0, version: 0, value: Buffer.alloc(0), lease: 0n })],
  ]);
  const changes = [...snap.changes()].flat();
  assert.deepEqual(changes.map((c) => [c.main, c.sub, c.tombstone, c.key.toString()]), [[2, 0, false, 'a'], [2, 1, false, 'b'], [3, 0, false, 'c'], [4, 0, true, 'a']]);
  assert.ok(changes[2]!.kv.equals(kv('c', 3, 1)));
  assert.deepEqual(snap.compaction(), { finished: -1, scheduled: -1 });
  assert.deepEqual(snap.leases(), []);
  assert.deepEqual(snap.auth(), { enabled: false, revision: 1, users: [], roles: [] });
});

test('a bad record is refused with its revision named', () => {
  const kv = (main: number, mod = main) => encodeKeyValue({ key: Buffer.from('k'), createRevision: main, modRevision: mod, version: 1, value: Buffer.from('v'), lease: 0n });
  const refuse = (records: [Buffer, Buffer][], re: RegExp) => assert.throws(() => [...withRecords(records).changes()], (e: unknown) => e instanceof EtcdSnapshotError && re.test(e.message));
  refuse([[encodeRevisionKey(2, 0), kv(2, 5)]], /revision 2_0: the record's mod_revision is 5/);
  refuse([[encodeRevisionKey(2, 0), kv(2).subarray(0, 6)]], /revision 2_0: the mvccpb.KeyValue record does not decode/);
  refuse([[Buffer.from('not a revision'), kv(2)]], /a revision key is 17 or 18 bytes, this one 14/);
  refuse([[encodeRevisionKey(2, 0), encodeKeyValue({ key: Buffer.alloc(0), createRevision: 2, modRevision: 2, version: 1, value: Buffer.alloc(0), lease: 0n })]], /the record has no key/);
  refuse([[encodeRevisionKey(2, 2 ** 33), kv(2)]], /out of the range kvs stores/);
  assert.throws(() => snapshotOf((sink) => writeBolt(sink, [{ name: 'other', entries: [] }])), /not an etcd snapshot: a bbolt database without etcd's "key" and "meta" buckets \(its buckets: "other"\)/);
  const badLease = withRecords([], [{ name: BUCKET.lease, entries: [[Buffer.alloc(3), Buffer.alloc(0)]] }]);
  assert.throws(() => badLease.leases(), /lease bucket: a key of 3 bytes/);
  const badMeta = snapshotOf((sink) => writeBolt(sink, [{ name: BUCKET.key, entries: [] }, { name: BUCKET.meta, entries: [[Buffer.from(META_KEY.finishedCompactRev), Buffer.from('x')]] }]));
  assert.throws(() => badMeta.compaction(), /meta\/finishedCompactRev is not a revision/);
});
