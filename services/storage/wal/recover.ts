/**
 * What the WAL finds on disk when it opens (log.ts): every segment read and validated, oldest
 * first. Damage anywhere but the newest segment's tail refuses to open (it cannot be a torn
 * write, and opening past it would lose or misorder acknowledged writes); the newest segment's
 * torn, corrupt or zero-filled tail is cut away, and it is reopened for appending. Empty
 * segments are removed. Each cut and removal is reported through `log`.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { WalRecord } from '../../../shared/wal/frame.js';
import { listSegments, readSegment } from '../../../shared/wal/segment.js';
import { fsyncDir } from '../../../shared/fsync.js';
import { SegmentWriter } from './segment-writer.js';

export type SealedSegment = { path: string; name: string; firstIndex: bigint; lastIndex: bigint; bytes: number };

export type WalLogFn = (msg: string, fields?: Record<string, unknown>) => void;

export interface RecoveredLog {
  /** The sealed segments, oldest first. */
  sealed: SealedSegment[];
  /** The newest segment, reopened after its last complete record; undefined when none holds a record. */
  active: { writer: SegmentWriter; lastIndex: bigint } | undefined;
  /** The last record's index; undefined when no segment holds a record. */
  lastIndex: bigint | undefined;
}

const RESTORE_HINT =
  'This is not the newest segment, so it cannot be a torn write, and opening past it would lose or misorder acknowledged writes. ' +
  'Do not edit or delete WAL files by hand: stop this node and restore its data from the object store ' +
  '(or move the WAL directory aside and rebuild the node from the object store), then restart.';

/** Reads and repairs the WAL directory `dir` (created if missing); `now` dates the reopened segment. */
export function recoverLog(dir: string, now: () => number, log: WalLogFn | undefined): RecoveredLog {
  const created = fs.mkdirSync(dir, { recursive: true });
  if (created !== undefined) fsyncDir(path.dirname(created));

  const segs = listSegments(dir);
  const toDelete: string[] = [];
  const sealed: SealedSegment[] = [];
  let active: RecoveredLog['active'];
  let prevLast: bigint | undefined;
  let prevPath: string | undefined;

  for (let i = 0; i < segs.length; i++) {
    const seg = segs[i]!;
    const isLast = i === segs.length - 1;
    const r = readSegment(seg.path);
    const base = r.buf.byteOffset;
    const offsetOf = (rec: WalRecord): number => rec.payload.byteOffset - base - 16;

    // Index checks on the decoded prefix (never repaired, in any segment).
    const recs = r.records;
    if (recs.length > 0) {
      const first = recs[0]!.index;
      if (first !== seg.firstIndex) {
        throw new Error(
          `WAL segment ${seg.path}: the file name says the first index is ${seg.firstIndex} but the record at byte offset 0 has index ${first}. ${RESTORE_HINT}`,
        );
      }
      if (prevLast !== undefined && first !== prevLast + 1n) {
        throw new Error(
          `WAL index gap: segment ${seg.path} starts (byte offset 0) at index ${first} but the previous segment ${prevPath} ends at index ${prevLast}` +
            ` (expected ${prevLast + 1n}). ${RESTORE_HINT}`,
        );
      }
      for (let k = 1; k < recs.length; k++) {
        if (recs[k]!.index !== recs[k - 1]!.index + 1n) {
          throw new Error(
            `WAL segment ${seg.path}: record at byte offset ${offsetOf(recs[k]!)} has index ${recs[k]!.index}, expected ${recs[k - 1]!.index + 1n}` +
              ` (index discontinuity). ${RESTORE_HINT}`,
          );
        }
      }
    }

    if (!isLast) {
      if (r.stop !== 'end') {
        throw new Error(`WAL segment ${seg.path} is ${r.stop === 'torn' ? 'truncated' : 'corrupt'} at byte offset ${r.validBytes}: ${r.detail}. ${RESTORE_HINT}`);
      }
      if (recs.length === 0) {
        log?.('removing empty WAL segment', { file: seg.path });
        toDelete.push(seg.path);
        continue;
      }
      prevLast = recs[recs.length - 1]!.index;
      prevPath = seg.path;
      sealed.push({ path: seg.path, name: seg.name, firstIndex: seg.firstIndex, lastIndex: prevLast, bytes: r.validBytes });
      continue;
    }

    // Newest segment: cut a torn/corrupt tail (or a zero tail) away.
    if (r.stop !== 'end') {
      log?.('cut torn/corrupt tail of the newest WAL segment', {
        file: seg.path,
        offset: r.validBytes,
        cutBytes: r.fileBytes - r.validBytes,
        fileBytes: r.fileBytes,
        reason: r.stop,
        detail: r.detail,
        keptRecords: recs.length,
        lastKeptIndex: recs.length > 0 ? recs[recs.length - 1]!.index.toString() : undefined,
      });
    } else if (r.validBytes < r.fileBytes) {
      log?.('trimming zero-filled tail of the newest WAL segment', { file: seg.path, offset: r.validBytes, cutBytes: r.fileBytes - r.validBytes });
    }
    if (recs.length === 0) {
      log?.('removing newest WAL segment: it holds no complete record', { file: seg.path, fileBytes: r.fileBytes });
      toDelete.push(seg.path);
      continue;
    }
    const writer = SegmentWriter.reopen(seg.path, seg.firstIndex, r.fileBytes, now());
    try {
      if (r.validBytes < r.fileBytes) writer.truncateSync(r.validBytes);
    } catch (err) {
      writer.abandon();
      throw err;
    }
    prevLast = recs[recs.length - 1]!.index;
    active = { writer, lastIndex: prevLast };
  }

  if (toDelete.length > 0) {
    try {
      for (const f of toDelete) fs.rmSync(f, { force: true });
      fsyncDir(dir);
    } catch (err) {
      active?.writer.abandon();
      throw err;
    }
  }
  return { sealed, active, lastIndex: prevLast };
}
