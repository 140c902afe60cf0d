/**
 * Uses the default `node:fs` object (not named imports) so that every call goes through a
 * property lookup; tests rely on this to inject I/O failures.
 */
import fs from 'node:fs';

/** fsync a directory so that creations/deletions/renames of its entries are durable. */
export function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
