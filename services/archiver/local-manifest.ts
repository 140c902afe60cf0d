// <data-dir>/kvs-manifest.json: written last when a data directory is complete (restored from
// the object store, or created fresh), so that a directory with data but without it is known to
// be partial: a restore that stopped half-way, or files from elsewhere.
import fs from 'node:fs';
import path from 'node:path';
import { fsyncDir } from '../../shared/fsync.js';

export const LOCAL_MANIFEST = 'kvs-manifest.json';

export interface LocalManifest {
  format: 'kvs-data/1';
  /** The object-store prefix this directory's WAL indices belong to. */
  bucket: string;
  prefix: string;
  createdAt: string;
  /** The checkpoint the directory was restored from, if any. */
  restoredFrom?: string;
  /** Set on a branch's data directory: where its first boot came from. */
  branch?: { sourcePrefix: string; checkpoint: string };
}

/** Entries that say nothing about the data: sockets and pid file, and our own scratch space. */
const IGNORED = new Set(['run', 'archiver']);

export function readLocalManifest(dataDir: string): LocalManifest | undefined {
  let text: string;
  try {
    text = fs.readFileSync(path.join(dataDir, LOCAL_MANIFEST), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    return JSON.parse(text) as LocalManifest;
  } catch (err) {
    throw new Error(`${path.join(dataDir, LOCAL_MANIFEST)} is not valid JSON (${(err as Error).message}): the data directory is damaged; clear it to restore from the object store`);
  }
}

/** Atomically (temp file, fsync, rename, fsync of the directory). */
export function writeLocalManifest(dataDir: string, m: LocalManifest): void {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, LOCAL_MANIFEST);
  const tmp = `${file}.tmp`;
  const fd = fs.openSync(tmp, 'w');
  try {
    fs.writeSync(fd, JSON.stringify(m, null, 2) + '\n');
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  fsyncDir(dataDir);
}

/** What the data directory holds besides run/ and archiver/ (empty or absent: nothing). */
export function dataEntries(dataDir: string): string[] {
  try {
    return fs.readdirSync(dataDir).filter((n) => !IGNORED.has(n));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}
