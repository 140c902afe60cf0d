// Reading the key index (`keyrevs`, schema.ts): which version of a key is live now or was live
// at a revision, and walks over the live keys of a range. etcd keeps this index in memory (its
// treeIndex); kvs keeps it in LMDB, where the gateway process reads it too.
//
// Reads that return a `view` hand out LMDB's shared read buffer (lmdb-js getBinaryFast): valid
// only until the next LMDB read in this process, so the caller copies what it keeps at once.
import type { Database, RootDatabase } from 'lmdb';
import type { MvccDb } from './schema.js';
import { REF_BYTES, REVKEY_BYTES, refIsPut, refMain, refRevKey } from './revision.js';

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
function recordOf(db: MvccDb, ref: Uint8Array): Uint8Array {
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
  for (const ref of db.keyrevs.getValues(key)) {
    if (refMain(ref) <= rev) return ref;
  }
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
// A walk needs, per key, only its first (newest) dup. lmdb-js iterates keys alone (LMDB's
// NEXT_NODUP) or every dup with its value, and allocates a Buffer for each key and value it
// returns (most of a range's cost). So keyrevs is opened a second time as a KeyScan, whose
// key and value decoders copy into scratch buffers instead: each step yields only whether
// the entry starts a new key, and the newest ref of that key is in the scratch.

/** An older change of the same key is skipped in JS; after this many in a row the walk jumps past the key. */
const MAX_OLDER_RUN = 8;

export interface KeyScan {
  table: Database<true, boolean>;
  /** The ref of the entry the walk is on. */
  ref: Buffer;
  /** The key of the entry the walk is on. */
  key: Buffer;
  keyLength: number;
}

/** Opens keyrevs as a KeyScan (schema.ts, at open time: lmdb-js opens tables in a transaction of their own). */
export function openKeyScan(env: RootDatabase<Buffer, Buffer>): KeyScan {
  const scan: KeyScan = {
    // Filled below; typed here so the decoders can reach it.
    table: undefined as unknown as Database<true, boolean>,
    ref: Buffer.alloc(REF_BYTES),
    // Larger than any LMDB key (MAX_KEY_BYTES).
    key: Buffer.alloc(2048),
    keyLength: -1,
  };
  scan.table = env.openDB<true, boolean>({
    name: 'keyrevs',
    dupSort: true,
    encoder: {
      encode: (v: Buffer) => v,
      // Called with lmdb-js's shared buffer (no stable copy is asked for).
      decode(bytes: Uint8Array) {
        for (let i = 0; i < REF_BYTES; i++) scan.ref[i] = bytes[i];
        return true;
      },
    },
    keyEncoder: {
      writeKey(key: Buffer, target: Buffer, start: number) {
        target.set(key, start);
        return start + key.length;
      },
      /** True when the entry's key differs from the previous entry's: the first (newest) dup of a key. */
      // Byte loops: cheaper than Buffer.compare/copy's argument checks for keys this short,
      // and keys in a range mostly differ near their end.
      readKey(bytes: Buffer, start: number, end: number) {
        const n = end - start;
        const last = scan.key;
        if (n === scan.keyLength) {
          let i = n - 1;
          while (i >= 0 && bytes[start + i] === last[i]) i--;
          if (i < 0) return false;
        }
        for (let i = 0; i < n; i++) last[i] = bytes[start + i]!;
        scan.keyLength = n;
        return true;
      },
    },
  } as never);
  return scan;
}

/**
 * Calls `visit` with the live version (a view: see the file comment) of every key in `b` that
 * is live now, in key order, until it returns false.
 */
export function scanLive(db: MvccDb, b: Bounds, visit: (record: Uint8Array) => boolean): void {
  const scan = db.keyScan;
  let { start, exclusiveStart } = b;
  for (;;) {
    let skipFrom: Buffer | undefined;
    let olderRun = 0;
    scan.keyLength = -1;
    for (const { key: first } of scan.table.getRange({ start, end: b.end, exclusiveStart, inclusiveEnd: b.inclusiveEnd }) as Iterable<{ key: boolean }>) {
      if (!first) {
        if (++olderRun < MAX_OLDER_RUN) continue;
        // Many changes of one key: let LMDB skip the rest of them (an exclusive start skips
        // every dup of the start key, in C).
        skipFrom = Buffer.from(scan.key.subarray(0, scan.keyLength));
        break;
      }
      olderRun = 0;
      if (!refIsPut(scan.ref)) continue;
      if (!visit(recordOf(db, scan.ref))) return;
    }
    if (!skipFrom) return;
    start = skipFrom;
    exclusiveStart = true;
  }
}
