// The archiver as a library: the object store's only user in a node. Opening it makes the data
// directory whole from the object store (restore.ts); then it uploads storage's WAL
// (uploader.ts) and takes checkpoints (checkpoint.ts) every checkpoint interval and on demand.
// Two hosts: the archiver process (main.ts, storage reaches it over its Unix socket) and a node
// embedded in the caller's process (in-process.ts, no socket).
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../../shared/log.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import type { Latest, SstRef } from '../../shared/objectstore/layout.js';
import { dbPath } from '../../shared/mvcc/schema.js';
import { listTermStarts, requireCheckpointManifest, storedPosition } from '../../shared/objectstore/catalog.js';
import { readLocalDbMeta } from './db-meta.js';
import { restoreDataDir, type BranchPoint, type RestoreResult } from './restore.js';
import { knownPieces, takeCheckpoint, type CheckpointResult, type LiveDatabase } from './checkpoint.js';
import { WalUploader, type UploadProgress } from './uploader.js';
import { readLocalManifest } from './local-manifest.js';
import * as M from '../../shared/metrics.js';

/** A single node's checkpoints carry term 1 (the raft term it reports). */
const SINGLE_NODE_TERM = 1;

/** Cluster mode: this node's role as its peer agent reports it (role.ts follows it). */
export interface LeaderState {
  readonly leading: boolean;
  readonly term: number;
}

export interface ArchiverOptions {
  dataDir: string;
  log: Logger;
  /** The node's prefix, opened. The archiver does not close it. */
  store: ObjectStore;
  /** Recorded in the local manifest: a data directory of another bucket or prefix is refused. */
  bucket: string;
  prefix: string;
  /** Opens another prefix (a branch's source, whose pieces its checkpoints share). */
  openPrefix?: (prefix: string) => Promise<ObjectStore>;
  /** First boot of a branch: start from the source's checkpoint when this prefix has none. */
  branch?: BranchPoint;
  checkpointIntervalMs: number;
  /**
   * Storage already runs (the archiver process restarted alone): its WAL is left alone, an
   * unreadable object store is retried until it answers, and its database exists.
   */
  storageRunning?: boolean;
  /** Cluster mode: checkpoints on the leader only, under its term. */
  role?: LeaderState;
  /** What it is doing (the process host shows it in `kvs ctl status`). */
  onState?: (state: string) => void;
}

/** What `kvs ctl status` shows of the archiver (the process host's Status call). */
export interface ArchiverStatus {
  location: string;
  uploadedThrough: number;
  checkpointIndex: number;
  latestCheckpoint: string;
  walUploads: number;
  walUploadErrors: number;
  walUploadConflicts: number;
  checkpoints: number;
  lastError: string;
}

export class Archiver {
  readonly uploader: WalUploader;
  private readonly checkpoints: Checkpoints;
  private latest: Latest | undefined;
  /** A checkpoint opens the database; it waits until storage created it (databaseOpened). */
  private databaseCreated: boolean;
  private live: LiveDatabase | undefined;
  private readonly listeners = new Set<(p: UploadProgress) => void>();
  private readonly timers: NodeJS.Timeout[] = [];
  private first: NodeJS.Timeout | undefined;
  private closed = false;

  private constructor(
    private readonly opts: ArchiverOptions,
    readonly restored: RestoreResult,
    clusterTerm: number,
  ) {
    const { store, log } = opts;
    this.latest = restored.latest;
    this.databaseCreated = opts.storageRunning === true;
    const walThrough = restored.walObjects.reduce((n, o) => (o.last > n ? o.last : n), 0n);
    this.uploader = new WalUploader(
      store,
      log,
      { uploadedThrough: Math.max(Number(walThrough), restored.baseIndex), checkpointIndex: this.latest?.appliedIndex ?? 0 },
      () => storedPosition(store, restored.baseIndex),
      clusterTerm,
    );
    this.uploader.onReport = (p) => {
      for (const l of this.listeners) l(p);
    };
    const term = () => opts.role?.term ?? Math.max(SINGLE_NODE_TERM, clusterTerm);
    this.checkpoints = new Checkpoints(store, opts.dataDir, log, this.latest, readLocalManifest(opts.dataDir)?.branch, opts.openPrefix, term, opts.role !== undefined, () => this.live);
    this.checkpoints.onWritten = (l) => {
      this.latest = l;
      this.uploader.checkpointIndex = Math.max(this.uploader.checkpointIndex, l.appliedIndex);
      this.uploader.report();
      this.opts.onState?.(this.describe());
    };
  }

  /** Restores the data directory from the object store, then starts the periodic checkpoints. */
  static async open(opts: ArchiverOptions): Promise<Archiver> {
    const { store, log } = opts;
    const restore = () =>
      restoreDataDir(store, opts.dataDir, {
        log,
        bucket: opts.bucket,
        prefix: opts.prefix,
        branch: opts.branch,
        openPrefix: opts.openPrefix,
        // Cluster mode: a node's WAL may hold staged entries of an older leader; what follows them
        // comes from the leader (or the object store) through the peer agent, which reconciles.
        fetchWal: !opts.storageRunning && !opts.role,
        onState: opts.onState,
        progressInLog: true,
      });
    // At boot an unreadable object store is a startup failure. Restarting alone, the node is
    // up and writes wait for the archiver: keep trying until the object store answers.
    const restored = opts.storageRunning ? await untilItWorks(restore, log, opts.onState) : await restore();
    // A single node on a prefix that once ran as a cluster continues its newest term, so that
    // its uploads and checkpoints are not taken for an older term's (wal-history.ts, advanceLatest).
    const clusterTerm = opts.role ? 0 : Math.max(0, ...(await listTermStarts(store)).keys());
    const archiver = new Archiver(opts, restored, clusterTerm);
    await archiver.start();
    return archiver;
  }

  private async start(): Promise<void> {
    const { dataDir, checkpointIntervalMs: intervalMs } = this.opts;
    // A database the prefix has no checkpoint of (a node that ran without an object store, or
    // whose first checkpoint never happened): checkpoint it before storage uploads its WAL, so
    // that the uploaded WAL continues from a checkpoint instead of missing its beginning.
    // (Not when the archiver restarts alone: the node runs, the periodic checkpoint does it.)
    // (Nor when its creation was cut short: it holds nothing yet, and storage creates it.)
    if (!this.latest && !this.opts.role && !this.opts.storageRunning && (await readLocalDbMeta(dataDir))) {
      this.opts.onState?.('first checkpoint of the existing database');
      const r = await this.checkpoints.run();
      // Its WAL before the checkpoint may be gone locally; the uploaded WAL starts after it.
      this.uploader.uploadedThrough = Math.max(this.uploader.uploadedThrough, r.latest.appliedIndex);
    }
    const timer = setInterval(() => this.mayCheckpoint() && void this.checkpoints.run().catch(() => {}), intervalMs);
    timer.unref();
    this.timers.push(timer);
    if (this.opts.onState) {
      const status = setInterval(() => this.opts.onState?.(this.describe()), 2000);
      status.unref();
      this.timers.push(status);
    }
    // The first checkpoint soon when the prefix has none yet (so that a restore needs no WAL
    // from index 1, and a branch stands on its own).
    if (!this.latest) {
      const tryFirst = () => {
        this.first = undefined;
        if (this.latest || this.closed) return;
        if (!fs.existsSync(path.join(dbPath(dataDir), 'data.mdb')) || !this.mayCheckpoint()) {
          this.first = setTimeout(tryFirst, 1000);
          this.first.unref();
          return;
        }
        void this.checkpoints.run().catch(() => {
          this.first = setTimeout(tryFirst, Math.min(intervalMs, 30_000));
          this.first.unref();
        });
      };
      this.first = setTimeout(tryFirst, 1000);
      this.first.unref();
    }
  }

  private mayCheckpoint(): boolean {
    return (!this.opts.role || this.opts.role.leading) && this.databaseCreated && !this.closed;
  }

  /**
   * Storage has created the database (the process host: its Upload stream arrived). In the
   * same process, `live` is storage's own environment: a checkpoint copies through it, as a
   * second environment on the same file in one process is not safe in LMDB.
   */
  databaseOpened(live?: LiveDatabase): void {
    this.databaseCreated = true;
    if (live) this.live = live;
  }

  /** Every report of the uploader: after an upload, a checkpoint, or an error. Returns the unsubscribe. */
  onProgress(listener: (p: UploadProgress) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Queues WAL records for upload after those queued before (WalUploader.submit). */
  upload(first: number, last: number, frames: () => Buffer, term: number): Promise<void> {
    return this.uploader.submit(first, last, frames, term);
  }

  /** A checkpoint now (on demand: `kvs ctl checkpoint`, or a new leader whose WAL has a gap). */
  checkpoint(): Promise<CheckpointResult> {
    if (!this.databaseCreated) {
      return Promise.reject(new Error('storage has not opened the database yet; try again once the node is ready'));
    }
    return this.checkpoints.run();
  }

  get latestCheckpoint(): Latest | undefined {
    return this.latest;
  }

  status(): ArchiverStatus {
    const u = this.uploader;
    return {
      location: this.opts.store.location,
      uploadedThrough: u.uploadedThrough,
      checkpointIndex: u.checkpointIndex,
      latestCheckpoint: this.latest?.checkpoint ?? '',
      walUploads: u.stats.uploads,
      walUploadErrors: u.stats.errors,
      walUploadConflicts: u.stats.conflicts,
      checkpoints: this.checkpoints.count,
      lastError: u.lastError,
    };
  }

  describe(): string {
    const u = this.uploader;
    return (
      `uploaded through ${u.uploadedThrough}, checkpoint ${this.latest ? `at revision ${this.latest.revision}` : 'none yet'}` +
      (u.lastError ? `; FAILING: ${u.lastError}` : '')
    );
  }

  /** Finishes the upload and the checkpoint in progress (a retrying upload gives up), then stops. */
  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    if (this.first) clearTimeout(this.first);
    await this.uploader.close();
    await this.checkpoints.idle();
    this.live = undefined;
  }
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
    private readonly openPrefix: ((prefix: string) => Promise<ObjectStore>) | undefined,
    private readonly term: () => number,
    private readonly clusterMode: boolean,
    private readonly live: () => LiveDatabase | undefined,
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
        live: this.live(),
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
    else if (this.branch && this.openPrefix) {
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

async function untilItWorks<T>(fn: () => Promise<T>, log: Logger, onState?: (state: string) => void): Promise<T> {
  for (let backoffMs = 500; ; backoffMs = Math.min(backoffMs * 2, 10_000)) {
    try {
      return await fn();
    } catch (err) {
      log.error({ err: (err as Error).message, retryInMs: backoffMs }, 'archiver cannot start (writes wait for it); retrying');
      onState?.(`starting: ${(err as Error).message}`);
      await new Promise((resolve) => setTimeout(resolve, backoffMs));
    }
  }
}
