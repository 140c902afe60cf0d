// Compaction in two parts, so that compacting millions of revisions does not stall writes.
//
// 1. The Compact request (and its WAL entry, on replay) only moves the compact revision
//    (markCompaction): from then on reads below it fail with etcd's compacted error.
// 2. The physical removal of the versions it made unreachable runs afterwards in bounded
//    steps (compactStep), each in its own short write transaction between write batches.
//    Its progress is in `meta` (compactedThrough, compactCursor), committed with the removals,
//    so a step is resumed after a crash and a replayed Compact just moves the target.
//
// The rule (etcd's): compaction to R keeps, of every key's changes at or below R, only the
// newest, and not even that one if it is a deletion. While removal is pending, the versions it
// will remove are still stored, but no reader can see them: a Range at any revision >= R
// reads each key's newest change at or below that revision; counts are keys in keyrevs minus
// keys in deleted, and a key leaves both at once; a key's changes are removed oldest first,
// so its newest change at or below R goes last. The readers that walk stored records skip the
// leftovers explicitly (history.ts: a deletion at or below the compact revision; hash.ts).
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META, readMeta } from '../../../shared/mvcc/schema.js';
import { decodeKeyValue } from '../../../shared/mvcc/keyvalue.js';
import { compactionPending } from '../../../shared/mvcc/history.js';
import { revKey, mainOf, subOf, refMain, refIsPut, refRevKey } from '../../../shared/mvcc/revision.js';

export { compactionPending };

/** Records removed per step: etcd's compaction batch limit. */
export const STEP_LIMIT = 1000;

/** Moves the compact revision to `rev` (the Compact request's effect); removes nothing. */
export function markCompaction(db: MvccDb, rev: number): void {
  db.meta.putSync(META.compactRevision, rev);
}

/**
 * Compacts `key`'s changes to `target`, oldest first, removing at most `limit` of them.
 * Returns how many it removed and whether the key is done.
 */
function compactKey(db: MvccDb, key: Buffer, target: number, limit: number): { removed: number; done: boolean } {
  // Oldest first; one more than can be removed, to know what follows the last one.
  const refs = [...db.keyrevs.getValues(key, { reverse: true, limit: limit + 1 })].map((r) => Buffer.from(r));
  const remove = (ref: Buffer) => {
    db.keyrevs.removeSync(key, ref);
    db.history.removeSync(refRevKey(ref));
  };
  let removed = 0;
  for (let i = 0; i < refs.length; i++) {
    const ref = refs[i]!;
    if (refMain(ref) > target) return { removed, done: true };
    const next = refs[i + 1];
    if (next === undefined && refs.length > limit) return { removed, done: false }; // the limit
    if (next !== undefined && refMain(next) <= target) {
      remove(ref); // superseded at or below the target
      removed++;
      continue;
    }
    // The newest change at or below the target: a put stays, a deletion goes, and with
    // nothing after it the key leaves the index and so the deleted keys.
    if (!refIsPut(ref)) {
      remove(ref);
      removed++;
      if (next === undefined) db.deleted.removeSync(key);
    }
    return { removed, done: true };
  }
  return { removed, done: true };
}

/** History records read per page of a step's walk, and at most per step. */
const PAGE = 128;
const MAX_READ_PER_STEP = 4 * STEP_LIMIT;

/**
 * One bounded step of the pending physical removal, in the caller's write transaction: walks
 * `history` from the cursor towards the compact revision and compacts every key it meets,
 * removing at most `limit` records (and reading at most a few thousand). Returns true when
 * nothing is pending any more.
 *
 * Every key with changes in (compactedThrough, compact revision] has something to remove (no
 * other key has). The walk meets each such key at its oldest change there; a key's later
 * records are either removed by then or met again (cheaply: nothing left to remove). A
 * compaction to a higher revision while one is pending just moves the target: keys already
 * done for the lower one with changes up to the higher one are met again further on.
 */
export function compactStep(db: MvccDb, limit = STEP_LIMIT): boolean {
  const target = readMeta(db, META.compactRevision);
  const through = readMeta(db, META.compactedThrough);
  if (through >= target) return true;
  const saved = db.meta.get(META.compactCursor) as [number, number] | undefined;
  let cursor = saved ? revKey(saved[0], saved[1]) : undefined;
  const end = revKey(target + 1, 0);
  const stop = (): false => {
    if (cursor) db.meta.putSync(META.compactCursor, [mainOf(cursor), subOf(cursor)]);
    return false;
  };
  let removed = 0;
  let read = 0;
  const met = new Set<string>();
  for (;;) {
    // A page is read before anything of it is removed: the walk does not run over its own removals.
    const page: { revkey: Buffer; key: Buffer }[] = [];
    for (const { key: rk, value } of db.history.getRange({ start: cursor ?? revKey(through + 1, 0), exclusiveStart: !!cursor, end, limit: PAGE })) {
      page.push({ revkey: Buffer.from(rk), key: Buffer.from(decodeKeyValue(value).key) });
    }
    read += page.length;
    for (const { revkey, key } of page) {
      const id = key.toString('latin1');
      if (!met.has(id)) {
        if (removed >= limit) return stop();
        const r = compactKey(db, key, target, limit - removed);
        removed += r.removed;
        if (!r.done) return stop(); // this record is met again next step
        met.add(id);
      }
      cursor = revkey;
    }
    if (page.length < PAGE) break;
    if (read >= MAX_READ_PER_STEP) return stop();
  }
  db.meta.putSync(META.compactedThrough, target);
  db.meta.removeSync(META.compactCursor);
  return true;
}

/** Runs the pending removal to its end, in the caller's write transaction (tests, tools). */
export function finishCompaction(db: MvccDb): void {
  while (!compactStep(db, 100_000));
}
