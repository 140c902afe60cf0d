/**
 * The storage process's write-ahead log: a directory of segment files
 * `<first index, 20 digits>.wal`, each a concatenation of frames (frame.ts).
 *
 * - Only the newest segment is ever written. Older segments are "sealed":
 *   fsynced, closed, immutable, and handed to `onSeal` (for archiving).
 * - Every `appendSync` call is one write + one fdatasync (group commit is the
 *   caller's job: it passes a whole batch).
 * - On open (recover.ts), a torn/corrupt tail of the newest segment is cut; any damage or
 *   index discontinuity elsewhere refuses to open.
 * - No timers here: the caller runs `rotateIfDue()` periodically.
 */
import fs from 'node:fs';
import path from 'node:path';
import { encodeFrames, MAX_INDEX, type WalRecord } from '../../../shared/wal/frame.js';
import { DEFAULT_MAX_SEGMENT_BYTES, readSegment } from '../../../shared/wal/segment.js';
import { fsyncDir } from '../../../shared/fsync.js';
import { SegmentWriter } from './segment-writer.js';
import { recoverLog, type SealedSegment, type WalLogFn } from './recover.js';
import { walFsyncDuration } from '../../../shared/metrics.js';

export type { WalRecord } from '../../../shared/wal/frame.js';

export type { SealedSegment, WalLogFn } from './recover.js';

export interface WalOptions {
  /** Seal the active segment before an append once it holds at least this many bytes. Default 50 MB (50_000_000). */
  maxSegmentBytes?: number;
  /** Seal the active (non-empty) segment once it is this old. Default 10_000 ms. */
  maxSegmentAgeMs?: number;
  /**
   * Called synchronously after a segment has been sealed (from appendSync,
   * rotateIfDue or seal). Keep it cheap (enqueue an upload). If it throws, the
   * error propagates out of the calling method; the seal itself has already
   * completed, and in appendSync the batch is then NOT written.
   */
  onSeal?: (s: SealedSegment) => void;
  /** Clock in ms, used only for segment age. Default: monotonic epoch ms (performance.timeOrigin + performance.now()). */
  now?: () => number;
  /** Receives notices about what open() cut or removed. */
  log?: WalLogFn;
  /** Called with each batch once it is durable (debug logging: see entry-log.ts). */
  onAppend?: (records: readonly WalRecord[]) => void;
}

export const DEFAULT_MAX_SEGMENT_AGE_MS = 10_000;

interface Active {
  writer: SegmentWriter;
  /** Index of the last record in the segment; writer.firstIndex - 1n while empty. */
  lastIndex: bigint;
  /** Whether the directory has been fsynced since the file was created. */
  dirSynced: boolean;
}

const monotonicNow = (): number => performance.timeOrigin + performance.now();

export class Wal {
  readonly dir: string;
  readonly maxSegmentBytes: number;
  readonly maxSegmentAgeMs: number;
  readonly #onSeal: ((s: SealedSegment) => void) | undefined;
  readonly #now: () => number;
  readonly #log: WalLogFn | undefined;
  readonly #onAppend: ((records: readonly WalRecord[]) => void) | undefined;

  #sealed: SealedSegment[] = [];
  #active: Active | undefined;
  #lastIndex = 0n;
  /** False only while the log has never held a record and resetTo was not called: then any first index is accepted. */
  #positioned = false;
  #closed = false;
  #failed: Error | undefined;
  /**
   * Stage tracing only (shared/stages.ts): called in appendSync between the write() and the
   * fdatasync, with the batch's last index. Undefined otherwise.
   */
  onWritten: ((last: bigint) => void) | undefined;

  private constructor(dir: string, opts: WalOptions) {
    this.dir = path.resolve(dir);
    this.maxSegmentBytes = opts.maxSegmentBytes ?? DEFAULT_MAX_SEGMENT_BYTES;
    this.maxSegmentAgeMs = opts.maxSegmentAgeMs ?? DEFAULT_MAX_SEGMENT_AGE_MS;
    if (!(this.maxSegmentBytes > 0)) throw new RangeError('maxSegmentBytes must be > 0');
    if (!(this.maxSegmentAgeMs >= 0)) throw new RangeError('maxSegmentAgeMs must be >= 0');
    this.#onSeal = opts.onSeal;
    this.#now = opts.now ?? monotonicNow;
    this.#log = opts.log;
    this.#onAppend = opts.onAppend;
  }

  /**
   * Opens (creating if needed) the WAL in `dir`, validating every segment.
   * A torn or corrupt tail of the newest segment is truncated away (and
   * reported through `log`); the newest segment, if it still holds records,
   * becomes the active segment again (its age counts from now). Throws if an
   * older segment is damaged or if record indices are not contiguous.
   */
  static open(dir: string, opts: WalOptions = {}): Wal {
    const wal = new Wal(dir, opts);
    const found = recoverLog(wal.dir, wal.#now, wal.#log);
    wal.#sealed = found.sealed;
    if (found.active) wal.#active = { ...found.active, dirSynced: true };
    if (found.lastIndex !== undefined) {
      wal.#lastIndex = found.lastIndex;
      wal.#positioned = true;
    }
    return wal;
  }

  /** Index of the last record written (0n if the log never held one and resetTo was not called). */
  get lastIndex(): bigint {
    return this.#lastIndex;
  }

  /** Index of the oldest retained record, or 0n when no records are retained. */
  get firstIndex(): bigint {
    const s = this.#sealed[0];
    if (s) return s.firstIndex;
    const a = this.#active;
    if (a && a.lastIndex >= a.writer.firstIndex) return a.writer.firstIndex;
    return 0n;
  }

  /** True when no records are retained on disk. */
  get isEmpty(): boolean {
    return this.firstIndex === 0n;
  }

  /** Set when a failed append could not be rolled back; every later call throws. Restart the process. */
  get failure(): Error | undefined {
    return this.#failed;
  }

  /** The segment currently being written, if any (it may be empty after a failed first write). */
  activeSegment(): { path: string; name: string; firstIndex: bigint; lastIndex: bigint; bytes: number; createdAt: number } | undefined {
    const a = this.#active;
    if (!a) return undefined;
    const w = a.writer;
    return { path: w.path, name: w.name, firstIndex: w.firstIndex, lastIndex: a.lastIndex, bytes: w.size, createdAt: w.createdAt };
  }

  /**
   * Sets the position of an empty log (e.g. after restoring from the object
   * store): the next append must start at lastIndex + 1. In memory only — no
   * file is written until the next append. Throws if records are retained.
   */
  resetTo(lastIndex: bigint): void {
    this.#checkUsable();
    if (!this.isEmpty) throw new Error(`WAL ${this.dir}: resetTo(${lastIndex}) refused, the log still holds records ${this.firstIndex}..${this.#lastIndex}`);
    if (lastIndex < 0n || lastIndex >= MAX_INDEX) throw new RangeError(`WAL resetTo: index ${lastIndex} out of range`);
    this.#lastIndex = lastIndex;
    this.#positioned = true;
  }

  /**
   * Durably appends a batch: one write and one fdatasync. Indices must be
   * lastIndex+1, lastIndex+2, ... (any start >= 1 on a never-used log). First
   * rotates if the active segment is full or old. A batch is never split, so a
   * segment may exceed maxSegmentBytes by up to one batch. On any write/sync
   * error the file is cut back, nothing advances, and the error propagates.
   * Returns the frames written (the archiver uploads the same bytes). `encoded`: the batch's
   * frames when the caller already encoded them (`encodeFrames(records)`), to write as they are.
   */
  appendSync(records: readonly WalRecord[], encoded?: Buffer): Buffer {
    this.#checkUsable();
    const n = records.length;
    if (n === 0) return Buffer.alloc(0);
    const first = records[0]!.index;
    if (this.#positioned) {
      if (first !== this.#lastIndex + 1n) {
        throw new Error(`WAL append out of sequence: first index ${first}, expected ${this.#lastIndex + 1n}`);
      }
    } else if (first < 1n) {
      throw new RangeError(`WAL append: first index must be >= 1, got ${first}`);
    }
    let prev = first;
    for (let i = 1; i < n; i++) {
      const idx = records[i]!.index;
      if (idx !== prev + 1n) throw new Error(`WAL append out of sequence: record ${i} of the batch has index ${idx}, expected ${prev + 1n}`);
      prev = idx;
    }
    const buf = encoded ?? encodeFrames(records); // validates sizes and u64 range before anything is touched

    let act = this.#active;
    if (act && act.lastIndex >= act.writer.firstIndex && this.#isDue(act)) {
      this.#notify(this.#sealActive());
      act = this.#active;
    }
    if (act && act.lastIndex < act.writer.firstIndex && act.writer.firstIndex !== first) {
      // Empty leftover (failed first write) named for a different index: drop it.
      this.#discardEmptyActive();
      act = undefined;
    }
    if (!act) {
      const writer = SegmentWriter.create(this.dir, first, this.#now());
      act = this.#active = { writer, lastIndex: first - 1n, dirSynced: false };
    }
    if (!act.dirSynced) {
      fsyncDir(this.dir);
      act.dirSynced = true;
    }

    const w = act.writer;
    const prevSize = w.size;
    try {
      w.appendSync(buf);
      this.onWritten?.(prev);
      const syncStart = performance.now();
      w.syncSync();
      walFsyncDuration.observe((performance.now() - syncStart) / 1000);
    } catch (err) {
      this.#rollback(act, prevSize, err);
      throw err;
    }
    act.lastIndex = prev;
    this.#lastIndex = prev;
    this.#positioned = true;
    this.#onAppend?.(records);
    return buf;
  }

  /** Seals the active segment if it is non-empty and old (>= maxSegmentAgeMs) or full (>= maxSegmentBytes). */
  rotateIfDue(): SealedSegment | undefined {
    this.#checkUsable();
    const act = this.#active;
    if (!act || act.lastIndex < act.writer.firstIndex || !this.#isDue(act)) return undefined;
    const s = this.#sealActive();
    this.#notify(s);
    return s;
  }

  /** Seals the active segment now (fsync, close). Returns undefined if there was nothing to seal. */
  seal(): SealedSegment | undefined {
    this.#checkUsable();
    if (!this.#active) return undefined;
    const s = this.#sealActive();
    this.#notify(s);
    return s;
  }

  /** Sealed segments, oldest first (copies). */
  sealedSegments(): SealedSegment[] {
    return this.#sealed.map((s) => ({ ...s }));
  }

  /**
   * Yields every retained record with index >= fromIndex, oldest first,
   * reading segment files from disk one at a time (payloads are views into a
   * per-segment buffer). The set of segments is fixed at the first next().
   */
  *readFrom(fromIndex: bigint): Generator<WalRecord> {
    this.#checkUsable();
    const segs = this.sealedSegments();
    const a = this.#active;
    if (a && a.lastIndex >= a.writer.firstIndex) {
      segs.push({ path: a.writer.path, name: a.writer.name, firstIndex: a.writer.firstIndex, lastIndex: a.lastIndex, bytes: a.writer.size });
    }
    for (const s of segs) {
      if (s.lastIndex < fromIndex) continue;
      const r = readSegment(s.path, s.bytes);
      const count = s.lastIndex - s.firstIndex + 1n;
      if (r.stop !== 'end' || r.validBytes !== s.bytes || BigInt(r.records.length) !== count || r.records[0]?.index !== s.firstIndex) {
        throw new Error(
          `WAL segment ${s.path} changed on disk since it was validated: expected records ${s.firstIndex}..${s.lastIndex} in ${s.bytes} bytes, ` +
            `decoded ${r.records.length} records / ${r.validBytes} valid bytes (${r.stop}${r.detail ? ': ' + r.detail : ''})`,
        );
      }
      const startAt = fromIndex > s.firstIndex ? Number(fromIndex - s.firstIndex) : 0;
      for (let i = startAt; i < r.records.length; i++) yield r.records[i]!;
    }
  }

  /**
   * Deletes sealed segments whose lastIndex <= index (oldest first; the
   * active segment is never deleted) and fsyncs the directory. Returns the
   * deleted file names.
   */
  removeSealedThrough(index: bigint): string[] {
    this.#checkUsable();
    const removed: string[] = [];
    let error: unknown;
    while (this.#sealed.length > 0 && this.#sealed[0]!.lastIndex <= index) {
      const s = this.#sealed[0]!;
      try {
        fs.unlinkSync(s.path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
          error = err;
          break;
        }
      }
      this.#sealed.shift();
      removed.push(s.name);
    }
    if (removed.length > 0) fsyncDir(this.dir);
    if (error !== undefined) throw error;
    return removed;
  }

  /**
   * Drops every record after `index` (cluster mode: entries a follower staged but never saw
   * committed, which the current leader sends again). Segments wholly after it are deleted;
   * the one holding `index` is cut after it and becomes the active segment. Returns how many
   * records were dropped.
   */
  truncateAfter(index: bigint): number {
    this.#checkUsable();
    if (index >= this.#lastIndex) return 0;
    const dropped = Number(this.#lastIndex - index);
    const segs = this.sealedSegments();
    const act = this.#active;
    if (act) {
      act.writer.close();
      if (act.lastIndex >= act.writer.firstIndex) segs.push({ path: act.writer.path, name: act.writer.name, firstIndex: act.writer.firstIndex, lastIndex: act.lastIndex, bytes: act.writer.size });
      else fs.rmSync(act.writer.path, { force: true });
    }
    this.#active = undefined;
    this.#sealed = [];
    for (const s of segs) {
      if (s.lastIndex <= index) this.#sealed.push(s);
      else if (s.firstIndex > index) fs.rmSync(s.path, { force: true });
      else {
        const r = readSegment(s.path, s.bytes);
        const rec = r.records[Number(index - s.firstIndex)]!;
        const end = rec.payload.byteOffset - r.buf.byteOffset + rec.payload.byteLength;
        const writer = SegmentWriter.reopen(s.path, s.firstIndex, fs.statSync(s.path).size, this.#now());
        writer.truncateSync(end);
        this.#active = { writer, lastIndex: index, dirSynced: true };
      }
    }
    fsyncDir(this.dir);
    this.#lastIndex = index;
    this.#positioned = true;
    return dropped;
  }

  /** fsyncs and closes the active segment (it is not sealed or renamed). Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const act = this.#active;
    this.#active = undefined;
    if (!act) return;
    if (this.#failed) {
      act.writer.abandon();
      return;
    }
    if (act.lastIndex < act.writer.firstIndex) {
      // Never holds anything useful; open() would delete it anyway.
      act.writer.abandon();
      try {
        fs.unlinkSync(act.writer.path);
        fsyncDir(this.dir);
      } catch {
        /* best effort */
      }
      return;
    }
    try {
      act.writer.close();
    } catch (err) {
      act.writer.abandon();
      throw err;
    }
  }

  // ---------------------------------------------------------------- internals

  #checkUsable(): void {
    if (this.#closed) throw new Error(`WAL ${this.dir} is closed`);
    if (this.#failed) {
      throw new Error(`WAL ${this.dir} is unusable: a failed append could not be rolled back (${this.#failed.message}); restart the process so open() can repair the tail`, {
        cause: this.#failed,
      });
    }
  }

  #isDue(act: Active): boolean {
    return act.writer.size >= this.maxSegmentBytes || this.#now() - act.writer.createdAt >= this.maxSegmentAgeMs;
  }

  #notify(s: SealedSegment | undefined): void {
    if (s && this.#onSeal) this.#onSeal({ ...s });
  }

  /** Seals the active segment; an empty one is deleted instead (returns undefined). */
  #sealActive(): SealedSegment | undefined {
    const act = this.#active!;
    if (act.lastIndex < act.writer.firstIndex) {
      this.#discardEmptyActive();
      return undefined;
    }
    const w = act.writer;
    w.close(); // fsync + close; if the fsync throws nothing has changed
    const s: SealedSegment = { path: w.path, name: w.name, firstIndex: w.firstIndex, lastIndex: act.lastIndex, bytes: w.size };
    this.#sealed.push(s);
    this.#active = undefined;
    return { ...s };
  }

  #discardEmptyActive(): void {
    const act = this.#active!;
    this.#active = undefined;
    act.writer.abandon();
    fs.rmSync(act.writer.path, { force: true });
    fsyncDir(this.dir);
  }

  #rollback(act: Active, prevSize: number, cause: unknown): void {
    try {
      act.writer.truncateSync(prevSize);
    } catch (err) {
      const e = new Error(
        `could not truncate ${act.writer.path} back to ${prevSize} bytes after a failed append (${(cause as Error)?.message ?? cause}): ${(err as Error)?.message ?? err}`,
        { cause: err },
      );
      this.#failed = e;
      this.#log?.('WAL append failed and rollback failed; WAL disabled until restart', { file: act.writer.path, offset: prevSize, error: e.message });
    }
  }
}
