// Reading the key index (`keyrevs`, schema.ts): which version of a key is live now or was live
// at a revision, and walks over the live keys of a range. etcd keeps this index in memory (its
// treeIndex); kvs keeps it in LMDB, where the gateway process reads it too.
//
// Reads that return a `view` hand out LMDB's shared read buffer (lmdb-js getBinaryFast): valid
// only until the next LMDB read in this process, so the caller copies what it keeps at once.
import type { RangeOptions } from 'lmdb';
import type { MvccDb } from './schema.js';
import { EVENT_PUT, REVKEY_BYTES, keyRevValue, refIsPut, refMain, refRevKey } from './revision.js';

/** The largest sub index a revision key can hold. */
const MAX_SUB = 0xffff_ffff;

/** Range bounds as lmdb-js takes them (see range.ts for how etcd's bounds map to these). */
export interface Bounds {
  start: Buffer;
  end?: Buffer;
  exclusiveStart?: boolean;
  inclusiveEnd?: boolean;
}

/** A history key scratch buffer: a ref is turned into the history key it points at without allocating. */
const revkeyScratch = Buffer.alloc(REVKEY_BYTES);

function indexBroken(): Error {
  return new Error('kvs: the key index (keyrevs) names a change that is not in history: the database is damaged');
}

/**
 * `bytes` as a view of exactly the record: lmdb-js's shared buffer is larger and has its
 * `length` set per read, which copying functions (set, Buffer.copy) do not honour.
 */
function viewOf(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
}

/** The history record a ref points at, as a view of LMDB's shared read buffer. */
export function recordOf(db: MvccDb, ref: Uint8Array): Uint8Array {
  const rec = db.history.getBinaryFast(refRevKey(ref, revkeyScratch));
  if (rec === undefined) throw indexBroken();
  return viewOf(rec);
}

/** The live version of `key` (its newest change, if a PUT), as a view: see the file comment. */
export function liveRecord(db: MvccDb, key: Buffer): Uint8Array | undefined {
  // On a dupSort table a plain get returns the first duplicate: the newest change.
  const ref = db.keyrevs.getBinaryFast(key);
  if (ref === undefined || !refIsPut(ref)) return undefined;
  return recordOf(db, ref);
}

/** The live version of `key` (a copy), or undefined when it does not exist. */
export function liveVersion(db: MvccDb, key: Buffer): Buffer | undefined {
  const v = liveRecord(db, key);
  return v && Buffer.from(v);
}

export function isLive(db: MvccDb, key: Buffer): boolean {
  const ref = db.keyrevs.getBinaryFast(key);
  return ref !== undefined && refIsPut(ref);
}

/** The ref of `key`'s newest change at or below revision `rev` (a copy), if any. */
export function refAt(db: MvccDb, key: Buffer, rev: number): Buffer | undefined {
  // Refs sort newest first, so the first at or after the ref of (rev, the largest sub) is the
  // newest change at or below rev: LMDB positions on it in one step (MDB_GET_BOTH_RANGE), where
  // a walk from the newest would cost a step per later change of the key.
  for (const ref of db.keyScan.refs.getValues(key, { start: keyRevValue(rev, MAX_SUB, EVENT_PUT) })) return ref;
  return undefined;
}

const PRESENT = new Uint8Array(0);

/**
 * The version of `key` live at revision `rev`, as a view (see the file comment), or undefined
 * if it did not exist then. With `existsOnly` an empty array stands for "exists" and the
 * record is not read.
 */
export function recordAt(db: MvccDb, key: Buffer, rev: number, existsOnly = false): Uint8Array | undefined {
  const ref = refAt(db, key, rev);
  if (!ref || !refIsPut(ref)) return undefined;
  return existsOnly ? PRESENT : recordOf(db, ref);
}

/** The version of `key` live at revision `rev` (a copy), or undefined if it did not exist then. */
export function versionAt(db: MvccDb, key: Buffer, rev: number): Buffer | undefined {
  const v = recordAt(db, key, rev);
  return v && Buffer.from(v);
}

/** The number of keys in `b` that are live now: keys in the index minus those whose newest change is a deletion. */
export function liveCount(db: MvccDb, b: Bounds): number {
  // Fresh option objects: lmdb-js's getCount() marks the object it is given as count-only.
  return db.keyrevs.getKeysCount({ ...b }) - db.deleted.getCount({ ...b });
}

// ---- walking the live keys of a range ------------------------------------------------------
//
// A walk needs, per key, only its first (newest) dup. lmdb-js iterates every dup with its
// value (LMDB's NEXT), or keys alone (NEXT_NODUP: the older dups are skipped in C), and
// allocates a Buffer for each key and value it returns (most of a range's cost). So keyrevs is
// opened a second time as a KeyScan (key-scan.ts), whose key and value decoders copy into scratch buffers
// instead: each step yields only whether the entry starts a new key, and the key (and, when
// values are read, the newest ref of that key) is in the scratch.
//
// Which of the two iterations is cheaper depends on the keys' histories. Measured per key of a
// 1,000-key walk with the history read (2026-11-29): every dup with its value costs ~0.8 µs
// for a key with one change and ~0.17 µs more per older change (3.5 µs with 20 changes); keys
// alone cost a lookup of the newest ref per key instead, ~1.15 µs whatever the history. So a
// walk starts with values and goes on with keys alone once it has stepped over more than
// SKIPPED_PER_KEY changes per key it met (and at least MIN_SKIPPED, so that one busy key does
// not decide for the rest): keys updated many times since the last compaction (as Kubernetes
// objects are) then cost about what keys written once do. A walk at a past revision wants
// each key's newest change at or below it: with values it steps over the later ones too; with
// keys alone LMDB positions on it (refAt).

/** When a walk goes on with keys alone (see above). */
const SKIPPED_PER_KEY = 2;
const MIN_SKIPPED = 8;

/**
 * Calls `visit` with the live version (a view: see the file comment) of every key in `b` that
 * is live now, in key order, until it returns false.
 */
export function scanLive(db: MvccDb, b: Bounds, visit: (record: Uint8Array) => boolean): void {
  scanRefs(db, b, LATEST, (ref) => !refIsPut(ref) || visit(recordOf(db, ref)));
}

/** scanRefs' revision for "the newest change of each key". */
const LATEST = Infinity;

/**
 * Calls `visit` with the ref of every key in `b` that has a change at or below `rev` (the
 * newest such change; LATEST: the newest of all), in key order, until it returns false. The
 * ref is valid only during the call.
 */
export function scanRefs(db: MvccDb, b: Bounds, rev: number, visit: (ref: Uint8Array) => boolean): void {
  const scan = db.keyScan;
  // Keys met, and entries stepped over: changes after `rev` before a key's ref, older ones after it.
  let keys = 0;
  let skipped = 0;
  // Whether the key the walk is on has had its ref visited (or has none at or below rev).
  let settled = false;
  let resumeFrom: Buffer | undefined;
  scan.keyLength = -1;
  for (const { key: first } of scan.table.getRange({ start: b.start, end: b.end, exclusiveStart: b.exclusiveStart, inclusiveEnd: b.inclusiveEnd }) as Iterable<{ key: boolean }>) {
    if (first) {
      settled = false;
      keys++;
    }
    if (settled || (rev !== LATEST && refMain(scan.ref) > rev)) {
      if (++skipped < MIN_SKIPPED || skipped <= SKIPPED_PER_KEY * keys) continue;
      resumeFrom = Buffer.from(scan.key.subarray(0, scan.keyLength));
      break;
    }
    settled = true;
    if (!visit(scan.ref)) return;
  }
  // The rest with keys alone (once this iterator has let its cursor go): after the key the walk
  // stopped on, or from it if its ref is still to come.
  if (resumeFrom) scanRefsKeysAlone(db, resumeFrom, !settled, b, rev, visit);
}

/** scanRefs' keys-alone iteration, from `from` (included or not). */
function scanRefsKeysAlone(db: MvccDb, from: Buffer, included: boolean, b: Bounds, rev: number, visit: (ref: Uint8Array) => boolean): void {
  const scan = db.keyScan;
  const keysAlone = { start: from, end: b.end, exclusiveStart: !included, inclusiveEnd: b.inclusiveEnd, values: false };
  for (const _ of scan.table.getRange(keysAlone as RangeOptions)) {
    const key = scan.key.subarray(0, scan.keyLength);
    // On a dupSort table a plain get returns the first duplicate: the newest change. At a
    // recent revision it is mostly the one wanted; refAt's positioned read costs more.
    let ref: Uint8Array | undefined = db.keyrevs.getBinaryFast(key);
    if (ref === undefined) throw indexBroken();
    if (rev !== LATEST && refMain(ref) > rev && !(ref = refAt(db, key, rev))) continue;
    if (!visit(ref)) return;
  }
}
