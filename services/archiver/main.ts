// The archiver process: the object store's only user in a node. At start it makes the data
// directory whole from the object store (restore.ts), then serves storage's WAL uploads
// (uploader.ts) and takes checkpoints (checkpoint.ts) every --checkpoint-interval and on
// demand (`kvs ctl checkpoint`). Serves kvs.archiver.Archiver on <data-dir>/run/archiver.sock.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { clusterMode, socketPath } from '../../shared/config.js';
import { LeaderRole } from './role.js';
import { createLogger, type Logger } from '../../shared/log.js';
import { parseDuration } from '../../shared/duration.js';
import { service } from '../../shared/proto/index.js';
import { bindUnix, shutdown } from '../../shared/grpc/plumbing.js';
import { installLifecycle, reportState, serveMetrics, signalReady } from '../../shared/component.js';
import { openObjectStore, objectStoreOptions } from '../../shared/objectstore/index.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import type { Latest, SstRef } from '../../shared/objectstore/layout.js';
import { dbPath } from '../../shared/mvcc/schema.js';
import { readLocalDbMeta } from './db-meta.js';
import { restoreDataDir, StartupError, type BranchPoint } from './restore.js';
import { listTermStarts, listWalSegments, readLatest, requireCheckpointManifest, storedPosition } from '../../shared/objectstore/catalog.js';
import { knownPieces, takeCheckpoint, type CheckpointResult } from './checkpoint.js';
import { WalUploader } from './uploader.js';
import { readLocalManifest } from './local-manifest.js';
import * as M from '../../shared/metrics.js';

/** A single node's checkpoints carry term 1 (the raft term it reports). */
const SINGLE_NODE_TERM = 1;

export async function runArchiver(cfg: Config): Promise<void> {
  const log = createLogger('archiver', cfg.logLevel, cfg.logFormat);
  serveMetrics('archiver');
  const intervalMs = parseDuration(cfg.checkpointInterval, 'checkpoint-interval');
  // Its loop waits for each upload anyway: small puts to a local directory skip the thread pool.
  const options = { ...objectStoreOptions(cfg), log, syncSmallPuts: true };
  const store = await openObjectStore(options);
  const openPrefix = (prefix: string) => openObjectStore({ ...options, prefix });
  const branch: BranchPoint | undefined =
    cfg.branchPrefix !== undefined && cfg.branchCheckpoint
      ? { sourcePrefix: cfg.branchPrefix, source: await openPrefix(cfg.branchPrefix), checkpoint: cfg.branchCheckpoint }
      : undefined;
  if ((cfg.branchPrefix !== undefined) !== (cfg.branchCheckpoint !== undefined)) {
    throw new StartupError('--branch-prefix and --branch-checkpoint go together: give both to start a branch');
  }

  // Storage may still run when the archiver alone restarts: then its WAL is not touched.
  const storageRunning = await answers(socketPath(cfg.dataDir, 'storage'));
  const restore = () =>
    restoreDataDir(store, cfg.dataDir, {
      log,
      bucket: options.bucket,
      prefix: options.prefix,
      branch,
      openPrefix,
      // Cluster mode: a node's WAL may hold staged entries of an older leader; what follows them
      // comes from the leader (or the object store) through the peer agent, which reconciles.
      fetchWal: !storageRunning && !clusterMode(cfg),
      onState: reportState,
      progressInLog: true,
    });
  // At boot an unreadable object store is a startup failure. Restarting alone, the node is
  // up and writes wait for the archiver: keep trying until the object store answers.
  const restored = storageRunning ? await untilItWorks(restore, log) : await restore();
  let latest = restored.latest;
  const walThrough = restored.walObjects.reduce((n, o) => (o.last > n ? o.last : n), 0n);
  // A single node on a prefix that once ran as a cluster continues its newest term, so that
  // its uploads and checkpoints are not taken for an older term's (wal-history.ts, advanceLatest).
  const clusterTerm = clusterMode(cfg) ? 0 : Math.max(0, ...(await listTermStarts(store)).keys());
  const uploader = new WalUploader(
    store,
    log,
    { uploadedThrough: Math.max(Number(walThrough), restored.baseIndex), checkpointIndex: latest?.appliedIndex ?? 0 },
    () => storedPosition(store, restored.baseIndex),
    clusterTerm,
  );

  // Cluster mode: checkpoints on the leader only, under its term.
  const role = clusterMode(cfg) ? new LeaderRole(socketPath(cfg.dataDir, 'peer')) : undefined;
  const checkpoints = new Checkpoints(store, cfg.dataDir, log, latest, readLocalManifest(cfg.dataDir)?.branch, openPrefix, () => role?.term ?? Math.max(SINGLE_NODE_TERM, clusterTerm), role !== undefined);
  // A checkpoint opens the database read-only. Storage creates the database before it opens its
  // upload stream: until that stream came (or when storage already ran), the database may be
  // half created, and a read-only open of it beside its writer has crashed a process (storage
  // exited by SIGSEGV at a node's first start).
  let databaseCreated = storageRunning;
  const mayCheckpoint = () => (!role || role.leading) && databaseCreated;
  checkpoints.onWritten = (l) => {
    latest = l;
    uploader.checkpointIndex = Math.max(uploader.checkpointIndex, l.appliedIndex);
    uploader.report();
    reportState(describe());
  };
  const describe = () =>
    `uploaded through ${uploader.uploadedThrough}, checkpoint ${latest ? `at revision ${latest.revision}` : 'none yet'}` +
    (uploader.lastError ? `; FAILING: ${uploader.lastError}` : '');

  // A database the prefix has no checkpoint of (a node that ran without an object store, or
  // whose first checkpoint never happened): checkpoint it before storage uploads its WAL, so
  // that the uploaded WAL continues from a checkpoint instead of missing its beginning.
  // (Not when the archiver restarts alone: the node runs, the periodic checkpoint does it.)
  // (Nor when its creation was cut short: it holds nothing yet, and storage creates it.)
  if (!latest && !role && !storageRunning && (await readLocalDbMeta(cfg.dataDir))) {
    reportState('first checkpoint of the existing database');
    const r = await checkpoints.run();
    // Its WAL before the checkpoint may be gone locally; the uploaded WAL starts after it.
    uploader.uploadedThrough = Math.max(uploader.uploadedThrough, r.latest.appliedIndex);
  }

  const server = new grpc.Server({ 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  server.addService(service('kvs.archiver.Archiver'), {
    Upload: (call: grpc.ServerDuplexStream<any, unknown>) => {
      databaseCreated = true;
      uploader.serve(call);
    },
    Checkpoint: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => {
      if (!databaseCreated) return cb({ code: grpc.status.UNAVAILABLE, details: 'checkpoint failed: storage has not opened the database yet; try again once the node is ready' });
      checkpoints.run().then(
        (r) => cb(null, { key: r.key, revision: r.latest.revision, appliedIndex: r.latest.appliedIndex, pieces: r.pieces, uploadedPieces: r.uploaded, unchanged: r.unchanged }),
        (err: Error) => cb({ code: grpc.status.UNAVAILABLE, details: `checkpoint failed: ${err.message}` }),
      );
    },
    Status: (_call: unknown, cb: grpc.sendUnaryData<unknown>) =>
      cb(null, {
        location: store.location,
        uploadedThrough: uploader.uploadedThrough,
        checkpointIndex: uploader.checkpointIndex,
        latestCheckpoint: latest?.checkpoint ?? '',
        walUploads: uploader.stats.uploads,
        walUploadErrors: uploader.stats.errors,
        walUploadConflicts: uploader.stats.conflicts,
        checkpoints: checkpoints.count,
        lastError: uploader.lastError,
      }),
  });
  await bindUnix(server, socketPath(cfg.dataDir, 'archiver'));

  // Periodic checkpoints; the first one soon when the prefix has none yet (so that a restore
  // needs no WAL from index 1, and a branch stands on its own).
  const timer = setInterval(() => mayCheckpoint() && void checkpoints.run().catch(() => {}), intervalMs);
  timer.unref();
  const status = setInterval(() => reportState(describe()), 2000);
  status.unref();
  let first: NodeJS.Timeout | undefined;
  if (!latest) {
    const tryFirst = () => {
      first = undefined;
      if (latest) return;
      if (!fs.existsSync(path.join(dbPath(cfg.dataDir), 'data.mdb')) || !mayCheckpoint()) {
        first = setTimeout(tryFirst, 1000);
        return;
      }
      void checkpoints.run().catch(() => {
        first = setTimeout(tryFirst, Math.min(intervalMs, 30_000));
      });
    };
    first = setTimeout(tryFirst, 1000);
    first.unref();
  }

  installLifecycle(log, {
    async stop() {
      role?.close();
      clearInterval(timer);
      clearInterval(status);
      if (first) clearTimeout(first);
      await uploader.close();
      await checkpoints.idle();
      await shutdown(server, 2000);
      store.close();
      branch?.source.close();
    },
  });
  log.info(
    { store: store.location, restored: restored.restored, walRecordsFetched: restored.walRecords, uploadedThrough: uploader.uploadedThrough, checkpoint: latest?.checkpoint },
    'archiver ready',
  );
  reportState(describe());
  signalReady({ uploadedThrough: uploader.uploadedThrough });
}

/** One checkpoint at a time; periodic and on-demand runs share it. */
class Checkpoints {
  count = 0;
  onWritten: (latest: Latest) => void = () => {};
  private running: Promise<CheckpointResult> | undefined;
  private known: Map<string, SstRef> | undefined;

  constructor(
    private readonly store: ObjectStore,
    private readonly dataDir: string,
    private readonly log: Logger,
    private latest: Latest | undefined,
    /** Set on a branch's data directory: its first checkpoint reuses the source's pieces. */
    private readonly branch: { sourcePrefix: string; checkpoint: string } | undefined,
    private readonly openPrefix: (prefix: string) => Promise<ObjectStore>,
    private readonly term: () => number,
    private readonly clusterMode: boolean,
  ) {}

  run(): Promise<CheckpointResult> {
    const next = (this.running ?? Promise.resolve()).catch(() => {}).then(() => this.once());
    this.running = next;
    return next;
  }

  async idle(): Promise<void> {
    await this.running?.catch(() => {});
  }

  private async once(): Promise<CheckpointResult> {
    try {
      const known = await this.knownPieces();
      const r = await takeCheckpoint(this.store, this.dataDir, {
        log: this.log,
        term: this.term(),
        previous: this.latest,
        known,
        guardLatest: this.clusterMode,
      });
      if (!r.unchanged) {
        this.count++;
        M.checkpointsTotal.inc();
        if (r.manifest) this.known = knownPieces(r.manifest);
      }
      this.latest = r.latest;
      this.onWritten(r.latest);
      return r;
    } catch (err) {
      // The WAL segments stay (nothing is trimmed past the previous checkpoint); the next
      // interval tries again.
      this.log.error({ err: (err as Error).message }, 'checkpoint failed; WAL segments are kept until a checkpoint succeeds');
      throw err;
    }
  }

  /** The pieces of the latest checkpoint (or, on a branch without one, of its fork point). */
  private async knownPieces(): Promise<Map<string, SstRef>> {
    if (this.known) return this.known;
    if (this.latest) this.known = knownPieces(await requireCheckpointManifest(this.store, this.latest.checkpoint));
    else if (this.branch) {
      const source = await this.openPrefix(this.branch.sourcePrefix);
      try {
        this.known = knownPieces(await requireCheckpointManifest(source, this.branch.checkpoint), this.branch.sourcePrefix);
      } finally {
        source.close();
      }
    } else this.known = new Map();
    return this.known;
  }
}

async function untilItWorks<T>(fn: () => Promise<T>, log: Logger): Promise<T> {
  for (let backoffMs = 500; ; backoffMs = Math.min(backoffMs * 2, 10_000)) {
    try {
      return await fn();
    } catch (err) {
      log.error({ err: (err as Error).message, retryInMs: backoffMs }, 'archiver cannot start (writes wait for it); retrying');
      reportState(`starting: ${(err as Error).message}`);
      await new Promise((resolve) => setTimeout(resolve, backoffMs));
    }
  }
}

/** Whether a unix socket has a live server behind it (a stale file from a crash does not). */
function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(socket);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
