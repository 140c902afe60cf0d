// Opening a storage engine: the WAL of a data directory, and the replay of what LMDB has not
// applied yet, before the engine takes its first write.
import path from 'node:path';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META, readMeta } from '../../../shared/mvcc/schema.js';
import type { Logger } from '../../../shared/log.js';
import { decodeWalEntry } from '../../../shared/wal/entry.js';
import { authTables } from '../../../shared/auth/tables.js';
import { Wal, type WalOptions } from '../wal/log.js';
import { walEntryDebugLog } from '../wal/entry-log.js';
import type { WalRecord } from '../../../shared/wal/frame.js';
import { applyEntry } from '../mvcc/apply.js';
import type { Engine, EngineOptions } from '../engine.js';
import { StorageEngine } from './storage-engine.js';

/** Opens the WAL of a data directory (cutting a torn tail). */
export function openWal(dataDir: string, log: Logger, opts: Pick<WalOptions, 'onSeal'> = {}): Wal {
  return Wal.open(path.join(dataDir, 'wal'), { ...opts, log: (msg, fields) => log.warn(fields ?? {}, msg), onAppend: walEntryDebugLog(log) });
}

/** Opens the WAL, replays what LMDB has not applied yet, and returns a ready engine. */
export function openEngine(db: MvccDb, dataDir: string, log: Logger, opts: EngineOptions = {}): Engine {
  const wal = opts.wal ?? openWal(dataDir, log);
  authTables(db); // created before a replayed entry needs them (outside any transaction)
  const applied = readMeta(db, META.appliedIndex);
  if (!wal.isEmpty && wal.firstIndex > BigInt(applied) + 1n) {
    throw new Error(
      `WAL in ${wal.dir} starts at index ${wal.firstIndex} but the database has applied only ${applied}: ` +
        `records ${applied + 1}..${wal.firstIndex - 1n} are missing; restore the data directory from the object store`,
    );
  }
  let replayed = 0;
  // Replay in chunks: one LMDB transaction per 1,000 entries.
  let chunk: WalRecord[] = [];
  const flush = () => {
    db.env.transactionSync(() => {
      for (const rec of chunk) applyEntry(db, decodeWalEntry(rec.payload), Number(rec.index));
    });
    replayed += chunk.length;
    chunk = [];
  };
  // Cluster mode: what LMDB has not applied was never seen committed (a follower applies only
  // committed entries, a leader only acknowledged ones): it stays staged until the role is
  // known (a leader applies it, a follower drops it and receives it again).
  const replayThrough = opts.cluster ? BigInt(applied) : wal.lastIndex;
  for (const rec of wal.readFrom(BigInt(applied) + 1n)) {
    if (rec.index > replayThrough) break;
    chunk.push(rec);
    if (chunk.length >= 1000) flush();
  }
  if (chunk.length) flush();
  if (wal.lastIndex < BigInt(applied)) {
    // The WAL was trimmed (or lost) past what LMDB holds: continue numbering after LMDB.
    if (wal.lastIndex === 0n) wal.resetTo(BigInt(applied));
    else throw new Error(`WAL in ${wal.dir} ends at index ${wal.lastIndex} but the database has applied ${applied}: the WAL is from another database; move it away or restore the data directory`);
  }
  const engine = new StorageEngine(db, wal, dataDir, log, opts);
  log.info({ replayed, revision: engine.executor.revision, appliedIndex: engine.appliedIndex }, replayed ? 'replayed WAL' : 'storage opened');
  return engine;
}
