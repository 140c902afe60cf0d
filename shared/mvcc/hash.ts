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
// Stored KeyValue records are byte-identical to etcd's encoding; kvs's tombstones also carry
// mod_revision, so they are re-encoded key-only here.
import { Crc32c } from '@aws-crypto/crc32c';
import type { MvccDb } from './schema.js';
import { META, readMeta } from './schema.js';
import { decodeKeyValue, encodeKeyValue, EMPTY } from './keyvalue.js';
import { revKey, mainOf, subOf, refIsPut, refRevKey } from './revision.js';
import { refAt, scanLive } from './keyindex.js';
import { Errors } from '../errors.js';
import { rawTables } from './tables.js';

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

/** etcd's on-disk revision key: main '_' sub, and a 't' mark for a deletion. */
export function etcdRevisionKey(main: number, sub: number, tombstone: boolean): Buffer {
  const b = Buffer.alloc(tombstone ? 18 : 17);
  b.writeBigInt64BE(BigInt(main), 0);
  b[8] = 0x5f; // '_'
  b.writeBigInt64BE(BigInt(sub), 9);
  if (tombstone) b[17] = 0x74; // 't'
  return b;
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
  if (rev > 0) {
    for (const { key: rk, value } of db.history.getRange({ end: revKey(rev + 1, 0) })) {
      const main = mainOf(rk);
      const kv = decodeKeyValue(value);
      const tombstone = kv.version === 0;
      if (main <= compactRev) {
        keepAny ??= anyKeyLiveAt(db, rev, current);
        if (keepAny) {
          const newest = refAt(db, Buffer.from(kv.key), rev);
          const kept = !!newest && refIsPut(newest) && refRevKey(newest).equals(rk);
          if (!kept) continue;
        }
      }
      h.update(etcdRevisionKey(main, subOf(rk), tombstone));
      h.update(tombstone ? encodeKeyValue({ key: kv.key, createRevision: 0, modRevision: 0, version: 0, value: EMPTY, lease: 0n }) : value);
    }
  }
  return { hash: h.digest(), revision: current, compactRevision: compactRev };
}

/** Meta entries that differ between nodes with the same data (etcd skips its consistent index). */
const NODE_LOCAL_META = new Set<string>([META.appliedIndex, META.clusterId, META.memberId]);

/**
 * Maintenance.Hash: CRC-32C of the whole database, as etcd hashes its whole backend: every
 * table's name, then its raw keys and values in order, tables in name order; node-local meta
 * entries (applied WAL index, ids) are left out. Not comparable with etcd's (other layout).
 */
export function hashAll(db: MvccDb): number {
  const h = new Crc32c();
  for (const { name, rawName, table } of rawTables(db)) {
    h.update(rawName);
    for (const { key, value } of table.getRange()) {
      if (name === 'meta' && NODE_LOCAL_META.has(Buffer.from(key).toString('utf8'))) continue;
      h.update(key);
      h.update(value);
    }
  }
  return h.digest();
}
