// For tests: a fresh MVCC database in a temporary directory, removed when the test ends.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openMvcc, type MvccDb } from './schema.js';

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
