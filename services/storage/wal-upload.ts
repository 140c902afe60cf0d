// What storage sends to the archiver besides the per-batch uploads of sync mode: the local WAL
// tail the object store does not have yet (after a crash or a restart), and, with
// --wal-sync-upload=false, each segment as it is sealed. Over either Archive: the archiver
// process's link, or the archiver in this process (an embedded node).
import type { Logger } from '../../shared/log.js';
import type { Wal, SealedSegment } from './wal/log.js';
import { encodeFrames, type WalRecord } from '../../shared/wal/frame.js';
import { readSegment } from '../../shared/wal/segment.js';
import type { Archive } from '../../shared/objectstore/archive.js';
import type { EngineOptions } from './engine.js';
import { openWal } from './engine/open.js';

/** Records per chunk when the tail is uploaded at startup: bounded objects and messages. */
const TAIL_CHUNK_BYTES = 8 * 1024 * 1024;

/**
 * Uploads every local WAL record above the archiver's position, in bounded chunks, and
 * resolves once all are in the object store. Sync mode runs it before the WAL is replayed into
 * LMDB, so no reader ever sees a record the object store lacks.
 */
export async function uploadWalTail(wal: Wal, link: Archive, log: Logger, upTo?: bigint): Promise<void> {
  const from = BigInt(link.uploadedThrough) + 1n;
  const through = upTo ?? wal.lastIndex;
  if (through < from) return;
  // A cluster leader without followers uploads every batch this way (upTo): not worth a line each.
  (upTo === undefined ? log.info : log.debug).call(log, { from: Number(from), through: Number(through) }, 'uploading the local WAL the object store does not have yet');
  const uploads: Promise<void>[] = [];
  let chunk: WalRecord[] = [];
  let bytes = 0;
  const send = () => {
    const frames = encodeFrames(chunk);
    uploads.push(link.upload(Number(chunk[0]!.index), Number(chunk[chunk.length - 1]!.index), () => frames));
    chunk = [];
    bytes = 0;
  };
  for (const rec of wal.readFrom(from)) {
    if (rec.index > through) break;
    // Payloads are views into a per-segment buffer: copy what is kept.
    chunk.push({ index: rec.index, payload: Buffer.from(rec.payload) });
    bytes += rec.payload.length + 16;
    if (bytes >= TAIL_CHUNK_BYTES) send();
  }
  if (chunk.length) send();
  await Promise.all(uploads);
}

/** Async mode: queues a sealed segment for upload (read from its file when it is sent). */
export function uploadSegment(seg: SealedSegment, link: Archive, log: Logger): void {
  if (seg.lastIndex <= BigInt(link.uploadedThrough)) return;
  const from = BigInt(link.uploadedThrough) + 1n > seg.firstIndex ? BigInt(link.uploadedThrough) + 1n : seg.firstIndex;
  const frames = () => {
    const r = readSegment(seg.path, seg.bytes);
    if (from === seg.firstIndex) return r.buf;
    return encodeFrames(r.records.filter((rec) => rec.index >= from));
  };
  link.upload(Number(from), Number(seg.lastIndex), frames).then(
    () => log.debug({ segment: seg.name }, 'WAL segment uploaded'),
    (err: Error) => log.warn({ segment: seg.name, err: err.message }, 'WAL segment not uploaded before stop; it is uploaded at the next start'),
  );
}

/**
 * A single node with an object store: first the archiver's position, then the local WAL it
 * lacks. In sync mode that tail is uploaded before the replay makes it visible, and every batch
 * is uploaded before it is applied; in async mode segments are uploaded as they are sealed.
 * (storage's main and an embedded node open their engine with these options.)
 */
export async function archivedEngineOptions(
  archive: Archive,
  node: { dataDir: string; walSyncUpload: boolean },
  log: Logger,
  onState: (state: string) => void = () => {},
): Promise<EngineOptions> {
  onState('waiting for the archiver');
  await archive.ready();
  const archivedThrough = () => archive.archivedThrough;
  if (node.walSyncUpload) {
    const wal = openWal(node.dataDir, log);
    onState('uploading the local WAL the object store lacks');
    await uploadWalTail(wal, archive, log);
    onState('replaying the WAL');
    return { wal, archivedThrough, upload: (first, last, frames) => archive.upload(first, last, () => frames) };
  }
  const wal = openWal(node.dataDir, log, { onSeal: (seg) => uploadSegment(seg, archive, log) });
  for (const seg of wal.sealedSegments()) uploadSegment(seg, archive, log);
  wal.seal(); // what a previous run left in the active segment is sealed (onSeal uploads it)
  return { wal, archivedThrough };
}
