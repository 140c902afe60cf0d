// The LMDB layout of the MVCC state. The storage process is the only writer; the gateway
// opens the same environment read-only and reads it directly (no process hop).
//
//   kv       user key -> mvccpb.KeyValue bytes of its live version (absent when deleted)
//   history  revkey(main, sub) -> mvccpb.KeyValue bytes of that change; a deletion is a
//            tombstone with only key and mod_revision (version 0), as in etcd's DELETE events
//   keyrevs  user key -> revkey(main, sub) + event byte, one dup value per change (dupSort):
//            answers "which version of this key was live at revision R" and drives compaction
//   meta     small named counters (revision, compact revision, applied WAL index, ids)
//   leases     lease id (8 bytes, big-endian two's complement) -> granted TTL (shared/mvcc/leases.ts)
//   leasekeys  lease id -> user key, one dup value per key attached to the lease (dupSort)
import path from 'node:path';
import fs from 'node:fs';
import { open, type RootDatabase, type Database } from 'lmdb';

export interface MvccDb {
  env: RootDatabase<Buffer, Buffer>;
  kv: Database<Buffer, Buffer>;
  history: Database<Buffer, Buffer>;
  keyrevs: Database<Buffer, Buffer>;
  meta: Database<any, string>;
  leases: Database<Buffer, Buffer>;
  leasekeys: Database<Buffer, Buffer>;
}

/** LMDB's key size limit as compiled into lmdb-js with 4 KiB pages. */
export const MAX_KEY_BYTES = 1978;

export const META = {
  revision: 'revision',
  compactRevision: 'compactRevision',
  /** The last compaction whose physical removal has finished (compaction resumes after a crash). */
  compactedThrough: 'compactedThrough',
  appliedIndex: 'appliedIndex',
  clusterId: 'clusterId',
  memberId: 'memberId',
} as const;

export function dbPath(dataDir: string): string {
  return path.join(dataDir, 'db');
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
  const binary = { encoding: 'binary', keyEncoding: 'binary' } as const;
  return {
    env,
    kv: env.openDB<Buffer, Buffer>({ name: 'kv', ...binary }),
    history: env.openDB<Buffer, Buffer>({ name: 'history', ...binary }),
    keyrevs: env.openDB<Buffer, Buffer>({ name: 'keyrevs', dupSort: true, ...binary }),
    meta: env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' }),
    leases: env.openDB<Buffer, Buffer>({ name: 'leases', ...binary }),
    leasekeys: env.openDB<Buffer, Buffer>({ name: 'leasekeys', dupSort: true, ...binary }),
  };
}

export function readMeta(db: MvccDb, key: string): number {
  const v = db.meta.get(key);
  return typeof v === 'number' ? v : 0;
}
