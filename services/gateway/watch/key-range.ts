// The key set a watcher covers, in etcd's three forms, and the prefix test the index uses.
import { prefixEnd } from '../../../shared/bytes.js';

export interface KeyRange {
  key: Buffer;
  /** Exclusive end; undefined: the single key `key`; null: every key >= `key`. */
  end: Buffer | null | undefined;
}

/** etcd's WatchCreateRequest forms: empty range_end is one key, "\0" means "from key". */
export function watchRange(key: Uint8Array, rangeEnd: Uint8Array): KeyRange {
  // etcd: an empty key is "\0", the smallest key.
  const k = key.length === 0 ? Buffer.from([0]) : Buffer.from(key);
  if (rangeEnd.length === 0) return { key: k, end: undefined };
  if (rangeEnd.length === 1 && rangeEnd[0] === 0) return { key: k, end: null };
  return { key: k, end: Buffer.from(rangeEnd) };
}

/** etcd refuses a range whose end is not after its key ("mvcc: watcher range is empty"). */
export function isEmptyRange(r: KeyRange): boolean {
  return r.end instanceof Buffer && Buffer.compare(r.key, r.end) >= 0;
}

export function contains(r: KeyRange, key: Buffer): boolean {
  if (r.end === undefined) return r.key.equals(key);
  if (Buffer.compare(key, r.key) < 0) return false;
  return r.end === null || Buffer.compare(key, r.end) < 0;
}

/** The end of the range of keys starting with `prefix`, or null when that is "every key >= prefix". */
export { prefixEnd };

/** True when the range is exactly the keys starting with r.key (etcdctl --prefix). */
export function isPrefixRange(r: KeyRange): boolean {
  if (r.end === undefined || r.key.length === 0) return false;
  const pe = prefixEnd(r.key);
  return pe === null ? r.end === null : r.end !== null && pe.equals(r.end);
}
