// restoreSnapshot of etcd-format files written by the fixture writer (testkit/etcd-fixture.ts)
// into a data directory, read back through kvs's own table readers: the derived tables (deleted
// keys, lease keys), an interrupted compaction left for kvs to finish, a key too long for kvs,
// and that a refused file leaves nothing behind. A node serving such a directory is tested in
// integration/etcd-import.test.ts.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { bufferSink, writeBolt } from '../testkit/etcd-fixture.js';
import { encode } from '../shared/proto/index.js';
import { encodeKeyValue, EMPTY } from '../shared/mvcc/keyvalue.js';
import { META, openMvcc, readMeta } from '../shared/mvcc/schema.js';
import { liveCount, liveVersion, versionAt } from '../shared/mvcc/keyindex.js';
import { allLeases, leaseKeys } from '../shared/mvcc/leases.js';
import { authMeta, listUsers } from '../shared/auth/tables.js';
import { AUTH_KEY, BUCKET, META_KEY, encodeRevisionKey, encodeUint64 } from '../shared/etcd-snapshot/schema.js';
import { restoreSnapshot } from './snapshot-restore.js';

function tmp(t: { after(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-etcd-restore-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const put = (key: string, main: number, sub: number, version: number, create: number, lease = 0n): [Buffer, Buffer] => [
  encodeRevisionKey(main, sub),
  encodeKeyValue({ key: Buffer.from(key), createRevision: create, modRevision: main, version, value: Buffer.from(`${key}@${main}`), lease }),
];
const del = (key: string, main: number, sub: number): [Buffer, Buffer] => [
  encodeRevisionKey(main, sub, true),
  encodeKeyValue({ key: Buffer.from(key), createRevision: 0, modRevision: 0, version: 0, value: EMPTY, lease: 0n }),
];
const leaseRecord = (id: bigint, ttl: number): [Buffer, Buffer] => {
  const k = Buffer.alloc(8);
  k.writeBigInt64BE(id);
  return [k, encode('leasepb.Lease', { ID: id.toString(), TTL: ttl })];
};

function writeFile(dir: string, records: [Buffer, Buffer][], meta: [Buffer, Buffer][], more: { name: string; entries: [Buffer, Buffer][] }[] = []): string {
  const sink = bufferSink();
  writeBolt(sink, [{ name: BUCKET.key, entries: records }, { name: BUCKET.meta, entries: meta }, ...more]);
  const f = path.join(dir, 'etcd.db');
  fs.writeFileSync(f, sink.buffer());
  return f;
}

test('an etcd backend restores into kvs tables: history, deleted keys, leases with their keys, auth', async (t) => {
  const dir = tmp(t);
  // a: put 2, put 3 (lease 7), deleted 5; b: put 4 (lease 7), moved off it at 6; c: put 5 (lease 8, not stored).
  const file = writeFile(
    dir,
    [put('a', 2, 0, 1, 2), put('a', 3, 0, 2, 2, 7n), put('b', 4, 0, 1, 4, 7n), del('a', 5, 0), put('c', 5, 1, 1, 5, 8n), put('b', 6, 0, 2, 4), put('d', 6, 1, 1, 6, 7n)],
    [],
    [
      { name: BUCKET.lease, entries: [leaseRecord(7n, 1), leaseRecord(9n, 100)] },
      { name: BUCKET.auth, entries: [[Buffer.from(AUTH_KEY.enabled), Buffer.from([1])], [Buffer.from(AUTH_KEY.revision), encodeUint64(12)]] },
    ],
  );
  const dataDir = path.join(dir, 'data');
  const r = await restoreSnapshot({ file, dataDir, skipHashCheck: true });
  assert.equal(r.format, 'etcd');
  assert.deepEqual({ revision: r.revision, compact: r.compactRevision, keys: r.keys, leases: r.leases, auth: r.authEnabled }, { revision: 6, compact: -1, keys: 3, leases: 2, auth: true });
  assert.deepEqual(r.notes, ['1 key names a lease the snapshot does not hold; as on etcd, kept and attached to no lease']);

  const db = openMvcc(dataDir, { readOnly: true });
  t.after(() => db.env.close());
  assert.equal(readMeta(db, META.revision), 6);
  assert.equal(db.meta.get(META.compactRevision), undefined);
  assert.equal(db.meta.get(META.clusterId), undefined, 'a new member: storage picks its ids');
  assert.equal(liveVersion(db, Buffer.from('a')), undefined);
  assert.ok(db.deleted.doesExist(Buffer.from('a')));
  assert.equal(liveCount(db, { start: Buffer.alloc(0) }), 3);
  assert.match(versionAt(db, Buffer.from('a'), 4)!.toString('latin1'), /a@3/);
  // Lease 7 granted 1 s: etcd's minimum TTL applies, as its lessor's recovery does.
  assert.deepEqual([...allLeases(db)], [{ id: 7n, ttl: 2 }, { id: 9n, ttl: 100 }]);
  assert.deepEqual(leaseKeys(db, 7n).map(String), ['d']);
  assert.deepEqual(leaseKeys(db, 8n), []);
  assert.deepEqual(authMeta(db), { enabled: true, revision: 12 });
  assert.deepEqual(listUsers(db), []);
});

test('an interrupted etcd compaction is finished by kvs: the compact revision is the scheduled one', async (t) => {
  const dir = tmp(t);
  const file = writeFile(
    dir,
    [put('a', 3, 0, 2, 2), put('a', 4, 0, 3, 2), put('b', 5, 0, 1, 5), del('b', 6, 0), put('a', 7, 0, 4, 2)],
    [
      [Buffer.from(META_KEY.finishedCompactRev), encodeRevisionKey(3, 0)],
      [Buffer.from(META_KEY.scheduledCompactRev), encodeRevisionKey(6, 0)],
    ],
  );
  const dataDir = path.join(dir, 'data');
  const r = await restoreSnapshot({ file, dataDir, skipHashCheck: true });
  assert.deepEqual([r.revision, r.compactRevision, r.keys], [7, 6, 1]);
  const db = openMvcc(dataDir, { readOnly: true });
  t.after(() => db.env.close());
  assert.equal(readMeta(db, META.compactRevision), 6);
  // What lies in (3, 6] is removed by kvs's own compaction steps once storage starts.
  assert.equal(readMeta(db, META.compactedThrough), 3);
});

test('the newest change compacted away: the revision is the compaction\'s; a key too long for kvs is refused', async (t) => {
  const dir = tmp(t);
  const file = writeFile(dir, [put('a', 2, 0, 1, 2)], [[Buffer.from(META_KEY.finishedCompactRev), encodeRevisionKey(9, 0)], [Buffer.from(META_KEY.scheduledCompactRev), encodeRevisionKey(9, 0)]]);
  const r = await restoreSnapshot({ file, dataDir: path.join(dir, 'data'), skipHashCheck: true });
  assert.deepEqual([r.revision, r.compactRevision], [9, 9]);

  const long = writeFile(dir, [put('x'.repeat(3000), 2, 0, 1, 2)], []);
  const target = path.join(dir, 'long');
  await assert.rejects(restoreSnapshot({ file: long, dataDir: target, skipHashCheck: true }), /is 3000 bytes, longer than the 1978 bytes a kvs key can be; .*nothing was written to/);
  assert.equal(fs.existsSync(target), false);
});
