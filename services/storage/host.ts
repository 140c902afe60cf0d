// What a host of the storage engine runs around it, whoever the host is: storage's process
// (main.ts, behind the Storage gRPC service on a unix socket) and the embedding API
// (embed/open.ts, in the caller's own process) both call this, so the two cannot drift.
// Opening: the LMDB environment of a data directory and the engine over it (the WAL replayed).
// Housekeeping: the WAL's rotation by age and its trim, the free-space check that refuses
// writes, lease expiry (a single node's; a cluster's leader starts it when it leads) and
// automatic compaction (only where the node takes writes).
import type { AutoCompact } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { openMvcc, type MvccDb } from '../../shared/mvcc/schema.js';
import type { Engine, EngineOptions } from './engine.js';
import { openEngine } from './engine/open.js';
import { startAutoCompaction } from './compactor.js';

/** The data directory's LMDB environment, opened for the one writer (this process). */
export function openStorageDb(dataDir: string): MvccDb {
  return openMvcc(dataDir, { readOnly: false, writemap: true });
}

/** openStorageDb and openEngine; the database is closed again if the engine cannot open. */
export function openStorageEngine(dataDir: string, log: Logger, opts: EngineOptions = {}): Engine {
  const db = openStorageDb(dataDir);
  try {
    return openEngine(db, dataDir, log, opts);
  } catch (err) {
    void db.env.close();
    throw err;
  }
}

export interface HousekeepingOptions {
  /** Automatic compaction (autoCompact() of the --auto-compact-* flags); undefined: off. */
  autoCompact?: AutoCompact;
  /** Cluster mode: lease expiry is started and stopped by whoever follows the role. */
  cluster?: boolean;
  /** Writes started (a reason) or stopped (undefined) being refused for lack of disk space. */
  onWritesRefused?: (reason: string | undefined) => void;
}

export interface Housekeeping {
  stop(): void;
}

/** Starts the engine's timers; `stop` ends them (before the engine is closed). */
export function startHousekeeping(engine: Engine, log: Logger, opts: HousekeepingOptions = {}): Housekeeping {
  // An idle segment is sealed after SegmentMaxAge so it can be archived. Sealed segments are
  // trimmed once LMDB is synced past them (and, with an object store, once they are uploaded
  // and covered by a checkpoint).
  let refused: string | undefined;
  const rotation = setInterval(() => {
    engine.rotateIfDue();
    engine.trimWal();
    const now = engine.writesRefused();
    if (now !== refused) opts.onWritesRefused?.((refused = now));
  }, 1000);
  rotation.unref();
  if (!opts.cluster) engine.lessor.startExpiry();
  const compactor = startAutoCompaction(opts.autoCompact, engine, log, () => engine.role === 'leader' || engine.role === 'single');
  return {
    stop() {
      clearInterval(rotation);
      compactor?.stop();
    },
  };
}
