// Range evaluation with etcd 3.4's rules (etcdserver/apply.go Range + mvcc rangeKeys), over
// whichever LMDB transaction is current: the gateway's read snapshot or the storage
// process's write transaction (so a Range inside a Txn sees the Txn's earlier writes).
import type { MvccDb } from './schema.js';
import { META, MAX_KEY_BYTES, readMeta } from './schema.js';
import { decodeKeyValue, encodeKeyValue, type KeyValue } from './keyvalue.js';
import { liveCount, liveRecord, recordAt, recordOf, scanLive, scanRefs, type Bounds } from './keyindex.js';
import { refIsPut } from './revision.js';
import { Errors } from '../errors.js';
import { RangeEncoder, build, rangeResponse, type Header } from './responses.js';
import { asBuffer } from '../bytes.js';

export const SortOrder = { NONE: 0, ASCEND: 1, DESCEND: 2 } as const;
export const SortTarget = { KEY: 0, VERSION: 1, CREATE: 2, MOD: 3, VALUE: 4 } as const;

/** The fields of etcdserverpb.RangeRequest, with int64s as numbers. */
export interface RangeParams {
  key: Uint8Array;
  rangeEnd: Uint8Array;
  limit: number;
  revision: number;
  sortOrder: number;
  sortTarget: number;
  keysOnly: boolean;
  countOnly: boolean;
  minModRevision: number;
  maxModRevision: number;
  minCreateRevision: number;
  maxCreateRevision: number;
}

export interface RangeResult {
  /** Encoded mvccpb.KeyValue records, ready to be copied into a response. */
  kvs: Buffer[];
  count: number;
  more: boolean;
  /** The header revision: the current revision, also for reads in the past. */
  revision: number;
}

export interface Revisions {
  current: number;
  compacted: number;
}

export function readRevisions(db: MvccDb): Revisions {
  return { current: readMeta(db, META.revision), compacted: readMeta(db, META.compactRevision) };
}

/** "\0" as range_end means "every key >= key". */
export function isFromKey(rangeEnd: Uint8Array): boolean {
  return rangeEnd.length === 1 && rangeEnd[0] === 0;
}

/** The upper bound for LMDB (exclusive), or undefined for "to the end". */
function upperBound(rangeEnd: Uint8Array): Buffer | undefined {
  return isFromKey(rangeEnd) ? undefined : Buffer.from(rangeEnd.buffer, rangeEnd.byteOffset, rangeEnd.length);
}

/** Checks the requested revision as etcd does; returns the revision to read at. */
export function resolveRevision(requested: number, revs: Revisions): number {
  if (requested > revs.current) throw Errors.futureRev;
  const rev = requested <= 0 ? revs.current : requested;
  if (rev < revs.compacted) throw Errors.compacted;
  return rev;
}

/** A record of a range: a view valid only during the call (copy what is kept). */
export type Visit = (record: Uint8Array) => void;

/**
 * Every live version in [key, rangeEnd) at revision `rev` (etcd's mvcc rangeKeys), in key
 * order, to `visit`; `limit` 0 means all. Returns the total number of keys in range.
 */
export function walkRange(
  db: MvccDb,
  key: Uint8Array,
  rangeEnd: Uint8Array,
  rev: number,
  current: number,
  limit: number,
  countOnly: boolean,
  visit: Visit,
): number {
  let start = asBuffer(key);
  if (rangeEnd.length === 0) {
    // No stored key is longer than LMDB's limit (and LMDB cannot even look one up).
    if (start.length > MAX_KEY_BYTES) return 0;
    const v = rev >= current ? liveRecord(db, start) : recordAt(db, start, rev, countOnly);
    if (!v) return 0;
    if (!countOnly) visit(v);
    return 1;
  }
  let end = upperBound(rangeEnd);
  if (end && Buffer.compare(start, end) >= 0) return 0;
  // Bounds longer than LMDB's key limit L, as equivalent bounds LMDB accepts: for a stored key
  // k (at most L bytes), k >= start <=> k > start[0, L), and k < end <=> k <= end[0, L).
  const exclusiveStart = start.length > MAX_KEY_BYTES;
  if (exclusiveStart) start = start.subarray(0, MAX_KEY_BYTES);
  const inclusiveEnd = !!end && end.length > MAX_KEY_BYTES;
  if (end && inclusiveEnd) end = end.subarray(0, MAX_KEY_BYTES);
  const bounds: Bounds = { start, end, exclusiveStart, inclusiveEnd };
  if (rev >= current) {
    // The count is the in-C count of the index, needed on its own only when the walk stopped
    // at the limit.
    if (countOnly) return liveCount(db, bounds);
    let n = 0;
    scanLive(db, bounds, (record) => {
      visit(record);
      return ++n !== limit;
    });
    return limit > 0 && n >= limit ? liveCount(db, bounds) : n;
  }
  // In the past: every key that had a version at rev, counted past the limit.
  let count = 0;
  scanRefs(db, bounds, rev, (ref) => {
    if (!refIsPut(ref)) return true;
    if (!countOnly && (limit <= 0 || count < limit)) visit(recordOf(db, ref));
    count++;
    return true;
  });
  return count;
}

/** Copies of every version in [key, rangeEnd) that is live now (in the caller's transaction). */
export function liveInRange(db: MvccDb, key: Uint8Array, rangeEnd: Uint8Array): Buffer[] {
  const kvs: Buffer[] = [];
  walkRange(db, key, rangeEnd, Number.MAX_SAFE_INTEGER, 0, 0, false, (record) => kvs.push(Buffer.from(record)));
  return kvs;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  return Buffer.compare(a, b);
}

/** etcd's Range: filters, sort, limit and keys_only on top of walkRange. */
export function range(db: MvccDb, p: RangeParams, revs: Revisions = readRevisions(db)): RangeResult {
  if (p.key.length === 0) throw Errors.emptyKey;
  const rev = resolveRevision(p.revision, revs);
  const filtered = p.minModRevision || p.maxModRevision || p.minCreateRevision || p.maxCreateRevision;
  // Sorting by key ascending is the natural order; any other requested order needs every key
  // in range. etcd decides this on the order as requested: a sort target without an order
  // sorts (ascending) only the first limit+1 keys, and so does this.
  const fetchAll = filtered || (p.sortOrder !== SortOrder.NONE && !(p.sortOrder === SortOrder.ASCEND && p.sortTarget === SortTarget.KEY));
  let sortOrder = p.sortOrder;
  if (p.sortTarget !== SortTarget.KEY && sortOrder === SortOrder.NONE) sortOrder = SortOrder.ASCEND;
  const fetchLimit = fetchAll || p.limit <= 0 ? 0 : p.limit + 1;
  let kvs: Buffer[] = [];
  const count = walkRange(db, p.key, p.rangeEnd, rev, revs.current, fetchLimit, p.countOnly, (record) => kvs.push(Buffer.from(record)));
  if (p.countOnly) return { kvs: [], count, more: false, revision: revs.current };

  let decoded: KeyValue[] | undefined;
  if (filtered || (sortOrder !== SortOrder.NONE && p.sortTarget !== SortTarget.KEY) || p.keysOnly) {
    decoded = kvs.map(decodeKeyValue);
  }
  if (filtered && decoded) {
    const keep: number[] = [];
    decoded.forEach((kv, i) => {
      if (p.maxModRevision && kv.modRevision > p.maxModRevision) return;
      if (p.minModRevision && kv.modRevision < p.minModRevision) return;
      if (p.maxCreateRevision && kv.createRevision > p.maxCreateRevision) return;
      if (p.minCreateRevision && kv.createRevision < p.minCreateRevision) return;
      keep.push(i);
    });
    kvs = keep.map((i) => kvs[i]);
    decoded = keep.map((i) => decoded![i]);
  }
  if (sortOrder !== SortOrder.NONE) {
    const dir = sortOrder === SortOrder.DESCEND ? -1 : 1;
    if (p.sortTarget === SortTarget.KEY) {
      if (dir < 0) {
        kvs = kvs.slice().reverse();
        decoded = decoded?.slice().reverse();
      }
    } else {
      const d = decoded!;
      const order = d.map((_, i) => i);
      const field = (kv: KeyValue): number =>
        p.sortTarget === SortTarget.VERSION ? kv.version : p.sortTarget === SortTarget.CREATE ? kv.createRevision : kv.modRevision;
      // Stable on the target, ties left in key order in both directions: matches etcd, whose
      // insertion sort (up to 12 elements) keeps ties in key order.
      order.sort((a, b) => {
        const c = p.sortTarget === SortTarget.VALUE ? compareBytes(d[a].value, d[b].value) : field(d[a]) - field(d[b]);
        return c * dir;
      });
      kvs = order.map((i) => kvs[i]);
      decoded = order.map((i) => d[i]);
    }
  }
  let more = false;
  if (p.limit > 0 && kvs.length > p.limit) {
    kvs = kvs.slice(0, p.limit);
    more = true;
  }
  if (p.keysOnly) {
    kvs = kvs.map((_, i) => encodeKeyValue({ ...decoded![i], value: new Uint8Array(0) }));
  }
  return { kvs, count, more, revision: revs.current };
}

/**
 * A Range's encoded etcdserverpb.RangeResponse. Its common case (no revision filters, key
 * order, not count_only) is encoded while the keys are walked (RangeEncoder: one copy per
 * record); any other is range() and rangeResponse(). `header`: the response's header, given
 * the current revision (etcd's header revision, also for a read in the past).
 */
export function encodedRange(db: MvccDb, p: RangeParams, header: (revision: number) => Header, revs: Revisions = readRevisions(db)): Buffer {
  const general =
    p.countOnly || p.minModRevision || p.maxModRevision || p.minCreateRevision || p.maxCreateRevision ||
    (p.sortOrder !== SortOrder.NONE && p.sortOrder !== SortOrder.ASCEND) || p.sortTarget !== SortTarget.KEY;
  if (general) {
    const rr = range(db, p, revs);
    return build((w) => rangeResponse(w, header(rr.revision), rr.kvs, rr.more, rr.count));
  }
  if (p.key.length === 0) throw Errors.emptyKey;
  const rev = resolveRevision(p.revision, revs);
  const out = new RangeEncoder(header(revs.current));
  // One key past the limit tells whether there are more, as in range().
  let written = 0;
  let more = false;
  const count = walkRange(db, p.key, p.rangeEnd, rev, revs.current, p.limit > 0 ? p.limit + 1 : 0, false, (record) => {
    if (p.limit > 0 && written === p.limit) more = true;
    else {
      if (p.keysOnly) out.kvWithoutValue(record);
      else out.kv(record);
      written++;
    }
  });
  return out.finish(more, count);
}
