// The LMDB layout of the MVCC state. The storage process is the only writer; the gateway
// opens the same environment read-only and reads it directly (no process hop).
//
// etcd's shape: every version of every key is stored once, in `history`, keyed by revision
// (so it is only ever appended to, and its pages fill completely); `keyrevs` is the index
// from user key to its changes (etcd keeps that index in memory, as its treeIndex).
//
//   history    revkey(main, sub) -> mvccpb.KeyValue bytes of that change; a deletion is a
//              tombstone with only key and mod_revision (version 0), as in etcd's DELETE events.
//              Records are LZ4-compressed against the dictionary kept in meta (dictionary.ts;
//              layout 3); lmdb-js compresses on put and decompresses on every read through
//              this handle, so every reader of history must open it here
//   keyrevs    user key -> one dup value per change (dupSort), NEWEST FIRST: the inverted
//              revkey + an event byte (revision.ts). The live version of a key is its first
//              dup, read from history, if that dup is a PUT; the version live at revision R
//              is its first dup at or below R. Compaction removes dups (and their history).
//   deleted    user key -> empty, for every key in keyrevs whose newest change is a deletion:
//              derived from keyrevs, so that counting the live keys in a range is two in-C
//              counts (keyrevs keys minus deleted keys) instead of a walk over every key
//   meta       small named counters (revision, compact revision, applied WAL index, ids,
//              the schema version) and history's compression dictionary
//   leases     lease id (8 bytes, big-endian two's complement) -> granted TTL (shared/mvcc/leases.ts)
//   leasekeys  lease id -> user key, one dup value per key attached to the lease (dupSort)
import path from 'node:path';
import fs from 'node:fs';
import { open, type RootDatabase, type Database } from 'lmdb';
import { openKeyScan, type KeyScan } from './key-scan.js';
import { COMPRESS_ABOVE, HISTORY_DICTIONARY } from './dictionary.js';

export interface MvccDb {
  env: RootDatabase<Buffer, Buffer>;
  history: Database<Buffer, Buffer>;
  keyrevs: Database<Buffer, Buffer>;
  /** keyrevs again, opened for fast range walks (keyindex.ts). */
  keyScan: KeyScan;
  deleted: Database<Buffer, Buffer>;
  meta: Database<any, string>;
  leases: Database<Buffer, Buffer>;
  leasekeys: Database<Buffer, Buffer>;
}

/** LMDB's key size limit as compiled into lmdb-js with 4 KiB pages. */
export const MAX_KEY_BYTES = 1978;

/**
 * The version of this layout, kept in meta. 1 (never written: no schemaVersion entry) was the
 * layout with a `kv` table holding a second copy of every live version; 2 that of this file
 * without compression. A writer opening a version 2 database makes it version 3 (its records
 * stay as they are, readable beside compressed ones: lmdb-js marks a compressed value by its
 * first byte, which a KeyValue never starts with), so that a kvs without compression refuses
 * it rather than misread it.
 */
export const SCHEMA_VERSION = 3;
const READABLE_VERSIONS = new Set([2, SCHEMA_VERSION]);

export const META = {
  revision: 'revision',
  compactRevision: 'compactRevision',
  /** The last compaction whose physical removal has finished (compaction resumes after a crash). */
  compactedThrough: 'compactedThrough',
  /** [main, sub] of the last history record the pending removal has passed (services/storage/mvcc/compaction.ts). */
  compactCursor: 'compactCursor',
  appliedIndex: 'appliedIndex',
  clusterId: 'clusterId',
  memberId: 'memberId',
  schemaVersion: 'schemaVersion',
  /** The dictionary history's records are compressed against (layout 3). */
  historyDictionary: 'historyDictionary',
} as const;

export function dbPath(dataDir: string): string {
  return path.join(dataDir, 'db');
}

/** A database written with another storage layout than this kvs's. */
export class SchemaVersionError extends Error {
  /** `subject`: what holds the database ("the database in <dir>"). */
  constructor(subject: string, readonly found: number) {
    super(
      `${subject} uses storage layout version ${found}, and this kvs reads only versions ${[...READABLE_VERSIONS].join(' and ')}` +
        (found < SCHEMA_VERSION ? ' (it was written by an older kvs)' : ' (it was written by a newer kvs)') +
        '; its data was not changed. Run the kvs version that wrote it, or restore a snapshot or object-store ' +
        'checkpoint taken with this version, or start this version with an empty data directory',
    );
    this.name = 'SchemaVersionError';
  }
}

/**
 * `writemap` (the storage process only): LMDB writes through a writable memory map instead of
 * copying each changed page and pwrite-ing it at commit. Its file then becomes sparse at the
 * full map size, and a write to a page the disk has no room for kills the process (SIGBUS), so
 * the writer must keep free space (services/storage/disk-space.ts).
 */
export function openMvcc(dataDir: string, opts: { readOnly: boolean; writemap?: boolean }): MvccDb {
  const dir = dbPath(dataDir);
  if (!opts.readOnly) fs.mkdirSync(dir, { recursive: true });
  const env = open<Buffer, Buffer>({
    path: dir,
    maxDbs: 16,
    // A large virtual map avoids remapping while another process reads the file.
    mapSize: 256 * 1024 ** 3,
    // The WAL is the durability boundary: after a crash it is replayed from appliedIndex, so
    // LMDB commits need no fsync of their own (the storage engine syncs LMDB before it lets
    // the WAL be trimmed).
    noSync: !opts.readOnly,
    readOnly: opts.readOnly,
    useWritemap: opts.writemap === true && !opts.readOnly,
    encoding: 'binary',
    keyEncoding: 'binary',
  });
  try {
    // Checked before any table is opened, so that nothing is created in an old database.
    checkSchema(env, dir, opts.readOnly);
  } catch (err) {
    void env.close();
    throw err;
  }
  const binary = { encoding: 'binary', keyEncoding: 'binary' } as const;
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  if (!opts.readOnly && meta.get(META.schemaVersion) !== SCHEMA_VERSION) {
    env.transactionSync(() => {
      meta.putSync(META.historyDictionary, HISTORY_DICTIONARY);
      meta.putSync(META.schemaVersion, SCHEMA_VERSION);
    });
  }
  // A reader may open a version 2 database before its writer upgrades it (not in a node, where
  // storage opens first): it reads with the dictionary that upgrade writes, so records written
  // after the upgrade read right too, and the uncompressed ones read as they are.
  const compression = historyCompression(meta);
  return {
    env,
    history: env.openDB<Buffer, Buffer>({ name: 'history', ...binary, compression }),
    keyrevs: env.openDB<Buffer, Buffer>({ name: 'keyrevs', dupSort: true, ...binary }),
    keyScan: openKeyScan(env),
    deleted: env.openDB<Buffer, Buffer>({ name: 'deleted', ...binary }),
    meta,
    leases: env.openDB<Buffer, Buffer>({ name: 'leases', ...binary }),
    leasekeys: env.openDB<Buffer, Buffer>({ name: 'leasekeys', dupSort: true, ...binary }),
  };
}

/** lmdb-js's `compression` options for `history`: with the dictionary the database keeps. */
export function historyCompression(meta: Database<any, string>): { threshold: number; dictionary: Buffer } {
  const stored = meta.get(META.historyDictionary) as Uint8Array | undefined;
  return { threshold: COMPRESS_ABOVE, dictionary: stored ? Buffer.from(stored) : HISTORY_DICTIONARY };
}

/**
 * A reader opened a database its writer (storage) has not created yet: the file without its
 * layout version. (lmdb-js would open a missing table as `undefined`, and the database would
 * look broken instead of not there yet.)
 */
export class NotCreatedError extends Error {
  constructor(dir: string) {
    super(`the database in ${dir} is not created yet (it has no layout version): storage has not finished opening it; try again once it has`);
    this.name = 'NotCreatedError';
  }
}

function tableNames(env: RootDatabase<Buffer, Buffer>): string[] {
  return [...env.getKeys()].map((k) => Buffer.from(k as Uint8Array).toString('utf8').replace(/\0$/, ''));
}

/**
 * Refuses a database of another layout version. A database without a version is new when it
 * has no tables yet; one with tables but no version is version 1.
 */
function checkSchema(env: RootDatabase<Buffer, Buffer>, dir: string, readOnly: boolean): void {
  const tables = new Set(tableNames(env));
  if (!tables.has('meta')) {
    if (tables.size > 0) throw new SchemaVersionError(`the database in ${dir}`, 1);
    if (readOnly) throw new NotCreatedError(dir);
    return;
  }
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  const v = meta.get(META.schemaVersion) as number | undefined;
  if (v === undefined) {
    if (tables.size > 1 || meta.getCount() > 0) throw new SchemaVersionError(`the database in ${dir}`, 1);
    if (readOnly) throw new NotCreatedError(dir);
  } else if (!READABLE_VERSIONS.has(v)) {
    throw new SchemaVersionError(`the database in ${dir}`, v);
  }
}

export function readMeta(db: MvccDb, key: string): number {
  const v = db.meta.get(key);
  return typeof v === 'number' ? v : 0;
}
