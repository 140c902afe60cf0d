/**
 * Writes one WAL segment file (shared/wal/segment.ts names and reads them).
 *
 * Uses the default `node:fs` object (not named imports) so that every call
 * goes through a property lookup; tests rely on this to inject I/O failures.
 */
import fs from 'node:fs';
import path from 'node:path';
import { segmentFileName } from '../../../shared/wal/segment.js';

/**
 * The active segment grows in zero-filled steps of this size. An fdatasync after a write
 * that stays inside the file's length flushes data only; one that extends the file must
 * also commit the new length to the filesystem journal, which cost about 40% more per
 * commit on this project's test machines (as etcd, which preallocates 64 MB segments).
 */
export const PREALLOCATE_BYTES = 1024 * 1024;
const ZEROS = Buffer.alloc(PREALLOCATE_BYTES);

/**
 * Appends frames to one segment file at explicit positions (pwrite), so that
 * after a rollback (ftruncate) the next write lands exactly at the new end.
 */
export class SegmentWriter {
  #fd: number | undefined;
  #size: number;
  /** The file's length: #size plus a zero-filled tail. */
  #allocated: number;
  readonly path: string;
  readonly name: string;
  readonly firstIndex: bigint;
  /** Value of the injected clock when this writer was created/reopened (ms). */
  readonly createdAt: number;

  private constructor(file: string, fd: number, size: number, firstIndex: bigint, createdAt: number) {
    this.path = file;
    this.name = path.basename(file);
    this.#fd = fd;
    this.#size = size;
    this.#allocated = size;
    this.firstIndex = firstIndex;
    this.createdAt = createdAt;
  }

  /** Creates a new, empty segment file (fails if it exists). The caller fsyncs the directory. */
  static create(dir: string, firstIndex: bigint, createdAt: number): SegmentWriter {
    const file = path.join(dir, segmentFileName(firstIndex));
    const fd = fs.openSync(file, 'wx');
    return new SegmentWriter(file, fd, 0, firstIndex, createdAt);
  }

  /**
   * Reopens an existing segment for appending after its first `size` bytes (which must be
   * valid; the caller cuts anything after them, a zero-filled tail included).
   */
  static reopen(file: string, firstIndex: bigint, size: number, createdAt: number): SegmentWriter {
    const fd = fs.openSync(file, 'r+');
    return new SegmentWriter(file, fd, size, firstIndex, createdAt);
  }

  get size(): number {
    return this.#size;
  }

  get closed(): boolean {
    return this.#fd === undefined;
  }

  #handle(): number {
    if (this.#fd === undefined) throw new Error(`WAL segment ${this.path} is closed`);
    return this.#fd;
  }

  /** Writes all of `buf` at the current end. `size` advances only if everything was written. */
  appendSync(buf: Uint8Array): void {
    const fd = this.#handle();
    const base = this.#size;
    if (base + buf.byteLength > this.#allocated) this.#preallocate(base + buf.byteLength);
    let done = 0;
    while (done < buf.byteLength) {
      const n = fs.writeSync(fd, buf, done, buf.byteLength - done, base + done);
      if (n <= 0) throw new Error(`WAL segment ${this.path}: write made no progress at offset ${base + done}`);
      done += n;
    }
    this.#size = base + done;
  }

  /** Zero-fills the file up to the next PREALLOCATE_BYTES boundary at or after `needed`. */
  #preallocate(needed: number): void {
    const fd = this.#handle();
    const target = Math.ceil(needed / PREALLOCATE_BYTES) * PREALLOCATE_BYTES;
    let at = this.#allocated;
    while (at < target) {
      const n = fs.writeSync(fd, ZEROS, 0, Math.min(ZEROS.length, target - at), at);
      if (n <= 0) throw new Error(`WAL segment ${this.path}: preallocation made no progress at offset ${at}`);
      at += n;
    }
    this.#allocated = target;
  }

  syncSync(): void {
    fs.fdatasyncSync(this.#handle());
  }

  /** Cuts the file back to `size` bytes and makes that durable. */
  truncateSync(size: number): void {
    const fd = this.#handle();
    fs.ftruncateSync(fd, size);
    fs.fdatasyncSync(fd);
    this.#size = size;
    this.#allocated = size;
  }

  /**
   * Cuts the zero-filled tail (a closed segment is exactly its records), full fsync, then
   * close. Idempotent. If the truncate or fsync throws, the file stays open and the error
   * propagates.
   */
  close(): void {
    const fd = this.#fd;
    if (fd === undefined) return;
    if (this.#allocated > this.#size) {
      fs.ftruncateSync(fd, this.#size);
      this.#allocated = this.#size;
    }
    fs.fsyncSync(fd);
    this.#fd = undefined;
    fs.closeSync(fd);
  }

  /** Close without syncing (used after a failure). Idempotent; never throws. */
  abandon(): void {
    const fd = this.#fd;
    if (fd === undefined) return;
    this.#fd = undefined;
    try {
      fs.closeSync(fd);
    } catch {
      /* ignore */
    }
  }
}
