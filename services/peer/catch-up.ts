// Catching up from the object store: a follower the leader cannot serve from memory, and a
// node taking over the lead, read the uploaded WAL past what they hold and hand it to storage
// as committed entries (uploaded entries are in the history every later leader replays).
import type { Logger } from '../../shared/log.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import { listWalSegments } from '../../shared/objectstore/catalog.js';
import { uploadedRecords } from '../../shared/wal/objects.js';
import { encodeFrames, type WalRecord } from '../../shared/wal/frame.js';
import type { StorageSide } from './storage-side.js';

const CHUNK_BYTES = 4 * 1024 * 1024;

/** The object store's WAL no longer reaches back to what this node holds (gc removed it). */
export class TooFarBehindError extends Error {
  override name = 'TooFarBehindError';
}

/**
 * Hands storage every uploaded record past what it has applied (through `through`, when given);
 * returns how many. Records it holds staged are sent too: storage keeps those that match and
 * drops its own from the first that differs (the object store's history wins over entries never
 * seen committed).
 */
export async function catchUpFromStore(store: ObjectStore, storage: StorageSide, log: Logger, through?: number): Promise<number> {
  const have = Math.max(storage.progress.appliedThrough, storage.progress.durableThrough);
  const from = BigInt(storage.progress.appliedThrough) + 1n;
  const objects = await listWalSegments(store, { after: from - 1n });
  if (objects.length === 0) return 0;
  const start = objects.reduce((m, o) => (o.first < m ? o.first : m), objects[0].first);
  if (start > from) {
    throw new TooFarBehindError(
      `this node holds records through ${have}, but the object store's WAL continues only at ${start} (the rest is in a checkpoint): ` +
        'it is too far behind to catch up from the WAL',
    );
  }
  let chunk: WalRecord[] = [];
  let bytes = 0;
  let count = 0;
  const send = async () => {
    const first = Number(chunk[0].index);
    const last = Number(chunk[chunk.length - 1].index);
    const frames = encodeFrames(chunk);
    count += chunk.length;
    chunk = [];
    bytes = 0;
    await storage.committedEntries(first, last, frames);
  };
  for await (const rec of uploadedRecords(store, objects, from)) {
    if (through !== undefined && rec.index > BigInt(through)) break;
    chunk.push(rec);
    bytes += rec.payload.length;
    if (bytes >= CHUNK_BYTES) await send();
  }
  if (chunk.length) await send();
  if (count) log.info({ records: count, through: storage.progress.appliedThrough }, 'caught up from the object store');
  return count;
}
