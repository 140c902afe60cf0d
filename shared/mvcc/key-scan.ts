// keyrevs opened a second time for range walks (keyindex.ts says why): a KeyScan's key and value
// decoders copy into scratch buffers instead of allocating, so that each step yields only whether
// the entry starts a new key. Opened with the database (schema.ts), read by the walks.
import type { Database, RootDatabase } from 'lmdb';
import { REF_BYTES } from './revision.js';

export interface KeyScan {
  table: Database<true, boolean>;
  /** The ref of the entry the walk is on (when values are read). */
  ref: Buffer;
  /** The key of the entry the walk is on. */
  key: Buffer;
  keyLength: number;
  /**
   * keyrevs a third time, for refAt: lmdb-js takes a start value among a key's dups only on a
   * table with a value encoder (on plain binary values it throws), so this one has one that
   * copies each ref.
   */
  refs: Database<Buffer, Buffer>;
}

/** A copy of the ref at the start of `bytes` (lmdb-js's shared buffer is longer than the value). */
function copyRef(bytes: Uint8Array): Buffer {
  const ref = Buffer.allocUnsafe(REF_BYTES);
  for (let i = 0; i < REF_BYTES; i++) ref[i] = bytes[i]!;
  return ref;
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
    refs: env.openDB<Buffer, Buffer>({
      name: 'keyrevs',
      dupSort: true,
      keyEncoding: 'binary',
      encoder: {
        encode: (v: Buffer) => v,
        // Called with lmdb-js's shared buffer: the ref is copied out of it.
        decode: copyRef,
      },
    } as never),
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
