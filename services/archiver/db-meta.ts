// The counters of an LMDB copy (a checkpoint being made, a restore being finished), read from
// the copy itself: a checkpoint records exactly what its file holds.
import fs from 'node:fs';
import path from 'node:path';
import { dbPath, META, NotCreatedError, openMvcc, readMeta } from '../../shared/mvcc/schema.js';

export interface DbMeta {
  revision: number;
  compactRevision: number;
  appliedIndex: number;
}

/** Reads the counters of the database in `<dir>/db` (opened read-only, then closed). */
export async function readDbMeta(dir: string): Promise<DbMeta> {
  const db = openMvcc(dir, { readOnly: true });
  try {
    return {
      revision: readMeta(db, META.revision) || 1,
      compactRevision: readMeta(db, META.compactRevision),
      appliedIndex: readMeta(db, META.appliedIndex),
    };
  } finally {
    await db.env.close();
  }
}

/**
 * The counters of the data directory's own database; undefined when it has none, or one whose
 * creation was cut short (storage died while creating it, and creates it on its next start).
 */
export async function readLocalDbMeta(dataDir: string): Promise<DbMeta | undefined> {
  if (!fs.existsSync(path.join(dbPath(dataDir), 'data.mdb'))) return undefined;
  try {
    return await readDbMeta(dataDir);
  } catch (err) {
    if (err instanceof NotCreatedError) return undefined;
    throw err;
  }
}
