// A walk over every record of `history` for bulk readers (the etcd snapshot export), without a
// Buffer per record: lmdb-js copies each value out of its shared buffer into a new Buffer and
// decodes each key into another, which is most of the cost of a walk over millions of records
// (and of the garbage collection after it). This handle's decoders instead leave the record in
// lmdb-js's shared buffer and the revision in `HistoryCursor`, valid until the next step.
import type { Database } from 'lmdb';
import type { MvccDb } from './schema.js';
import { historyCompression } from './schema.js';
import { mainOf, revKey, subOf, REVKEY_BYTES } from './revision.js';

export interface HistoryCursor {
  main: number;
  sub: number;
  /** The record's bytes are record[0 .. length). */
  record: Uint8Array;
  length: number;
}

const scans = new WeakMap<MvccDb, { table: Database<boolean, Buffer>; cursor: HistoryCursor }>();

function open(db: MvccDb) {
  let s = scans.get(db);
  if (s) return s;
  const cursor: HistoryCursor = { main: 0, sub: 0, record: new Uint8Array(0), length: 0 };
  const revkey = Buffer.alloc(REVKEY_BYTES);
  const table = db.env.openDB<boolean, Buffer>({
    name: 'history',
    compression: historyCompression(db.meta),
    keyEncoder: {
      writeKey(key: Buffer, target: Buffer, start: number) {
        target.set(key, start);
        return start + key.length;
      },
      readKey(bytes: Buffer, start: number, end: number) {
        for (let i = 0; i < REVKEY_BYTES && start + i < end; i++) revkey[i] = bytes[start + i]!;
        cursor.main = mainOf(revkey);
        cursor.sub = subOf(revkey);
        return true;
      },
    },
    encoder: {
      encode: (v: Buffer) => v,
      // Called with lmdb-js's shared buffer (no stable copy is asked for: needsStableBuffer unset).
      decode(bytes: Uint8Array, size: number) {
        cursor.record = bytes;
        cursor.length = size;
        return true;
      },
    },
  } as never);
  scans.set(db, (s = { table, cursor }));
  return s;
}

/**
 * Calls `visit` for every history record in revision order (every one after revision
 * `after` when given), in the caller's read snapshot. The cursor (and the bytes it points at)
 * is only valid during the call.
 */
export function scanHistory(db: MvccDb, visit: (c: HistoryCursor) => void, after?: { main: number; sub: number }): void {
  const { table, cursor } = open(db);
  // From the lowest revision key when not told: with a key encoder of its own, lmdb-js finds
  // no start of its own.
  const start = after ? revKey(after.main, after.sub) : Buffer.alloc(REVKEY_BYTES);
  for (const _ of table.getRange({ start })) {
    if (after && cursor.main === after.main && cursor.sub === after.sub) continue;
    visit(cursor);
  }
}
