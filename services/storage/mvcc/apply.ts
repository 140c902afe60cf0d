// The only code that mutates the MVCC tables. The live write path and WAL replay both go
// through it, so a replayed entry lands exactly as it did the first time.
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META } from '../../../shared/mvcc/schema.js';
import { decodeKeyValue, encodeKeyValue, EMPTY } from '../../../shared/mvcc/keyvalue.js';
import { revKey, keyRevValue, EVENT_PUT, EVENT_DELETE } from '../../../shared/mvcc/revision.js';
import { liveRecord } from '../../../shared/mvcc/keyindex.js';
import { reattach, applyLeaseChanges } from '../lease/apply.js';
import { markCompaction } from './compaction.js';
import { applyAuthChange } from '../auth/apply.js';
import { asBuffer } from '../../../shared/bytes.js';
import { MUTATION_DELETE, MUTATION_PUT, type WalEntry } from '../../../shared/wal/entry.js';

const EMPTY_VALUE = Buffer.alloc(0);

/** History only grows at the end (revisions only increase): MDB_APPEND fills its pages completely. */
const APPEND = { append: true };

/**
 * Stores a history record. LMDB refuses an append (and writes nothing) when the key is not
 * above the last one, e.g. a record written again by a replay; a plain put then stores it.
 */
function putHistory(db: MvccDb, revkey: Buffer, kv: Buffer): void {
  // lmdb-js types putSync as void; it returns whether LMDB stored the record.
  if (!(db.history.putSync(revkey, kv, APPEND) as unknown as boolean)) db.history.putSync(revkey, kv);
}

/** The lease of a key's live version (0n: none, or no such key). */
function liveLease(live: Uint8Array | undefined): bigint {
  return live ? decodeKeyValue(live).lease : 0n;
}

export function applyPut(db: MvccDb, key: Buffer, kv: Buffer, main: number, sub: number): void {
  const live = liveRecord(db, key);
  reattach(db, key, liveLease(live), decodeKeyValue(kv).lease);
  // A key created again leaves the deleted keys (for a new key this removes nothing).
  if (!live) db.deleted.removeSync(key);
  putHistory(db, revKey(main, sub), kv);
  db.keyrevs.putSync(key, keyRevValue(main, sub, EVENT_PUT));
}

/** Deletes the live version of `key` and returns the tombstone recorded in history. */
export function applyDelete(db: MvccDb, key: Buffer, main: number, sub: number): Buffer {
  const tombstone = encodeKeyValue({ key, createRevision: 0, modRevision: main, version: 0, value: EMPTY, lease: 0n });
  reattach(db, key, liveLease(liveRecord(db, key)), 0n);
  putHistory(db, revKey(main, sub), tombstone);
  db.keyrevs.putSync(key, keyRevValue(main, sub, EVENT_DELETE));
  db.deleted.putSync(key, EMPTY_VALUE);
  return tombstone;
}

/** Replays one WAL entry (inside the caller's write transaction). */
export function applyEntry(db: MvccDb, entry: WalEntry, index: number): void {
  entry.mutations.forEach((m, sub) => {
    const kv = asBuffer(m.kv);
    const key = asBuffer(decodeKeyValue(kv).key);
    if (m.type === MUTATION_DELETE) applyDelete(db, key, entry.revision, sub);
    else applyPut(db, key, kv, entry.revision, sub);
  });
  if (entry.revision > 0) db.meta.putSync(META.revision, entry.revision);
  // The removal of what it made unreachable follows in steps (compaction.ts).
  if (entry.compactRevision > 0) markCompaction(db, entry.compactRevision);
  applyLeaseChanges(db, entry);
  if (entry.auth) applyAuthChange(db, entry.auth);
  db.meta.putSync(META.appliedIndex, index);
}
