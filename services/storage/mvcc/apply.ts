// The only code that mutates the MVCC tables. The live write path and WAL replay both go
// through it, so a replayed entry lands exactly as it did the first time.
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META, readMeta } from '../../../shared/mvcc/schema.js';
import { decodeKeyValue, encodeKeyValue, EMPTY } from '../../../shared/mvcc/keyvalue.js';
import { revKey, keyRevValue, mainOf, EVENT_PUT, EVENT_DELETE, REVKEY_BYTES } from '../../../shared/mvcc/revision.js';
import { reattach, applyLeaseChanges, type LeaseChanges } from '../lease/apply.js';

export const MUTATION_PUT = 0;
export const MUTATION_DELETE = 1;

export interface Mutation {
  type: number;
  /** mvccpb.KeyValue bytes: the new version for PUT, a tombstone (key, mod_revision) for DELETE. */
  kv: Uint8Array;
}

/** A decoded kvs.storage.WalEntry. */
export interface WalEntry extends LeaseChanges {
  revision: number;
  mutations: Mutation[];
  compactRevision: number;
}

function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.length);
}

/** The lease of a key's live version (0n: none or no such key). */
function liveLease(db: MvccDb, key: Buffer): bigint {
  const prev = db.kv.get(key);
  return prev ? decodeKeyValue(prev).lease : 0n;
}

export function applyPut(db: MvccDb, key: Buffer, kv: Buffer, main: number, sub: number): void {
  reattach(db, key, liveLease(db, key), decodeKeyValue(kv).lease);
  db.kv.putSync(key, kv);
  db.history.putSync(revKey(main, sub), kv);
  db.keyrevs.putSync(key, keyRevValue(main, sub, EVENT_PUT));
}

/** Deletes the live version of `key` and returns the tombstone recorded in history. */
export function applyDelete(db: MvccDb, key: Buffer, main: number, sub: number): Buffer {
  const tombstone = encodeKeyValue({ key, createRevision: 0, modRevision: main, version: 0, value: EMPTY, lease: 0n });
  reattach(db, key, liveLease(db, key), 0n);
  db.kv.removeSync(key);
  db.history.putSync(revKey(main, sub), tombstone);
  db.keyrevs.putSync(key, keyRevValue(main, sub, EVENT_DELETE));
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
  if (entry.compactRevision > 0) applyCompaction(db, entry.compactRevision);
  applyLeaseChanges(db, entry);
  db.meta.putSync(META.appliedIndex, index);
}

/**
 * Physically removes history below `rev` (etcd's compaction rule): of every key's versions at
 * or below `rev`, only the newest stays, and not even that one if it is a deletion. Only keys
 * changed since the previous compaction can have anything to remove.
 */
export function applyCompaction(db: MvccDb, rev: number): void {
  db.meta.putSync(META.compactRevision, rev);
  const from = readMeta(db, META.compactedThrough);
  const changed = new Map<string, Buffer>();
  for (const { value } of db.history.getRange({ start: revKey(from + 1, 0), end: revKey(rev + 1, 0) })) {
    const key = asBuffer(decodeKeyValue(value).key);
    changed.set(key.toString('latin1'), Buffer.from(key));
  }
  for (const key of changed.values()) {
    const refs: Buffer[] = [];
    for (const ref of db.keyrevs.getValues(key)) {
      if (mainOf(ref) > rev) break;
      refs.push(ref);
    }
    if (refs.length === 0) continue;
    const newest = refs[refs.length - 1];
    const drop = newest[REVKEY_BYTES] === EVENT_PUT ? refs.slice(0, -1) : refs;
    for (const ref of drop) {
      db.keyrevs.removeSync(key, ref);
      db.history.removeSync(ref.subarray(0, REVKEY_BYTES));
    }
  }
  db.meta.putSync(META.compactedThrough, rev);
}
