// The uploaded WAL: objects wal/<first>-<last>.wal, each holding records first..last in the
// local segment format. Sync mode writes one per batch, async mode one per sealed segment;
// ranges may overlap after a mode change or a re-upload, never leave holes.
import fs from 'node:fs';
import path from 'node:path';
import type { ObjectStore } from '../objectstore/store.js';
import type { WalSegmentEntry } from '../objectstore/catalog.js';
import type { Logger } from '../log.js';
import { decodeFrames, encodeFrames, type WalRecord } from './frame.js';
import { DEFAULT_MAX_SEGMENT_BYTES, listSegments, readSegment, segmentFileName } from './segment.js';
import { fsyncDir } from '../fsync.js';

/**
 * One uploaded WAL object (listed by `listWalSegments` in shared/objectstore/catalog.ts): its
 * records first..last are history; it may hold more, up to `objectLast` (wal-history.ts).
 */
export type WalObject = Pick<WalSegmentEntry, 'key' | 'first' | 'last'> & { objectLast?: bigint };

/** Downloads one WAL object, checks every frame (CRC, indices), and returns its records first..last. */
export async function readWalObject(store: ObjectStore, o: WalObject): Promise<WalRecord[]> {
  const got = await store.get(o.key);
  if (!got) throw new Error(`WAL object ${store.location}/${o.key} disappeared while it was read (object-store gc running?)`);
  const r = decodeFrames(got.body);
  const objectLast = o.objectLast ?? o.last;
  const count = Number(objectLast - o.first + 1n);
  if (r.stop !== 'end' || r.records.length !== count || r.records[0]?.index !== o.first || r.records[count - 1]?.index !== objectLast) {
    throw new Error(
      `WAL object ${store.location}/${o.key} is damaged: expected records ${o.first}..${objectLast}, decoded ${r.records.length}` +
        ` (${r.stop}${r.detail ? `: ${r.detail}` : ''})`,
    );
  }
  return objectLast === o.last ? r.records : r.records.slice(0, Number(o.last - o.first + 1n));
}

/**
 * Yields the uploaded records from `from` on, in order, downloading up to `parallel` objects
 * ahead. Stops at the end of the uploaded WAL, or before `to` (inclusive bound) when given.
 * Throws on a hole in the uploaded range.
 */
export async function* uploadedRecords(store: ObjectStore, objects: WalObject[], from: bigint, to?: bigint, parallel = 16): AsyncGenerator<WalRecord> {
  const needed = objects.filter((o) => o.last >= from && (to === undefined || o.first <= to));
  let next = from;
  const fetches: Promise<WalRecord[]>[] = [];
  let started = 0;
  const startMore = () => {
    while (started < needed.length && fetches.length < parallel) {
      const f = readWalObject(store, needed[started++]!);
      f.catch(() => {}); // awaited in order below; an early return must not leave it unhandled
      fetches.push(f);
    }
  };
  let i = 0;
  startMore();
  while (fetches.length) {
    const o = needed[i++]!;
    const records = await fetches.shift()!;
    startMore();
    if (o.last < next) continue; // wholly covered by an overlapping object before it
    if (o.first > next) throw new Error(`the uploaded WAL in ${store.location} has a hole: records ${next}..${o.first - 1n} are missing (next object ${o.key})`);
    for (const rec of records) {
      if (rec.index < next) continue;
      if (to !== undefined && rec.index > to) return;
      yield rec;
      next = rec.index + 1n;
    }
  }
  if (to !== undefined && next <= to) throw new Error(`the uploaded WAL in ${store.location} ends at record ${next - 1n}; records ${next}..${to} are missing`);
}

/** The records the local WAL directory holds: [first, last], or undefined when none. */
export function localWalRange(walDir: string): { first: bigint; last: bigint } | undefined {
  if (!fs.existsSync(walDir)) return undefined;
  const segs = listSegments(walDir);
  for (let i = segs.length - 1; i >= 0; i--) {
    // A torn tail is cut by storage when it opens the WAL; only complete records count here.
    const r = readSegment(segs[i]!.path);
    if (r.records.length) return { first: segs[0]!.firstIndex, last: r.records[r.records.length - 1]!.index };
  }
  return undefined;
}

/**
 * Writes uploaded records as local segment files (at most ~50 MB each), from `from` through
 * `to` (or the end of the uploaded WAL). Storage's ordinary replay then applies them.
 * Returns how many records were written.
 */
export async function materializeWal(
  store: ObjectStore,
  objects: WalObject[],
  walDir: string,
  from: bigint,
  to: bigint | undefined,
  log: Logger,
): Promise<number> {
  fs.mkdirSync(walDir, { recursive: true });
  let batch: WalRecord[] = [];
  let bytes = 0;
  let written = 0;
  const flush = () => {
    if (!batch.length) return;
    const file = path.join(walDir, segmentFileName(batch[0]!.index));
    const fd = fs.openSync(file, 'wx');
    try {
      fs.writeSync(fd, encodeFrames(batch));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fsyncDir(walDir);
    log.info({ file, first: Number(batch[0]!.index), last: Number(batch[batch.length - 1]!.index) }, 'wrote uploaded WAL records as a local segment');
    written += batch.length;
    batch = [];
    bytes = 0;
  };
  for await (const rec of uploadedRecords(store, objects, from, to)) {
    batch.push(rec);
    bytes += rec.payload.length + 16;
    if (bytes >= DEFAULT_MAX_SEGMENT_BYTES) flush();
  }
  flush();
  return written;
}
