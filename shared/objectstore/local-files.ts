// The local object store's file-system steps (local.ts), each durable before it returns: a new
// file written and fsynced, directories created with their parents' entries fsynced, a
// directory's fsync, and a lock on one object between the processes of a machine. Most come
// twice, synchronous and asynchronous: local.ts says which puts take which.
import { createHash } from 'node:crypto';
import fsSync, { constants as fsc, type BigIntStats } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';

export function etagOf(st: BigIntStats): string {
  return `${st.ino.toString(36)}-${st.size.toString(36)}-${st.mtimeNs.toString(36)}`;
}

export function isCode(err: unknown, ...codes: string[]): boolean {
  return codes.includes((err as NodeJS.ErrnoException)?.code ?? '');
}

/**
 * ENOTDIR: a path component is a file. The store never names a file like a directory (`~`),
 * so the bucket directory is damaged; answering "absent" would let a node boot EMPTY on it.
 */
export function damaged(err: unknown, file: string): Error {
  return new Error(
    `the local object store is damaged: a part of ${file} that must be a directory is a file (${(err as Error).message}); ` +
      'restore the directory from a backup, or point --s3-endpoint at an intact copy',
    { cause: err },
  );
}

/** An object path that is not a regular file: damage, not absence. */
export function notAFile(file: string): Error {
  return new Error(`the local object store is damaged: ${file} is not a regular file; restore the directory from a backup`);
}

/** A directory removed meanwhile (by the delete of its last object) needs no sync. */
export async function fsyncDir(dir: string): Promise<void> {
  let fh;
  try {
    fh = await fs.open(dir, fsc.O_RDONLY | fsc.O_DIRECTORY);
  } catch (err) {
    if (isCode(err, 'ENOENT')) return;
    throw err;
  }
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** fsyncDir, synchronously. */
export function fsyncDirSync(dir: string): void {
  let fd;
  try {
    fd = fsSync.openSync(dir, fsc.O_RDONLY | fsc.O_DIRECTORY);
  } catch (err) {
    if (isCode(err, 'ENOENT')) return;
    throw err;
  }
  try {
    fsSync.fsyncSync(fd);
  } finally {
    fsSync.closeSync(fd);
  }
}

/** mkdir -p that fsyncs the parent of every directory it creates, so the new path survives a crash. */
export function mkdirDurableSync(dir: string): void {
  try {
    fsSync.mkdirSync(dir);
  } catch (err) {
    if (isCode(err, 'EEXIST')) return;
    if (!isCode(err, 'ENOENT')) throw err;
    mkdirDurableSync(path.dirname(dir));
    try {
      fsSync.mkdirSync(dir);
    } catch (err2) {
      if (!isCode(err2, 'EEXIST')) throw err2;
      return;
    }
  }
  fsyncDirSync(path.dirname(dir));
}

/**
 * mkdirDurableSync, asynchronously. The parent is synced even when the directory was there:
 * whoever made it (another put of this process, awaiting its own sync of the parent) may not
 * have synced its entry yet, and this put must not be acknowledged before that.
 */
export async function mkdirDurable(dir: string): Promise<void> {
  try {
    await fs.mkdir(dir);
  } catch (err) {
    if (!isCode(err, 'EEXIST', 'ENOENT')) throw err;
    if (isCode(err, 'ENOENT')) {
      await mkdirDurable(path.dirname(dir));
      try {
        await fs.mkdir(dir);
      } catch (err2) {
        if (!isCode(err2, 'EEXIST')) throw err2;
      }
    }
  }
  await fsyncDir(path.dirname(dir));
}

/** writeNewFileSync, asynchronously. */
export async function writeNewFile(file: string, body: Buffer): Promise<string> {
  const fh = await fs.open(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o666);
  let written = false;
  try {
    await fh.writeFile(body);
    await fh.sync();
    const etag = etagOf(await fh.stat({ bigint: true }));
    written = true;
    return etag;
  } finally {
    await fh.close();
    if (!written) await fs.rm(file, { force: true });
  }
}

/** A new file at `file` holding `body`, fsynced; returns its etag. On a failure no file is left. */
export function writeNewFileSync(file: string, body: Buffer): string {
  const fd = fsSync.openSync(file, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o666);
  let written = false;
  try {
    for (let off = 0; off < body.length; ) off += fsSync.writeSync(fd, body, off, body.length - off);
    fsSync.fsyncSync(fd);
    const etag = etagOf(fsSync.fstatSync(fd, { bigint: true }));
    written = true;
    return etag;
  } finally {
    fsSync.closeSync(fd);
    if (!written) fsSync.rmSync(file, { force: true });
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A lock on one object, held by this process, released by the kernel if the process dies: a
 * listening socket in Linux's abstract namespace (binding a name is exclusive, and the name
 * vanishes with its owner, so a crash leaves no stale lock behind).
 */
export async function withKeyLock<T>(id: string, fn: () => Promise<T>): Promise<T> {
  const name = '\0kvs-objectstore-' + createHash('sha256').update(id).digest('hex').slice(0, 40);
  const server = net.createServer();
  server.unref();
  for (let delay = 1; ; delay = Math.min(delay * 2, 20)) {
    const err = await new Promise<Error | undefined>((resolve) => {
      server.once('error', resolve);
      server.listen(name, () => {
        server.removeListener('error', resolve);
        resolve(undefined);
      });
    });
    if (!err) break;
    if (!isCode(err, 'EADDRINUSE')) throw err;
    await sleep(delay);
  }
  try {
    return await fn();
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
