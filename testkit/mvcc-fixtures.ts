// For the MVCC unit tests: a fresh database in a temporary directory, and the random writes the
// compaction tests replay on two stores side by side (same seed, same sequence on both).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openMvcc, type MvccDb } from '../shared/mvcc/schema.js';
import type { PutRequest } from '../shared/mvcc/requests.js';
import type { Executor } from '../services/storage/mvcc/execute.js';

export function tempMvccDb(t: { after(fn: () => unknown): void }, name = 'kvs-mvcc-'): MvccDb {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), name));
  const db = openMvcc(dir, { readOnly: false });
  t.after(async () => {
    await db.env.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  db.env.transactionSync(() => db.meta.putSync('revision', 1));
  return db;
}

const b = (s: string) => Buffer.from(s);
const NONE = new Uint8Array(0);

export const putRequest = (key: string, value: string): PutRequest => ({ key: b(key), value: b(value), lease: 0, prevKv: false, ignoreValue: false, ignoreLease: false });

export interface RandomWrite {
  /** Runs the write on an executor (inside the caller's write transaction). */
  op: (ex: Executor) => unknown;
  compaction: boolean;
}

/**
 * Write number `i` of a random sequence over `keys`: a put (55 %), a range delete (20 %), a Txn
 * that deletes a key and puts another (10 %), or a compaction (15 %) to a revision that `ref`
 * (the executor of the reference store) can compact to: often its head (a deletion at the
 * compact revision), else any revision above its compact revision. Undefined when the drawn
 * compaction has no revision to go to. `longValues`: put values of up to 40 times `v<i>`, so
 * that values span pages.
 */
export function randomWrite(rnd: () => number, keys: readonly string[], i: number, ref: Executor, longValues = false): RandomWrite | undefined {
  const pick = (): string => keys[Math.floor(rnd() * keys.length)]!;
  const r = rnd();
  if (r < 0.55) {
    const k = pick();
    const v = longValues ? `v${i}`.repeat(1 + Math.floor(rnd() * 40)) : `v${i}`;
    return { op: (ex) => ex.put(putRequest(k, v)), compaction: false };
  }
  if (r < 0.75) {
    const [x, y] = [pick(), pick()].sort();
    return { op: (ex) => ex.deleteRange({ key: b(x!), rangeEnd: b(`${y}\0`), prevKv: false }), compaction: false };
  }
  if (r < 0.85) {
    const k = pick();
    const success = () => [{ requestDeleteRange: { key: b(k), rangeEnd: NONE, prevKv: false } }, { requestPut: putRequest(`${k}2`, 't') }];
    return { op: (ex) => ex.txn({ compare: [], success: success(), failure: [] }), compaction: false };
  }
  const to = rnd() < 0.3 ? ref.revision : ref.compactRevision + 1 + Math.floor(rnd() * (ref.revision - ref.compactRevision));
  if (to <= ref.compactRevision || to > ref.revision) return undefined;
  return { op: (ex) => ex.compact({ revision: to, physical: false }), compaction: true };
}
