// Benchmark keys and values: 64-byte keys `kvs-bench/<area>/<zero-padded index>` (so byte
// order is index order and a key range is an index range) and 256-byte random values.
import { randomBytes } from 'node:crypto';

export const KEY_BYTES = 64;
export const VALUE_BYTES = 256;
export const ROOT_PREFIX = 'kvs-bench/';

/** Where the preloaded data set lives. */
export const DATA_AREA = 'data';

export function prefix(area: string): string {
  return `${ROOT_PREFIX}${area}/`;
}

export function key(area: string, index: number): Buffer {
  const p = prefix(area);
  return Buffer.from(p + String(index).padStart(KEY_BYTES - p.length, '0'), 'latin1');
}

/** The first key after every key that starts with `p` (etcd's prefix range end). */
export function prefixEnd(p: string): Buffer {
  const b = Buffer.from(p, 'latin1');
  for (let i = b.length - 1; i >= 0; i--) {
    if (b[i]! < 0xff) {
      const end = Buffer.from(b.subarray(0, i + 1));
      end[i]!++;
      return end;
    }
  }
  return Buffer.from([0]);
}

export function value(bytes = VALUE_BYTES): Buffer {
  return randomBytes(bytes);
}

export function randomIndex(n: number): number {
  return Math.floor(Math.random() * n);
}
