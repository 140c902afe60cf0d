// `kvs snapshot restore FILE --data-dir DIR`: makes a new data directory from a snapshot file,
// of one of two formats, told apart by the magic of the database's first page:
//   - an LMDB environment (what Maintenance.Snapshot of kvs versions before the etcd-format
//     export saved, or a copied db/data.mdb), copied in as it is;
//   - etcd's (`etcdctl snapshot save` against etcd 3.4 or 3.5, or against kvs, whose
//     Maintenance.Snapshot writes etcd's format; or a copied member/snap/db): a bbolt
//     database, read and converted (etcd-restore.ts).
// Either may end in a SHA-256 of the database, which is checked first (as `etcdctl snapshot
// restore` does); a file without it needs --skip-hash-check. A node started on the directory
// serves every key at the snapshot's revision, with the history the snapshot holds. Like
// etcd's restore, the result is a new member: it gets new cluster and member ids, and a fresh
// WAL. Nothing is written under DIR/db until the database is complete (it is built aside and
// renamed into place).
import fs from 'node:fs';
import path from 'node:path';
import { dbPath, META, openMvcc, readMeta, SchemaVersionError } from '../shared/mvcc/schema.js';
import { liveCount } from '../shared/mvcc/keyindex.js';
import { compactMainRev } from '../shared/mvcc/hash.js';
import { hasChecksum, sha256OfFile, sha256OfFileInWorker, SHA256_BYTES } from '../shared/snapshot.js';
import { looksLikeBolt } from '../shared/bbolt/read.js';
import { restoreEtcd } from './etcd-restore.js';

export interface SnapshotRestoreOptions {
  /** The snapshot file. */
  file: string;
  /** The data directory to create; it must not hold a database or WAL yet. */
  dataDir: string;
  /** Accept a file without the SHA-256 trailer (e.g. a copied data.mdb), as etcd's flag. */
  skipHashCheck?: boolean;
}

export interface SnapshotRestoreResult {
  /** What the file was: kvs's LMDB snapshot or etcd's bbolt one. */
  format: 'kvs' | 'etcd';
  revision: number;
  /** -1 when the source had never been compacted. */
  compactRevision: number;
  keys: number;
  /** etcd snapshots: leases, users and roles imported, the auth flag, and what was left out. */
  leases?: number;
  users?: number;
  roles?: number;
  authEnabled?: boolean;
  notes?: string[];
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

/** The length of the database part of the snapshot, and the SHA-256 it ends in (if it does). */
function splitTrailer(file: string, skipHashCheck: boolean): { length: number; expected?: Buffer } {
  let size: number;
  try {
    size = fs.statSync(file).size;
  } catch (err) {
    throw new Error(`cannot read snapshot ${file}: ${(err as Error).message}`);
  }
  if (!hasChecksum(size)) {
    if (!skipHashCheck) throw new Error(`snapshot missing hash but --skip-hash-check=false (${file} does not end in a SHA-256; pass --skip-hash-check for a copied database file)`);
    return { length: size };
  }
  const length = size - SHA256_BYTES;
  // As etcd's restore: with --skip-hash-check a trailer is cut off, not checked.
  if (skipHashCheck) return { length };
  const fd = fs.openSync(file, 'r');
  const expected = Buffer.alloc(SHA256_BYTES);
  try {
    fs.readSync(fd, expected, 0, SHA256_BYTES, length);
  } finally {
    fs.closeSync(fd);
  }
  return { length, expected };
}

/** Checks the database part against its SHA-256 (`inWorker`: on another thread, beside the import). */
async function checkHash(file: string, length: number, expected: Buffer | undefined, inWorker: boolean): Promise<void> {
  if (!expected) return;
  const actual = inWorker ? await sha256OfFileInWorker(file, length) : await sha256OfFile(file, length);
  if (!actual.equals(expected)) {
    throw new Error(`snapshot ${file} is corrupt: expected sha256 ${expected.toString('hex')}, got ${actual.toString('hex')}`);
  }
}

const LMDB_MAGIC = 0xbeefc0de;

/**
 * The file's format, from the magic of its first page, checked before anything parses it:
 * LMDB trusts its file, and another format can crash the process. LMDB's magic follows the
 * page header: 16 bytes in LMDB 0.9, 24 in lmdb-js 3's LMDB; bbolt's follows its 16-byte one.
 */
function formatOf(file: string): 'kvs' | 'etcd' | undefined {
  const head = Buffer.alloc(32);
  const fd = fs.openSync(file, 'r');
  try {
    if (fs.readSync(fd, head, 0, head.length, 0) < head.length) return undefined;
  } finally {
    fs.closeSync(fd);
  }
  if (head.readUInt32LE(16) === LMDB_MAGIC || head.readUInt32LE(24) === LMDB_MAGIC) return 'kvs';
  if (looksLikeBolt(head)) return 'etcd';
  return undefined;
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
  const { length, expected } = splitTrailer(opts.file, !!opts.skipHashCheck);
  const format = formatOf(opts.file);
  // kvs's snapshot is checked before LMDB opens it (LMDB trusts its file); etcd's is read by
  // code that checks every page, so its hash is computed meanwhile, and awaited before the
  // result is put in place.
  const hashed = format === 'etcd' ? checkHash(opts.file, length, expected, true) : checkHash(opts.file, length, expected, false);
  // Awaited below; until then a failure must not count as unhandled.
  hashed.catch(() => undefined);
  if (format !== 'etcd') await hashed;
  if (!format) {
    throw new Error(`${opts.file} is not a snapshot kvs reads: neither a kvs snapshot (an LMDB database) nor an etcd snapshot (a bbolt database); its first page has neither's magic`);
  }
  // Built aside and renamed into place, so a crash or a refused file never leaves a
  // half-restored db/.
  const staging = path.join(dataDir, '.snapshot-restore');
  const existed = fs.existsSync(dataDir);
  let done = false;
  fs.rmSync(staging, { recursive: true, force: true });
  fs.mkdirSync(dbPath(staging), { recursive: true });
  try {
    let result: SnapshotRestoreResult;
    if (format === 'etcd') {
      try {
        result = { format, ...(await restoreEtcd(opts.file, length, staging)) };
      } catch (err) {
        // A file that fails its hash is reported as that, whatever the reader tripped on.
        await hashed;
        throw new Error(`${opts.file} cannot be restored: ${(err as Error).message}; nothing was written to ${dataDir}`);
      }
      await hashed;
    } else {
      result = await restoreLmdb(opts.file, length, staging);
    }
    fs.mkdirSync(dataDir, { recursive: true });
    fs.renameSync(dbPath(staging), dbPath(dataDir));
    fsyncPath(dataDir);
    done = true;
    return result;
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
    // A refused file leaves no trace: not even the directory, if the restore made it.
    if (!done && !existed) fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/** kvs's own snapshot: the LMDB file copied into the staging directory, made a new member. */
async function restoreLmdb(file: string, length: number, staging: string): Promise<SnapshotRestoreResult> {
  await copyPrefix(file, path.join(dbPath(staging), 'data.mdb'), length);
  let db;
  try {
    db = openMvcc(staging, { readOnly: false });
  } catch (err) {
    if (err instanceof SchemaVersionError) throw new SchemaVersionError(`the snapshot ${file}`, err.found);
    throw new Error(`${file} is not a kvs snapshot (${(err as Error).message})`);
  }
  try {
    if (typeof db.meta.get(META.revision) !== 'number') throw new Error(`${file} is not a kvs snapshot: it has no revision`);
    const result: SnapshotRestoreResult = { format: 'kvs', revision: readMeta(db, META.revision), compactRevision: compactMainRev(db), keys: liveCount(db, { start: Buffer.alloc(0) }) };
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
    return result;
  } finally {
    await db.env.close();
  }
}
