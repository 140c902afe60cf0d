// The object store in a local directory (`--s3-endpoint file:///var/lib/kvs-objects`): the
// embedded default, which needs no service. It behaves like the S3 store: writes are atomic
// (readers see the old or the new object, never a torn one) and durable (file and directory
// fsynced), and conditional writes are atomic between the processes of one machine.
//
// On disk, `<root>/<bucket>/` holds one file per object, named from its key (local-keys.ts);
// every file-system step is durable before it returns (local-files.ts).
//
// The etag of an object is derived from its file's identity (inode, size, mtime): a replaced
// object always gets a new file, so its etag changes.
//
// Versions: this store keeps none. `listVersions` yields nothing and `get` with a versionId
// finds nothing; point-in-time restore needs a versioned S3 bucket.

import { randomBytes } from 'node:crypto';
import fsSync, { constants as fsc, realpathSync, type BigIntStats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import {
  PreconditionFailedError,
  type GetResult,
  type ListOptions,
  type ObjectInfo,
  type ObjectStore,
  type ObjectVersion,
  type PutOptions,
  type PutResult,
} from './store.js';
import { DIR_SUFFIX, compareUtf8, decodeSegment, encodeSegment, endsBefore, objectPath } from './local-keys.js';
import {
  damaged,
  etagOf,
  fsyncDir,
  fsyncDirSync,
  isCode,
  mkdirDurable,
  mkdirDurableSync,
  notAFile,
  withKeyLock,
  writeNewFile,
  writeNewFileSync,
} from './local-files.js';

// With `syncSmallPuts` (the archiver), a small put (a WAL batch) writes with synchronous
// calls. Its dozen small steps (mkdir, open, write, fsync, stat, close, rename, the
// directory's open, fsync and close) each cost a thread-pool round trip and a wake-up of the
// event loop when asynchronous: in a node with --wal-sync-upload that was half of the
// archiver's CPU and of the upload's time per write
// (docs/perf/object-store.md#the-local-stores-put-2026-11-29). A large one (a checkpoint's
// 1 MiB pieces, a WAL tail) writes and fsyncs asynchronously: its fsyncs can take hundreds of
// ms on a busy disk, and the WAL uploads behind it must not wait that long for the event
// loop. Without the option (the peer agent, whose loop carries a cluster's heartbeats and ACKs
// while it renews the leader lock) every put is asynchronous, so no fsync of the store ever
// holds that loop.
const SYNC_PUT_MAX = 256 * 1024;

export interface LocalStoreOptions {
  /** The directory of the endpoint (`file:///var/lib/kvs-objects` -> /var/lib/kvs-objects). */
  root: string;
  bucket: string;
  /** Key prefix inside the bucket, e.g. `prod/`. */
  prefix: string;
  /** Puts of up to 256 KiB with synchronous file-system calls (see SYNC_PUT_MAX). */
  syncSmallPuts?: boolean;
}

export class LocalObjectStore implements ObjectStore {
  readonly location: string;
  private readonly bucketDir: string;
  private readonly prefix: string;
  private readonly syncPutMax: number;

  constructor(opts: LocalStoreOptions) {
    if (!opts.bucket || opts.bucket.includes('/') || opts.bucket === '.' || opts.bucket === '..') {
      throw new Error(`object store: invalid bucket name "${opts.bucket}" for a local directory store`);
    }
    // The real path, so that every process derives the same lock names (see withKeyLock).
    let root = path.resolve(opts.root);
    try {
      root = realpathSync(root);
    } catch {
      // not created yet: the first write creates it
    }
    this.bucketDir = path.join(root, opts.bucket);
    this.prefix = opts.prefix;
    this.syncPutMax = opts.syncSmallPuts ? SYNC_PUT_MAX : -1;
    this.location = `file://${this.bucketDir}/${opts.prefix}`;
  }

  private file(key: string): string {
    return path.join(this.bucketDir, objectPath(this.prefix + key));
  }

  /** File-system errors name the store, the operation and the key; a lost condition stays a PreconditionFailedError. */
  private async wrap<T>(op: string, key: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof PreconditionFailedError) throw err;
      throw new Error(`object store ${this.location}: ${op} ${key} failed: ${(err as Error)?.message ?? err}`, { cause: err });
    }
  }

  get(key: string, opts: { versionId?: string } = {}): Promise<GetResult | undefined> {
    return this.wrap('get', key, () => this.getFile(key, opts));
  }

  head(key: string): Promise<ObjectInfo | undefined> {
    return this.wrap('head', key, () => this.headFile(key));
  }

  put(key: string, body: Buffer, opts: PutOptions = {}): Promise<PutResult> {
    return this.wrap('put', key, () => this.putFile(key, body, opts));
  }

  delete(key: string): Promise<void> {
    return this.wrap('delete', key, () => this.deleteFile(key));
  }

  private async getFile(key: string, opts: { versionId?: string } = {}): Promise<GetResult | undefined> {
    if (opts.versionId !== undefined) return undefined; // no versions here
    let fh;
    try {
      fh = await fs.open(this.file(key), fsc.O_RDONLY);
    } catch (err) {
      if (isCode(err, 'ENOENT')) return undefined;
      if (isCode(err, 'ENOTDIR')) throw damaged(err, this.file(key));
      if (isCode(err, 'EISDIR')) throw notAFile(this.file(key));
      throw err;
    }
    try {
      // Stat and read the same open file: the etag belongs to these bytes even if the
      // object is replaced meanwhile (a replacement is a new file).
      const st = await fh.stat({ bigint: true });
      if (!st.isFile()) throw notAFile(this.file(key));
      const body = await fh.readFile();
      return { body, etag: etagOf(st) };
    } finally {
      await fh.close();
    }
  }

  private async headFile(key: string): Promise<ObjectInfo | undefined> {
    let st: BigIntStats;
    try {
      st = await fs.stat(this.file(key), { bigint: true });
    } catch (err) {
      return this.statFailed(key, err);
    }
    return this.infoOf(key, st);
  }

  /** headFile, synchronously (a put's condition, checked under the key's lock). */
  private headFileSync(key: string): ObjectInfo | undefined {
    let st: BigIntStats;
    try {
      st = fsSync.statSync(this.file(key), { bigint: true });
    } catch (err) {
      return this.statFailed(key, err);
    }
    return this.infoOf(key, st);
  }

  private statFailed(key: string, err: unknown): undefined {
    if (isCode(err, 'ENOENT')) return undefined;
    if (isCode(err, 'ENOTDIR')) throw damaged(err, this.file(key));
    throw err;
  }

  private infoOf(key: string, st: BigIntStats): ObjectInfo {
    if (!st.isFile()) throw notAFile(this.file(key));
    return { key, size: Number(st.size), etag: etagOf(st), lastModified: new Date(Number(st.mtimeMs)) };
  }

  private async putFile(key: string, body: Buffer, opts: PutOptions = {}): Promise<PutResult> {
    const file = this.file(key);
    const dir = path.dirname(file);
    const tmp = path.join(dir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
    // The body is written and fsynced before the lock is taken; under the lock only the
    // check and the rename happen, so racing writers hold it briefly.
    const small = body.length <= this.syncPutMax;
    let etag: string;
    for (let attempt = 0; ; attempt++) {
      try {
        if (small) {
          mkdirDurableSync(dir);
          etag = writeNewFileSync(tmp, body);
        } else {
          await mkdirDurable(dir);
          etag = await writeNewFile(tmp, body);
        }
        break;
      } catch (err) {
        // A concurrent delete removed the (empty) directory, or one above it, meanwhile.
        if (!isCode(err, 'ENOENT') || attempt >= 5) throw err;
      }
    }
    try {
      await withKeyLock(file, async () => {
        if (opts.ifNoneMatch === '*' || opts.ifMatch !== undefined) {
          const current = small ? this.headFileSync(key) : await this.headFile(key);
          if (opts.ifNoneMatch === '*' && current) throw new PreconditionFailedError(key);
          if (opts.ifMatch !== undefined && current?.etag !== opts.ifMatch) throw new PreconditionFailedError(key);
        }
        if (small) fsSync.renameSync(tmp, file);
        else await fs.rename(tmp, file);
      });
      if (small) fsyncDirSync(dir);
      else await fsyncDir(dir);
      return { etag };
    } catch (err) {
      if (small) fsSync.rmSync(tmp, { force: true });
      else await fs.rm(tmp, { force: true });
      throw err;
    }
  }

  private async deleteFile(key: string): Promise<void> {
    const file = this.file(key);
    await withKeyLock(file, async () => {
      try {
        await fs.unlink(file);
      } catch (err) {
        if (isCode(err, 'ENOENT')) return;
        if (isCode(err, 'ENOTDIR')) throw damaged(err, file);
        if (isCode(err, 'EISDIR')) throw notAFile(file);
        throw err;
      }
      await fsyncDir(path.dirname(file));
    });
    await this.removeEmptyDirs(path.dirname(file));
  }

  /** Drop directories left empty by a delete, up to the bucket directory. */
  private async removeEmptyDirs(dir: string): Promise<void> {
    while (dir.length > this.bucketDir.length && dir.startsWith(this.bucketDir + path.sep)) {
      try {
        await fs.rmdir(dir);
      } catch {
        return; // not empty (or already gone): stop
      }
      await fsyncDir(path.dirname(dir));
      dir = path.dirname(dir);
    }
  }

  async deleteMany(keys: string[]): Promise<void> {
    // A few at a time: each delete is two fsyncs.
    const queue = [...keys];
    const worker = async () => {
      for (let k = queue.shift(); k !== undefined; k = queue.shift()) await this.delete(k);
    };
    await Promise.all(Array.from({ length: Math.min(8, queue.length) }, worker));
  }

  async *list(prefix: string, opts: ListOptions = {}): AsyncIterable<ObjectInfo> {
    const full = this.prefix + prefix;
    const after = opts.startAfter === undefined ? undefined : Buffer.from(this.prefix + opts.startAfter, 'utf8');
    const segs = full.split('/');
    const last = segs.pop()!; // a partial segment: names starting with it
    let dir = this.bucketDir;
    let keyPrefix = '';
    for (const s of segs) {
      dir = path.join(dir, encodeSegment(s) + DIR_SUFFIX);
      keyPrefix += s + '/';
    }
    for await (const info of this.walk(dir, keyPrefix, last, after)) yield info;
  }

  /** Objects below `dir` (whose keys start with `keyPrefix`), in key order, lazily. */
  private async *walk(dir: string, keyPrefix: string, startsWith: string, after?: Buffer): AsyncGenerator<ObjectInfo> {
    let names: string[];
    try {
      names = await fs.readdir(dir);
    } catch (err) {
      if (isCode(err, 'ENOENT')) return;
      if (isCode(err, 'ENOTDIR')) throw damaged(err, dir);
      throw err;
    }
    const entries: { name: string; seg: string; isDir: boolean; order: string }[] = [];
    for (const name of names) {
      if (name.startsWith('.')) continue; // temp files
      const isDir = name.endsWith(DIR_SUFFIX);
      const seg = decodeSegment(isDir ? name.slice(0, -1) : name);
      if (!seg.startsWith(startsWith)) continue;
      if (after && !isDir && Buffer.compare(Buffer.from(keyPrefix + seg, 'utf8'), after) <= 0) continue;
      // A directory's keys all start with `<seg>/`: skipped whole when all of them sort before `after`.
      if (after && isDir && endsBefore(keyPrefix + seg + '/', after)) continue;
      // A directory's keys all start with `seg/`, so it sorts as `seg/` among its siblings.
      entries.push({ name, seg, isDir, order: isDir ? seg + '/' : seg });
    }
    entries.sort((a, b) => compareUtf8(a.order, b.order));
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDir) {
        yield* this.walk(p, keyPrefix + e.seg + '/', '', after);
        continue;
      }
      let st: BigIntStats;
      try {
        st = await fs.stat(p, { bigint: true });
      } catch (err) {
        if (isCode(err, 'ENOENT')) continue; // deleted meanwhile
        throw err;
      }
      if (!st.isFile()) throw notAFile(p);
      const key = (keyPrefix + e.seg).slice(this.prefix.length);
      yield { key, size: Number(st.size), etag: etagOf(st), lastModified: new Date(Number(st.mtimeMs)) };
    }
  }

  async *listVersions(_prefix: string): AsyncIterable<ObjectVersion> {
    // A local directory keeps no versions.
  }

  close(): void {}
}
