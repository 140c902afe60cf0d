// Reading the change history (the `history` table) in revision order: what watchers that
// start in the past, fall behind, or lost the live feed are served from.
import type { MvccDb } from './schema.js';
import { META, readMeta } from './schema.js';
import { decodeKeyValue } from './keyvalue.js';
import { mainOf, revKey } from './revision.js';
import { versionAt } from './keyindex.js';
import { asBuffer } from '../bytes.js';

/** mvccpb.Event.EventType */
export const EventType = { PUT: 0, DELETE: 1 } as const;

/** One change of one key: an mvccpb.Event without prev_kv. */
export interface Change {
  /** The main revision the change belongs to. */
  revision: number;
  type: number;
  /** The stored mvccpb.KeyValue record (a tombstone, key and mod_revision only, for DELETE). */
  kv: Buffer;
  /** A view of the key inside `kv`. */
  key: Buffer;
  /** A PUT that created the key (etcd's IsCreateEvent): it has no previous version. */
  created: boolean;
}

/** A stored record (a history value or a WAL mutation) as a Change of `revision`. */
export function changeOf(kvBytes: Uint8Array, revision: number): Change {
  const kv = asBuffer(kvBytes);
  const d = decodeKeyValue(kv);
  // Tombstones are the only records with version 0.
  const type = d.version === 0 ? EventType.DELETE : EventType.PUT;
  return { revision, type, kv, key: asBuffer(d.key), created: type === EventType.PUT && d.createRevision === d.modRevision };
}

export interface HistorySlice {
  /** Every change with from <= revision <= through, in revision order. */
  changes: Change[];
  /** The last revision read completely. */
  through: number;
}

/**
 * The changes of revisions [from, to], read in the caller's current read snapshot. Reading
 * stops at a revision boundary once `maxChanges` are collected, so a long history is served
 * in slices; `through` says how far this slice reaches.
 */
export function readHistory(db: MvccDb, from: number, to: number, maxChanges = Infinity): HistorySlice {
  const changes: Change[] = [];
  if (from > to) return { changes, through: to };
  // A deletion at or below the compact revision is removed by the compaction, but may still be
  // stored while its physical removal is in progress (services/storage/mvcc/compaction.ts).
  const compacted = compactRevision(db);
  let last = 0;
  for (const { key, value } of db.history.getRange({ start: revKey(from, 0), end: revKey(to + 1, 0) })) {
    const rev = mainOf(key);
    if (changes.length >= maxChanges && rev !== last) return { changes, through: last };
    last = rev;
    const change = changeOf(value, rev);
    if (rev <= compacted && change.type === EventType.DELETE) continue;
    changes.push(change);
  }
  return { changes, through: to };
}

export function currentRevision(db: MvccDb): number {
  return readMeta(db, META.revision);
}

export function compactRevision(db: MvccDb): number {
  return readMeta(db, META.compactRevision);
}

/** Whether versions a compaction made unreachable may still be stored (their removal runs in steps). */
export function compactionPending(db: MvccDb): boolean {
  return readMeta(db, META.compactedThrough) < readMeta(db, META.compactRevision);
}

/**
 * The version of `key` before the change at `revision` (an event's prev_kv), or undefined if
 * the key did not exist then or that revision has been compacted (etcd reads it with a Range
 * at revision-1, which then fails).
 */
export function previousVersion(db: MvccDb, key: Buffer, revision: number): Buffer | undefined {
  const at = revision - 1;
  if (at < compactRevision(db)) return undefined;
  return versionAt(db, key, at);
}
