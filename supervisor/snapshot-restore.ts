// `kvs snapshot restore FILE --data-dir DIR`: makes a new data directory from a file written
// by `etcdctl snapshot save` against kvs (Maintenance.Snapshot): the database file, then its
// SHA-256, which is checked first (as `etcdctl snapshot restore` does). A node started on the
// directory serves every key at the snapshot's revision. Like etcd's restore, the result is a
// new member: it gets new cluster and member ids, and a fresh WAL.
import fs from 'node:fs';
import path from 'node:path';
import { dbPath, META, openMvcc, readMeta, SchemaVersionError } from '../shared/mvcc/schema.js';
import { liveCount } from '../shared/mvcc/keyindex.js';
import { compactMainRev } from '../shared/mvcc/hash.js';
import { hasChecksum, sha256OfFile, SHA256_BYTES } from '../shared/snapshot.js';

export interface SnapshotRestoreOptions {
  /** The snapshot file. */
  file: string;
  /** The data directory to create; it must not hold a database or WAL yet. */
  dataDir: string;
  /** Accept a file without the SHA-256 trailer (e.g. a copied data.mdb), as etcd's flag. */
  skipHashCheck?: boolean;
}

export interface SnapshotRestoreResult {
  revision: number;
  /** -1 when the source had never been compacted. */
  compactRevision: number;
  keys: number;
}

function fsyncPath(p: string): void {
  const fd = fs.openSync(p, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

function assertEmptyTarget(dataDir: string): void {
  if (fs.existsSync(path.join(dbPath(dataDir), 'data.mdb'))) {
    throw new Error(`${dataDir} already holds a database; restore into a new data directory`);
  }
  const wal = path.join(dataDir, 'wal');
  if (fs.existsSync(wal) && fs.readdirSync(wal).some((n) => n.endsWith('.wal'))) {
    throw new Error(`${wal} holds WAL segments of another database; restore into a new data directory`);
  }
}

/** The length of the database part of the snapshot, after checking its SHA-256. */
async function verifiedLength(file: string, skipHashCheck: boolean): Promise<number> {
  let size: number;
  try {
    size = fs.statSync(file).size;
  } catch (err) {
    throw new Error(`cannot read snapshot ${file}: ${(err as Error).message}`);
  }
  if (!hasChecksum(size)) {
    if (!skipHashCheck) throw new Error(`snapshot missing hash but --skip-hash-check=false (${file} does not end in a SHA-256; pass --skip-hash-check for a copied database file)`);
    return size;
  }
  const length = size - SHA256_BYTES;
  const fd = fs.openSync(file, 'r');
  const expected = Buffer.alloc(SHA256_BYTES);
  try {
    fs.readSync(fd, expected, 0, SHA256_BYTES, length);
  } finally {
    fs.closeSync(fd);
  }
  const actual = await sha256OfFile(file, length);
  if (!actual.equals(expected)) {
    throw new Error(`snapshot ${file} is corrupt: expected sha256 ${expected.toString('hex')}, got ${actual.toString('hex')}`);
  }
  return length;
}

const LMDB_MAGIC = 0xbeefc0de;

/**
 * Whether the file starts with an LMDB meta page. Checked before LMDB opens it: LMDB trusts
 * its file, and another format (e.g. an etcd snapshot, a bolt file) can crash the process.
 * The magic follows the page header: 16 bytes in LMDB 0.9, 24 in lmdb-js 3's LMDB.
 */
function isLmdbFile(file: string): boolean {
  const head = Buffer.alloc(32);
  const fd = fs.openSync(file, 'r');
  try {
    if (fs.readSync(fd, head, 0, head.length, 0) < head.length) return false;
  } finally {
    fs.closeSync(fd);
  }
  return head.readUInt32LE(16) === LMDB_MAGIC || head.readUInt32LE(24) === LMDB_MAGIC;
}

async function copyPrefix(from: string, to: string, length: number): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const out = fs.createWriteStream(to, { flags: 'wx' });
    const input = length > 0 ? fs.createReadStream(from, { start: 0, end: length - 1 }) : fs.createReadStream(from, { start: 0, end: -1 });
    input.on('error', reject);
    out.on('error', reject);
    out.on('finish', resolve);
    input.pipe(out);
  });
  fsyncPath(to);
}

export async function restoreSnapshot(opts: SnapshotRestoreOptions): Promise<SnapshotRestoreResult> {
  const dataDir = path.resolve(opts.dataDir);
  assertEmptyTarget(dataDir);
  const length = await verifiedLength(opts.file, !!opts.skipHashCheck);
  if (!isLmdbFile(opts.file)) {
    throw new Error(`${opts.file} is not a kvs snapshot (not an LMDB database); a snapshot of etcd is restored with etcdctl snapshot restore`);
  }
  // Built aside and renamed into place, so a crash never leaves a half-restored db/.
  const staging = path.join(dataDir, '.snapshot-restore');
  fs.rmSync(staging, { recursive: true, force: true });
  fs.mkdirSync(dbPath(staging), { recursive: true });
  try {
    await copyPrefix(opts.file, path.join(dbPath(staging), 'data.mdb'), length);
    let db;
    try {
      db = openMvcc(staging, { readOnly: false });
    } catch (err) {
      if (err instanceof SchemaVersionError) throw new SchemaVersionError(`the snapshot ${opts.file}`, err.found);
      throw new Error(`${opts.file} is not a kvs snapshot (${(err as Error).message}); a snapshot of etcd is restored with etcdctl snapshot restore`);
    }
    let result: SnapshotRestoreResult;
    try {
      if (typeof db.meta.get(META.revision) !== 'number') throw new Error(`${opts.file} is not a kvs snapshot: it has no revision`);
      result = { revision: readMeta(db, META.revision), compactRevision: compactMainRev(db), keys: liveCount(db, { start: Buffer.alloc(0) }) };
      db.env.transactionSync(() => {
        // A new member, as etcd's restore makes: storage chooses new ids on first start, and
        // its WAL starts over from index 0.
        db.meta.removeSync(META.clusterId);
        db.meta.removeSync(META.memberId);
        db.meta.putSync(META.appliedIndex, 0);
      });
      await new Promise<void>((resolve, reject) =>
        (db.env as unknown as { sync(cb: (err?: Error) => void): void }).sync((err) => (err ? reject(err) : resolve())),
      );
    } finally {
      await db.env.close();
    }
    fs.mkdirSync(dataDir, { recursive: true });
    fs.renameSync(dbPath(staging), dbPath(dataDir));
    fsyncPath(dataDir);
    return result;
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}
