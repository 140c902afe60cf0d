// Key-space arithmetic of etcd's Range, for the console's browser: pure functions.
import { prefixRangeEnd } from '../../shared/bytes.js';

/** etcd's "every key from here": a range_end of one zero byte. */
const ALL = Buffer.from([0]);

/**
 * The range_end of a prefix: the prefix with its last byte below 0xff incremented and the
 * rest dropped (clientv3.GetPrefixRangeEnd); every key at or after it when there is none, or
 * for the empty prefix.
 */
export function prefixEnd(prefix: Buffer): Buffer {
  return prefixRangeEnd(prefix);
}

/** The first key of a prefix's range: etcd refuses an empty key, so "" starts at "\0". */
export function prefixStart(prefix: Buffer): Buffer {
  return prefix.length ? prefix : ALL;
}
