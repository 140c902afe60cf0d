// Maintenance.HashKV and Maintenance.Hash over the MVCC tables (run in one read snapshot).
//
// HashKV is etcd 3.4's definition (mvcc/kvstore.go HashByRev), fed with the bytes etcd would
// have in its `key` bucket, so the same history gives the SAME hash on kvs as on etcd:
//   CRC-32C (Castagnoli) of "key", then for every change with main revision <= rev, in
//   revision order: etcd's revision key (8-byte big-endian main, '_', 8-byte big-endian sub,
//   and 't' for a deletion), then the mvccpb.KeyValue (for a deletion: only the key).
//   A change at or below the compact revision counts only if it is its key's newest change
//   at or below rev and not a deletion (etcd's kvindex.Keep(rev)); when no key is live at
//   rev, every change still stored counts (etcd's `len(keep) > 0` test).
// Stored means: as after the compaction's physical removal. While that removal is still in
// progress (services/storage/mvcc/compaction.ts) the versions it will remove are skipped, so
// neither hash depends on how far it got.
// Stored KeyValue records are byte-identical to etcd's encoding; kvs's tombstones also carry
// mod_revision, so they are re-encoded key-only here.
import { Crc32c } from '@aws-crypto/crc32c';
import type { MvccDb } from './schema.js';
import { META, readMeta } from './schema.js';
import { decodeKeyValue, encodeKeyValue, EMPTY } from './keyvalue.js';
import { revKey, mainOf, subOf, refIsPut, refMain, refRevKey } from './revision.js';
import { refAt, scanLive } from './keyindex.js';
import { Errors } from '../errors.js';
import { rawTables } from './tables.js';
import { compactionPending } from './history.js';
import { encodeRevisionKey } from '../etcd-snapshot/schema.js';

export interface HashKVResult {
  hash: number;
  /** The current revision (the header's). */
  revision: number;
  /** etcd's compactMainRev: -1 until the first compaction. */
  compactRevision: number;
}

const KEY_BUCKET = Buffer.from('key');

/** etcd's compactMainRev: -1 until a compaction was done. */
export function compactMainRev(db: MvccDb): number {
  const v = db.meta.get(META.compactRevision);
  return typeof v === 'number' ? v : -1;
}

/** etcd's on-disk revision key (shared/etcd-snapshot/schema.ts). */
export const etcdRevisionKey = encodeRevisionKey;

/** Whether the history record `rk` of `key` is the key's newest change at or below `rev`, and a put. */
function isNewestPutAt(db: MvccDb, key: Uint8Array, rev: number, rk: Uint8Array): boolean {
  const newest = refAt(db, Buffer.from(key), rev);
  return !!newest && refIsPut(newest) && refRevKey(newest).equals(rk);
}

/** Whether any key is live at `rev`: etcd's `len(kvindex.Keep(rev)) > 0`. */
function anyKeyLiveAt(db: MvccDb, rev: number, current: number): boolean {
  let any = false;
  if (rev >= current) {
    scanLive(db, { start: Buffer.alloc(0) }, () => {
      any = true;
      return false;
    });
    return any;
  }
  for (const key of db.keyrevs.getKeys()) {
    const ref = refAt(db, key, rev);
    if (ref && refIsPut(ref)) return true;
  }
  return false;
}

/** HashKV at `requested` (0: the current revision), with etcd's errors for the argument. */
export function hashKV(db: MvccDb, requested: number): HashKVResult {
  const current = readMeta(db, META.revision);
  const compactRev = compactMainRev(db);
  if (requested > 0 && requested <= compactRev) throw Errors.compacted;
  if (requested > 0 && requested > current) throw Errors.futureRev;
  const rev = requested === 0 ? current : requested;
  const h = new Crc32c().update(KEY_BUCKET);
  let keepAny: boolean | undefined;
  let pending: boolean | undefined;
  if (rev > 0) {
    for (const { key: rk, value } of db.history.getRange({ end: revKey(rev + 1, 0) })) {
      const main = mainOf(rk);
      const kv = decodeKeyValue(value);
      const tombstone = kv.version === 0;
      if (main <= compactRev) {
        keepAny ??= anyKeyLiveAt(db, rev, current);
        // With keepAny: the newest at rev (which the compaction keeps too); otherwise: what
        // the compaction keeps, which is every record stored unless a removal is pending.
        if ((keepAny || (pending ??= compactionPending(db))) && !isNewestPutAt(db, kv.key, keepAny ? rev : compactRev, rk)) continue;
      }
      h.update(etcdRevisionKey(main, subOf(rk), tombstone));
      h.update(tombstone ? encodeKeyValue({ key: kv.key, createRevision: 0, modRevision: 0, version: 0, value: EMPTY, lease: 0n }) : value);
    }
  }
  return { hash: h.digest(), revision: current, compactRevision: compactRev };
}

/**
 * Meta entries that differ between nodes with the same data (etcd skips its consistent index);
 * the progress of a compaction's physical removal too, and the layout (its version, history's
 * compression dictionary), which depends on the kvs that created or upgraded the database.
 */
const NODE_LOCAL_META = new Set<string>([
  META.appliedIndex, META.clusterId, META.memberId, META.compactedThrough, META.compactCursor, META.schemaVersion, META.historyDictionary,
]);

/**
 * While a compaction's physical removal is pending: whether a raw entry of the MVCC tables is
 * one the removal will delete (and so not hashed). `keyOf` tracks keyrevs' dups of one key.
 */
function leftoverFilter(db: MvccDb): ((table: string, key: Uint8Array, value: Uint8Array) => boolean) | undefined {
  if (!compactionPending(db)) return undefined;
  const compactRev = readMeta(db, META.compactRevision);
  let keyOf: Buffer | undefined;
  let newestSeen = false;
  return (table, key, value) => {
    switch (table) {
      case 'history':
        return mainOf(key) <= compactRev && !isNewestPutAt(db, decodeKeyValue(value).key, compactRev, key);
      case 'keyrevs': {
        if (!keyOf || !keyOf.equals(key)) {
          keyOf = Buffer.from(key);
          newestSeen = false;
        }
        if (refMain(value) > compactRev) return false;
        // Dups come newest first: the first at or below compactRev stays if it is a put.
        const kept = !newestSeen && refIsPut(value);
        newestSeen = true;
        return !kept;
      }
      case 'deleted': {
        // A deleted key whose deletion is at or below compactRev leaves the tables.
        const newest = db.keyrevs.get(Buffer.from(key));
        return !!newest && refMain(newest) <= compactRev;
      }
      default:
        return false;
    }
  };
}

/**
 * Maintenance.Hash: CRC-32C of the whole database, as etcd hashes its whole backend: every
 * table's name, then its raw keys and values in order, tables in name order; node-local meta
 * entries (applied WAL index, ids) are left out. Not comparable with etcd's (other layout).
 */
export function hashAll(db: MvccDb): number {
  const h = new Crc32c();
  const leftover = leftoverFilter(db);
  for (const { name, rawName, table } of rawTables(db)) {
    h.update(rawName);
    for (const { key, value } of table.getRange()) {
      if (name === 'meta' && NODE_LOCAL_META.has(Buffer.from(key).toString('utf8'))) continue;
      if (leftover?.(name, key, value)) continue;
      h.update(key);
      h.update(value);
    }
  }
  return h.digest();
}
