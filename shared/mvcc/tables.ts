// Every named table in the LMDB environment, opened raw (binary keys and values), found by
// listing the main database: maintenance (Hash, dbSizeInUse) covers tables other components
// add without being told about them. `history` is the MVCC handle, which decompresses its
// records (schema.ts): a raw handle would return the compressed bytes.
import type { Database } from 'lmdb';
import type { MvccDb } from './schema.js';

export interface RawTable {
  name: string;
  /** The name as LMDB stores it (lmdb-js appends a NUL). */
  rawName: Buffer;
  table: Database<Buffer, Buffer>;
}

const opened = new WeakMap<object, Map<string, Database<Buffer, Buffer>>>();

/** The tables in name order. Call inside the read snapshot the caller then reads from. */
export function rawTables(db: MvccDb): RawTable[] {
  let cache = opened.get(db.env);
  if (!cache) opened.set(db.env, (cache = new Map()));
  const names = [...db.env.getKeys()].map((k) => Buffer.from(k as Uint8Array)).sort(Buffer.compare);
  return names.map((rawName) => {
    const name = rawName.toString('utf8').replace(/\0$/, '');
    let table = name === 'history' ? db.history : cache.get(name);
    if (!table) cache.set(name, (table = db.env.openDB<Buffer, Buffer>({ name, encoding: 'binary', keyEncoding: 'binary' })));
    return { name, rawName, table };
  });
}

interface PageStats { treeBranchPageCount: number; treeLeafPageCount: number; overflowPages: number }
const pages = (s: PageStats) => s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages;

/**
 * etcd's dbSize and dbSizeInUse for LMDB: the file's size (LMDB's high-water mark; the file
 * never shrinks), and the bytes of the pages reachable from the roots (2 meta pages, the main
 * and free-list trees, every table). The difference is free pages LMDB reuses for new writes.
 */
export function dbSizes(db: MvccDb): { dbSize: number; dbSizeInUse: number } {
  const env = db.env.getStats() as PageStats & { pageSize: number; lastPageNumber: number; root: PageStats; free: PageStats };
  let used = 2 + pages(env.root) + pages(env.free);
  for (const { table } of rawTables(db)) used += pages(table.getStats() as PageStats);
  const dbSize = (env.lastPageNumber + 1) * env.pageSize;
  return { dbSize, dbSizeInUse: Math.min(dbSize, used * env.pageSize) };
}
