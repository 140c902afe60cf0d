// The counters of an LMDB copy (a checkpoint being made, a restore being finished), read from
// the copy itself: a checkpoint records exactly what its file holds.
import { META, openMvcc, readMeta } from '../../shared/mvcc/schema.js';

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
