// The write path: every request that arrives while a batch is being made durable waits in
// the queue; the next drain executes them all in ONE LMDB write transaction, appends their
// WAL entries with ONE fdatasync, and only then commits LMDB and answers. So readers (the
// gateway reads LMDB directly) never see a write that is not yet durable, and an acknowledged
// write is in the WAL, which is replayed after a crash from LMDB's applied index.
//
// With synchronous upload to the object store (drainUploading) the batch must also be in the
// object store before any reader sees it, and a write transaction cannot stay open across the
// upload: the batch is executed in a transaction that is ABORTED (keeping the responses and
// WAL entries), appended to the WAL, uploaded, and then applied through the replay path in a
// second transaction. Requests arriving meanwhile wait for the next drain.
//
// A cluster's leader does the same, waiting for its followers' ACKs instead of an upload, and
// keeps up to PIPELINE_DEPTH batches in flight: the next batch is executed (on top of the
// entries of those in flight, applied again inside its aborted transaction), written and sent
// while the previous one waits for its ACKs. Batches are applied and answered in order, and a
// batch that fails fails every batch executed after it.
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { META, readMeta, dbPath } from '../../shared/mvcc/schema.js';
import { EtcdError, MAX_REQUEST_BYTES, Errors, decodeRequest } from '../../shared/errors.js';
import { decode, encode, num, bigint, int64, type Long } from '../../shared/proto/index.js';
import type { Logger } from '../../shared/log.js';
import type { WritePipeline } from '../../shared/config.js';
import { Wal, type WalOptions } from './wal/log.js';
import { walEntryDebugLog } from './wal/entry-log.js';
import { encodeFrames, type WalRecord } from '../../shared/wal/frame.js';
import { ABORT } from 'lmdb';
import type { Span } from '@opentelemetry/api';
import { Executor, type Identity } from './mvcc/execute.js';
import type { TxnRequest, CompactionRequest } from '../../shared/mvcc/requests.js';
import { classifyTxn, metricOp, type WriteKind } from '../../shared/mvcc/write-kind.js';
import * as M from '../../shared/metrics.js';
import { applyEntry, type WalEntry } from './mvcc/apply.js';
import type { AuthChange } from './auth/apply.js';
import { Lessor } from './lease/lessor.js';
import { CommitFeed } from './feed.js';
import { DiskSpace } from './disk-space.js';
import { CompactionSteps, REMOVAL_STOPPED } from './compaction-steps.js';
import { compactionPending } from './mvcc/compaction.js';
import type { Tracing } from '../../shared/tracing.js';
import { WalSpans, endWalSpans } from './wal-spans.js';
import { AuthExecutor } from './auth/executor.js';
import { AuthErrors } from '../../shared/auth/errors.js';
import { authTables } from '../../shared/auth/tables.js';
import { Stage, microsFromPerformance, stages } from '../../shared/stages.js';

import { Op } from '../../shared/storage/ops.js';

export interface WriteResult {
  body?: Buffer;
  code: number;
  message: string;
}

type Done = (r: WriteResult) => void;
interface Pending {
  op: number;
  body: Uint8Array;
  done: Done;
  /** What the write is, for the metrics (refined from `txn` once a Txn is decoded); lease ops have none. */
  kind: WriteKind | undefined;
  /** performance.now() at arrival: the write's latency runs from here to its answer. */
  arrived: number;
  /** W3C traceparent of the client's write span (tracing on); '' or undefined otherwise. */
  traceParent: string | undefined;
  /** The auth revision the gateway checked the caller's permission at (0: unchecked, internal). */
  authRevision: number;
}

/** The kind of each write op before its request is decoded. */
const KIND_OF_OP: Record<number, WriteKind | undefined> = { 1: 'put', 2: 'delete', 3: 'txn', 4: 'compact' };

const WAL_ENTRY = 'kvs.storage.WalEntry';

/**
 * --write-pipeline auto (the default; docs/cluster.md#two-batches-in-flight): a cluster
 * leader's batches waiting for their ACKs at once while a follower runs on another machine
 * (docs/perf/write-pipeline.md). One batch in flight leaves the leader idle for the followers'
 * round trip, network included, while the next clients' writes queue. With every member on
 * one machine that wait is mostly the followers' CPU work on the same cores, and more,
 * smaller batches cost CPU they all need.
 */
const PIPELINE_DEPTH = 2;

/**
 * Ops that change who may do what: the gateway checks a write against the auth state in LMDB,
 * so the batch after one of these executes only once it is applied (else a write refused as
 * checked at an old auth revision would be checked again, by the gateway, at the same one).
 */
const AUTH_CHANGES: ReadonlySet<number> = new Set([
  Op.AUTH_ENABLE, Op.AUTH_DISABLE, Op.AUTH_USER_ADD, Op.AUTH_USER_DELETE, Op.AUTH_USER_CHANGE_PASSWORD,
  Op.AUTH_USER_GRANT_ROLE, Op.AUTH_USER_REVOKE_ROLE, Op.AUTH_ROLE_ADD, Op.AUTH_ROLE_DELETE,
  Op.AUTH_ROLE_GRANT_PERMISSION, Op.AUTH_ROLE_REVOKE_PERMISSION,
]);

/** A batch executed and written to the WAL, not yet applied to LMDB. */
interface Flight {
  last: number;
  records: WalRecord[];
  entries: WalEntry[];
  /** The revision readers see once it is applied. */
  revision: number;
  /** It changes auth: nothing executes on top of it before it is applied. */
  barrier: boolean;
  /** A batch before it failed: it will never be acknowledged (and was dropped from the WAL). */
  failed: boolean;
  /** Resolves true once applied, false once failed. */
  settled: Promise<boolean>;
  settle(applied: boolean): void;
}

/**
 * Cluster mode (services/storage/cluster.ts): the peer agent sets the role. `none` (electing)
 * and `follower` take no client writes; a follower appends and applies what the leader sends.
 */
export type ClusterRole = 'single' | 'none' | 'leader' | 'follower';

/** Resolves once the batch is in the object store (single node, --wal-sync-upload). */
export type Upload = (first: number, last: number, frames: Buffer) => Promise<void>;

/**
 * Leader (cluster mode): how a batch reaches the followers. `send` hands it over before this
 * node's own fsync, so that the followers append and fsync while it runs (docs/cluster.md: the
 * leader's order of work), and resolves once the batch may be acknowledged (followers ACKed, or
 * uploaded and fenced); `durable` reports the local fsync, with its error if it failed (the
 * batch is then never acknowledged, and `send` rejects).
 */
export interface Replicator {
  send(first: number, last: number, frames: Buffer, revision: number): Promise<void>;
  durable(through: number, err?: Error): void;
  /** Resolves once the node has proved it still leads (a batch that wrote nothing is a read). */
  confirm(): Promise<void>;
}

export interface EngineOptions {
  /** The WAL, when the caller opened it already (openWal) to upload its tail first. */
  wal?: Wal;
  /**
   * Synchronous upload: resolves once WAL records first..last (`frames`, as written to the
   * WAL) are in the object store. Rejects only when storage is stopping.
   */
  upload?: Upload;
  /** Sealed WAL segments are kept until this index covers them (uploaded and checkpointed). */
  archivedThrough?: () => number;
  /** The clock of lease deadlines (tests move it). */
  now?: () => number;
  /** The free-space floor writes need (default: MIN_FREE_BYTES on the database's filesystem). */
  space?: DiskSpace;
  /** Only while tracing is on: WAL appends become kvs.wal.append spans. */
  tracing?: Tracing;
  /** Simple-token lifetime (--token-ttl) in ms; default 300 s, as etcd. */
  tokenTtlMs?: number;
  /**
   * Cluster mode: the engine starts with role `none` and replays nothing LMDB has not applied:
   * those records stay staged until the role is known.
   */
  cluster?: { memberId: string; clusterId: string };
  /** Cluster leader: batches in flight at once (--write-pipeline; see depth()). */
  writePipeline?: WritePipeline;
}

export class Engine {
  readonly executor: Executor;
  readonly identity: Identity;
  readonly lessor: Lessor;
  /** A compaction's physical removal, in steps between batches. */
  readonly compaction: CompactionSteps;
  readonly auth: AuthExecutor;
  /** Committed batches, for watchers (Storage.Feed). */
  readonly feed = new CommitFeed();
  private queue: Pending[] = [];
  private scheduled = false;
  private closed = false;
  /** Batches between their execution and their LMDB apply, oldest first (see the header). */
  private flights: Flight[] = [];
  /**
   * Nothing drains while a batch is being executed and written, a failure is being undone, or a
   * read-only batch awaits proof of leadership (hold()).
   */
  private holds = 0;
  /** The drains under way (close and role changes wait for them). */
  private readonly running = new Set<Promise<void>>();
  /** The revision LMDB holds while batches are in flight (the executor's runs ahead). */
  private appliedRevision = 0;
  private index: number;
  private readonly space: DiskSpace;
  /** Debug lines per batch only when asked for: at info the write path builds none. */
  private readonly debug: boolean;
  /** Undefined while tracing is off: a batch then checks this once and nothing else. */
  private readonly walSpans: WalSpans | undefined;
  /** Cluster mode: this node's role, set by the peer agent. */
  role: ClusterRole;
  /** Leader: how a batch reaches the followers before it is applied and answered. */
  replicate: Replicator | undefined;
  /** Leader: a connected follower runs on another machine (the peer agent's Placement). */
  followersElsewhere = false;
  /** Called when the role changes (storage's main starts or stops leader-only work). */
  onRole: (role: ClusterRole) => void = () => {};
  /**
   * Follower: the records appended since the last apply, in order, so that applying them does not
   * read the WAL file back (empty after a restart: then the WAL is read).
   */
  private staged: WalRecord[] = [];

  private constructor(
    readonly db: MvccDb,
    readonly wal: Wal,
    dataDir: string,
    private readonly log: Logger,
    private readonly opts: EngineOptions,
  ) {
    this.space = opts.space ?? new DiskSpace(dbPath(dataDir));
    this.walSpans = opts.tracing && new WalSpans(opts.tracing);
    this.debug = log.isLevelEnabled('debug');
    this.identity = ensureIdentity(db, opts.cluster);
    this.role = opts.cluster ? 'none' : 'single';
    this.executor = new Executor(db, this.identity);
    this.lessor = new Lessor(db, this.executor, this.identity.memberId, (op, body, done) => this.submit(op, body, done), opts.now);
    this.index = readMeta(db, META.appliedIndex);
    this.compaction = new CompactionSteps(db, log, () => this.holds > 0 || this.flights.length > 0);
    this.compaction.resume();
    this.auth = new AuthExecutor(db, () => this.executor.currentHeader(), { tokenTtlMs: opts.tokenTtlMs ?? 300_000 });
    const trace = stages;
    if (trace) wal.onWritten = (last) => trace.stamp(this.role === 'follower' ? Stage.FOLLOWER_WAL_WRITTEN : Stage.STORAGE_WAL_WRITTEN, Number(last));
  }

  /** The current revision as readers see it: not that of a batch still being uploaded. */
  get revision(): number {
    return this.flights.length ? this.appliedRevision : this.executor.revision;
  }

  /** Opens the WAL of a data directory (cutting a torn tail). */
  static openWal(dataDir: string, log: Logger, opts: Pick<WalOptions, 'onSeal'> = {}): Wal {
    return Wal.open(path.join(dataDir, 'wal'), { ...opts, log: (msg, fields) => log.warn(fields ?? {}, msg), onAppend: walEntryDebugLog(log) });
  }

  /** Opens the WAL, replays what LMDB has not applied yet, and returns a ready engine. */
  static open(db: MvccDb, dataDir: string, log: Logger, opts: EngineOptions = {}): Engine {
    const wal = opts.wal ?? Engine.openWal(dataDir, log);
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
        for (const rec of chunk) applyEntry(db, decodeEntry(rec.payload), Number(rec.index));
      });
      replayed += chunk.length;
      chunk = [];
    };
    // Cluster mode: what LMDB has not applied was never seen committed (a follower applies only
    // committed entries, a leader only acknowledged ones): it stays staged until the role is
    // known (a leader applies it, a follower drops it and receives it again).
    const replayThrough = opts.cluster ? BigInt(applied) : wal.lastIndex;
    {
      for (const rec of wal.readFrom(BigInt(applied) + 1n)) {
        if (rec.index > replayThrough) break;
        chunk.push(rec);
        if (chunk.length >= 1000) flush();
      }
      if (chunk.length) flush();
    }
    if (wal.lastIndex < BigInt(applied)) {
      // The WAL was trimmed (or lost) past what LMDB holds: continue numbering after LMDB.
      if (wal.lastIndex === 0n) wal.resetTo(BigInt(applied));
      else throw new Error(`WAL in ${wal.dir} ends at index ${wal.lastIndex} but the database has applied ${applied}: the WAL is from another database; move it away or restore the data directory`);
    }
    const engine = new Engine(db, wal, dataDir, log, opts);
    log.info({ replayed, revision: engine.executor.revision, appliedIndex: engine.index }, replayed ? 'replayed WAL' : 'storage opened');
    return engine;
  }

  /**
   * Queues one write; `done` is called once it is durable and applied, or has failed.
   * `authRevision`: the auth revision the gateway checked the caller's permission at (0: none).
   * `traceParent` (tracing on) makes the write's kvs.wal.append span a child of the caller's.
   */
  submit(op: number, body: Uint8Array, done: Done, authRevision = 0, traceParent?: string): void {
    if (this.closed) return done({ code: status.UNAVAILABLE, message: 'kvs: storage is shutting down' });
    if (this.role === 'none' || this.role === 'follower') return done(Errors.noLeader);
    this.queue.push({ op, body, done, kind: KIND_OF_OP[op], arrived: performance.now(), authRevision, traceParent });
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.drain);
    }
  }

  private drain = (): void => {
    this.scheduled = false;
    // Each batch that ends drains again.
    if (this.holds || this.flights.length >= this.depth()) return;
    if (this.flights.length && this.flights[this.flights.length - 1].barrier) return;
    const batch = this.queue;
    this.queue = [];
    if (batch.length === 0) return;
    const refused = this.space.check();
    if (refused) {
      for (const p of batch) this.finish(p, { code: refused.code, message: refused.message });
      return;
    }
    M.writeBatchSize.observe(batch.length);
    if (this.role === 'leader' && this.replicate) this.track(this.drainUploading(batch, this.replicate));
    else if (this.opts.upload) this.track(this.drainUploading(batch, this.opts.upload));
    else this.drainLocal(batch);
  };

  /**
   * How many batches may wait for their ACKs at once: one but on a cluster's leader
   * (--write-pipeline), and one there too while compacted history is being removed, whose
   * steps run only between batches.
   */
  private depth(): number {
    if (this.role !== 'leader' || !this.replicate || this.compaction.removing) return 1;
    const want = this.opts.writePipeline ?? 1;
    return want === 'auto' ? (this.followersElsewhere ? PIPELINE_DEPTH : 1) : want;
  }

  private track(drain: Promise<void>): void {
    this.running.add(drain);
    void drain.finally(() => this.running.delete(drain));
  }

  /** No object store to wait for: execute, append to the WAL and commit in one transaction. */
  private drainLocal(batch: Pending[]): void {
    const results: WriteResult[] = new Array(batch.length);
    const records: WalRecord[] = [];
    let index = this.index;
    let durable = false;
    let compacting = false;
    try {
      this.db.env.transactionSync(() => {
        index = this.executeBatch(batch, results, records, []);
        compacting = compactionPending(this.db); // read here, not after: see CompactionSteps.kick
        if (records.length) {
          stages?.stamp(Stage.STORAGE_EXECUTED, index);
          this.db.meta.putSync(META.appliedIndex, index);
          // fdatasync: the durability point
          if (this.walSpans) this.walSpans.around(batch, records.length, () => this.wal.appendSync(records));
          else this.wal.appendSync(records);
          stages?.stamp(Stage.STORAGE_FSYNCED, index);
          durable = true;
        }
      });
      this.index = index;
      if (stages && records.length) this.stampCommitted(batch, index);
    } catch (err) {
      if (durable) this.commitFailedAfterWal(err, records);
      return this.failBatch(batch, err);
    }
    if (records.length && this.debug) this.log.debug({ entries: records.length, requests: batch.length, index }, 'batch committed');
    this.feed.publish(records, this.executor.revision, index);
    for (let i = 0; i < batch.length; i++) this.finish(batch[i], results[i]);
    if (records.length) stages?.stamp(Stage.STORAGE_ANSWERED, index);
    this.compaction.kick(compacting);
  }

  /** Stage tracing: the batch through `index` is committed to LMDB (and which revision it ends at). */
  private stampCommitted(batch: Pending[], index: number, revision = this.executor.revision): void {
    const trace = stages!;
    trace.stamp(Stage.STORAGE_COMMITTED, index);
    trace.stamp(Stage.STORAGE_RECEIVE, index, microsFromPerformance(batch[0].arrived));
    trace.link(index, revision);
  }

  /**
   * Execute (aborted), append to the WAL, then apply and answer once the batch is in the object
   * store (`Upload`: single node, --wal-sync-upload; it follows the local fsync, as the store must
   * never hold a record the local WAL failed to keep) or may be acknowledged by the cluster
   * (`Replicator`: the followers receive it before the local fsync, and append it meanwhile).
   * On a leader the next batch may start once this one is durable here (see the header).
   */
  private async drainUploading(batch: Pending[], out: Upload | Replicator): Promise<void> {
    const results: WriteResult[] = new Array(batch.length);
    const records: WalRecord[] = [];
    const entries: WalEntry[] = [];
    // The batches in flight: this one executes on top of them, and fails if one of them does.
    const prior = this.flights.slice();
    const before = prior[prior.length - 1];
    let index = before ? before.last : this.index;
    let frames: Buffer;
    const revisionBefore = this.executor.revision;
    const replicator = typeof out === 'function' ? undefined : out;
    // The kvs.wal.append spans (tracing on) cover the local append AND the upload: in this mode
    // a batch is appended to the WAL of record once it is in the object store.
    let spans: Span[] | undefined;
    // Nothing else drains until this batch is durable here (or has failed).
    const release = this.hold();
    try {
      this.db.env.transactionSync(() => {
        for (const f of prior) {
          for (let i = 0; i < f.entries.length; i++) applyEntry(this.db, f.entries[i], Number(f.records[i].index));
        }
        index = this.executeBatch(batch, results, records, entries, index);
        return ABORT; // nothing visible to readers before it is in the object store
      });
      frames = encodeFrames(records); // validates sizes before anything is written or sent
    } catch (err) {
      await before?.settled; // the counters are re-read once no batch is in flight
      release();
      this.failBatch(batch, err);
      this.redrain();
      return;
    }
    if (records.length === 0) {
      if (replicator) {
        // Only reads (Txns whose outcome wrote nothing): a deposed leader that does not know it
        // yet would answer from a stale state, so they wait for proof of leadership, as a
        // linearizable Range does (etcd serves read-only Txns through ReadIndex). They read the
        // writes of the batches in flight, so they wait for those too.
        try {
          if (before && !(await before.settled)) throw new EtcdError(status.UNAVAILABLE, 'kvs: a write this read saw was not acknowledged; retry');
          await replicator.confirm();
        } catch (err) {
          release();
          const e = err as EtcdError;
          for (const p of batch) this.finish(p, { code: e.code ?? status.UNAVAILABLE, message: e.message });
          this.redrain();
          return;
        }
      }
      release();
      this.redrain();
      for (let i = 0; i < batch.length; i++) this.finish(batch[i], results[i]);
      return;
    }
    const first = Number(records[0].index);
    stages?.stamp(Stage.STORAGE_EXECUTED, index);
    if (!before) this.appliedRevision = revisionBefore;
    let settle!: (applied: boolean) => void;
    const settled = new Promise<boolean>((resolve) => (settle = resolve));
    const flight: Flight = {
      last: index, records, entries, revision: this.executor.revision, failed: false, settled, settle,
      barrier: batch.some((p) => AUTH_CHANGES.has(p.op)),
    };
    this.flights.push(flight);
    M.writeBatchesInFlight.observe(this.flights.length);
    const acked = replicator?.send(first, index, frames, flight.revision);
    // Awaited only after the fsync below; a refusal that comes first (deposed while this batch
    // waits its turn) must not count as an unhandled rejection, which would stop the process.
    acked?.catch(() => undefined);
    if (replicator) stages?.stamp(Stage.STORAGE_TO_PEER, index);
    // The batch leaves for the followers only when the event loop next turns (a gRPC write is
    // flushed asynchronously): without this turn it would wait for the blocking fdatasync below,
    // and the followers' append could not overlap it (docs/perf/cluster.md#levers-on-the-cluster-path,
    // "batch to followers before the leader's fsync"). Nothing else drains meanwhile (held).
    if (replicator) await new Promise<void>((resolve) => setImmediate(resolve));
    // A batch before it may have failed during that turn, and dropped every batch after it:
    // then this one is not written, and fails below once the peer agent has refused it too.
    if (!flight.failed) {
      try {
        if (this.walSpans) spans = this.walSpans.begin(batch, records.length);
        this.wal.appendSync(records, frames); // fdatasync
        stages?.stamp(Stage.STORAGE_FSYNCED, index);
      } catch (err) {
        endWalSpans(spans, err);
        this.flights.pop(); // the last one: nothing was executed after it (held)
        replicator?.durable(index, err as Error);
        await acked?.catch(() => undefined); // the peer agent has dropped the batch
        await before?.settled; // the counters are re-read once no batch is in flight
        release();
        settle(false);
        this.failBatch(batch, err);
        this.redrain();
        return;
      }
      replicator?.durable(index);
    }
    // The next batch may execute and be written while this one waits for its ACKs (a leader;
    // a single node's upload allows one batch in flight: depth()).
    release();
    this.redrain();
    try {
      await (acked ?? (out as Upload)(first, index, frames));
      endWalSpans(spans);
    } catch (err) {
      endWalSpans(spans, err);
      if (this.role !== 'single') {
        // Cluster: the batch was not acknowledged (deposed, or stopping). It is dropped from the
        // WAL with every batch after it; if a follower kept them, the next leader's log has them
        // and this node receives them again as a follower. The callers cannot know the outcome.
        await this.dropFrom(flight);
        for (const p of batch) this.finish(p, { code: status.UNAVAILABLE, message: `kvs: the write's outcome is unknown: ${(err as Error).message}` });
        this.redrain();
        return;
      }
      // Storage is stopping. The records are in the local WAL: the next start uploads them,
      // then applies them. The callers cannot know the outcome.
      const message = `kvs: storage stopped before the write reached the object store; its outcome is unknown (${(err as Error).message})`;
      for (const p of batch) this.finish(p, { code: status.UNAVAILABLE, message });
      return;
    }
    // Acknowledged in order, so the batch before it has been applied by now.
    if (before && !(await before.settled)) {
      this.log.fatal({ first, last: index }, 'a batch was acknowledged after one before it failed; restarting storage');
      process.exit(1);
    }
    let compacting = false;
    try {
      this.db.env.transactionSync(() => {
        for (let i = 0; i < entries.length; i++) applyEntry(this.db, entries[i], Number(records[i].index));
        compacting = compactionPending(this.db);
      });
    } catch (err) {
      // The records are durable (WAL and object store) but LMDB refused them: later batches
      // would execute against a state without them. Restart; the replay applies them.
      this.log.fatal({ err, first: records[0].index, last: index }, 'applying an archived batch to LMDB failed; restarting storage to replay it');
      process.exit(1);
    }
    this.index = index;
    this.flights.shift();
    this.appliedRevision = flight.revision;
    settle(true);
    if (stages) this.stampCommitted(batch, index, flight.revision);
    if (this.debug) this.log.debug({ entries: records.length, requests: batch.length, index }, 'batch archived and committed');
    this.feed.publish(records, flight.revision, index);
    for (let i = 0; i < batch.length; i++) this.finish(batch[i], results[i]);
    stages?.stamp(Stage.STORAGE_ANSWERED, index);
    this.compaction.kick(compacting);
    this.redrain();
  }

  /** Holds the drain (see `holds`); the returned function lets go, once. */
  private hold(): () => void {
    this.holds++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.holds--;
    };
  }

  /**
   * A leader's batch in flight was not acknowledged: it and every batch executed after it (on
   * top of it) are dropped from the WAL, once the batches before it have ended (they may still
   * be acknowledged). The first of them to fail does the drop; the others just fail.
   */
  private async dropFrom(flight: Flight): Promise<void> {
    const k = this.flights.indexOf(flight);
    if (flight.failed || k < 0) return;
    const doomed = this.flights.slice(k);
    for (const f of doomed) f.failed = true; // one in its turn before the fsync is not written
    const release = this.hold();
    await this.flights[this.flights.indexOf(flight) - 1]?.settled;
    // A batch before it may have failed meanwhile and dropped this one with it.
    if (this.flights.includes(flight)) {
      this.flights.splice(this.flights.indexOf(flight));
      this.dropUnapplied();
    }
    release();
    for (const f of doomed) f.settle(false);
  }

  private redrain(): void {
    if (this.queue.length && !this.scheduled) {
      this.scheduled = true;
      setImmediate(this.drain);
    }
  }

  // ---- cluster mode (driven by services/storage/cluster.ts) ---------------------------------

  /** The WAL's last index: past `appliedIndex` are staged entries (cluster mode). */
  get lastIndex(): number {
    return Number(this.wal.lastIndex);
  }

  get appliedIndex(): number {
    return this.index;
  }

  /**
   * Becomes leader: every staged entry is applied (it may have been acknowledged by the
   * previous leader), then client writes are taken at this term. With staged entries and less
   * than the free-space floor free it throws FreeSpaceError and stays as it was (applying them
   * through the memory map could SIGBUS the process): cluster.ts then detaches, which ends the
   * peer agent's term.
   */
  becomeLeader(term: number): void {
    if (this.lastIndex > this.index) {
      const refused = this.space.check();
      if (refused) throw refused;
    }
    this.identity.raftTerm = term;
    this.applyThrough(this.lastIndex);
    this.executor.reload();
    this.lessor.reload();
    this.role = 'leader';
    this.onRole('leader');
    this.redrain();
  }

  /**
   * Becomes a follower (or electing, `none`): queued writes fail with etcd's no-leader error.
   * Staged entries are kept — the previous leader may have acknowledged them, and if this node
   * takes over it applies them — until `dropStaged`: a leader answered this follower and sends
   * them again (once no batch is in flight).
   */
  async becomeFollower(role: 'follower' | 'none', term: number, dropStaged = false): Promise<void> {
    if (term) this.identity.raftTerm = term;
    const was = this.role;
    this.role = role;
    this.followersElsewhere = false; // a later term's leader is told afresh
    for (const p of this.queue.splice(0)) this.finish(p, Errors.noLeader);
    await Promise.all(this.running); // a leader's batches in flight fail (their replicate is refused) first
    if (was !== role) this.onRole(role);
    if (dropStaged) this.dropUnapplied();
    else {
      this.executor.reload();
      this.lessor.reload();
    }
  }

  /** Drops staged WAL entries (never applied) and re-reads the counters the batch advanced. */
  private dropUnapplied(): void {
    this.staged = [];
    const dropped = this.wal.truncateAfter(BigInt(this.index));
    this.executor.reload();
    this.lessor.reload();
    if (dropped) this.log.info({ dropped, appliedIndex: this.index }, 'dropped WAL entries that were never committed');
  }

  /**
   * Follower: appends entries the leader sent (one write, one fdatasync), then, given
   * `commitThrough`, applies what is committed (applyReplicated). Entries already held are
   * skipped; a gap throws (the peer agent resyncs). Below the free-space floor it throws
   * FreeSpaceError before touching the WAL or LMDB (an apply through the memory map on a full
   * disk would SIGBUS the process): nothing is taken, so nothing is ACKed
   * (services/storage/cluster.ts).
   */
  appendReplicated(records: WalRecord[], commitThrough?: number): void {
    this.checkFollowerSpace();
    let fresh = records;
    const last = this.wal.lastIndex;
    if (records.length && records[0].index <= last) {
      // Entries this node already holds. Applied ones are the same history; staged ones must
      // match, else the sender's win (a newer leader's, or the object store's) and ours from
      // the mismatch on are dropped.
      const staged = new Map<bigint, Uint8Array>();
      for (const rec of this.wal.readFrom(records[0].index > BigInt(this.index) ? records[0].index : BigInt(this.index) + 1n)) staged.set(rec.index, rec.payload);
      let i = 0;
      for (; i < records.length && records[i].index <= last; i++) {
        const mine = staged.get(records[i].index);
        if (mine && !Buffer.from(mine).equals(Buffer.from(records[i].payload))) {
          const dropped = this.wal.truncateAfter(records[i].index - 1n);
          this.staged = this.staged.filter((r) => r.index < records[i].index);
          this.log.warn({ from: Number(records[i].index), dropped }, 'staged WAL entries differ from the committed history; dropped');
          break;
        }
      }
      fresh = records.slice(i);
    }
    if (fresh.length && fresh[0].index !== this.wal.lastIndex + 1n) {
      throw new Error(`replication gap: the WAL ends at ${this.wal.lastIndex} but the leader sent ${fresh[0].index}`);
    }
    if (fresh.length) {
      this.wal.appendSync(fresh);
      stages?.stamp(Stage.FOLLOWER_FSYNCED, Number(this.wal.lastIndex));
      for (const r of fresh) this.staged.push(r);
    }
    if (commitThrough !== undefined) this.applyThrough(Math.min(commitThrough, this.lastIndex));
  }

  /** Follower: applies the entries it holds through `commitThrough` (what the leader committed). */
  applyReplicated(commitThrough: number): void {
    this.checkFollowerSpace();
    this.applyThrough(Math.min(commitThrough, this.lastIndex));
  }

  private checkFollowerSpace(): void {
    if (this.role === 'leader' || this.role === 'single') throw new Error(`replicated entries refused: this node is ${this.role}`);
    const refused = this.space.check();
    if (refused) throw refused;
  }

  /** Applies staged WAL entries through `through` in one LMDB transaction, and publishes them. */
  applyThrough(through: number): void {
    if (through <= this.index) return;
    const next = BigInt(this.index) + 1n;
    let records: WalRecord[] = [];
    const k = this.staged.findIndex((r) => r.index === next);
    if (k >= 0 && this.staged[this.staged.length - 1].index >= BigInt(through)) {
      const end = k + Number(BigInt(through) - next) + 1;
      records = this.staged.slice(k, end);
      this.staged = this.staged.slice(end);
    } else {
      for (const rec of this.wal.readFrom(next)) {
        if (rec.index > BigInt(through)) break;
        records.push(rec);
      }
      this.staged = this.staged.filter((r) => r.index > BigInt(through));
    }
    try {
      this.db.env.transactionSync(() => {
        for (const rec of records) applyEntry(this.db, decodeEntry(rec.payload), Number(rec.index));
        this.executor.reload(); // in the transaction, not after it: see CompactionSteps.kick
      });
    } catch (err) {
      this.executor.reload(); // the counters LMDB still holds, not the failed transaction's
      throw err;
    }
    this.index = through;
    this.feed.publish(records, this.executor.revision, through);
  }

  /** Answers one write, and counts it. */
  private finish(p: Pending, r: WriteResult): void {
    if (p.kind) {
      const m = M.writeMetricsByOp[metricOp(p.kind)];
      if (r.code === 0) {
        m.done.inc();
        m.duration.observe((performance.now() - p.arrived) / 1000);
      } else m.failed.inc();
    }
    p.done(r);
  }

  /**
   * Executes every request of the batch in order inside the caller's write transaction,
   * filling `results` and the WAL `records` (and their decoded `entries`), numbered from
   * `after` + 1. Returns the last WAL index used. A request that fails with an etcd error fails alone.
   */
  private executeBatch(batch: Pending[], results: WriteResult[], records: WalRecord[], entries: WalEntry[], after = this.index): number {
    let index = after;
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i];
      try {
        const { response, entry, physical } = this.execute(p, index + 1);
        if (physical) p.done = this.afterRemoval(p.done);
        if (entry) {
          records.push({ index: BigInt(++index), payload: encodeEntry(entry) });
          entries.push(entry);
        }
        results[i] = { body: response, code: 0, message: '' };
      } catch (err) {
        if (!(err instanceof EtcdError)) throw err;
        results[i] = { code: err.code, message: err.message };
      }
    }
    return index;
  }

  /**
   * The batch is in the WAL but LMDB did not commit it: later batches would be numbered and
   * executed as if it did not exist, and a restart would replay it. Restarting now replays it
   * (its callers see the stream break: an unknown outcome, which is the truth).
   */
  private commitFailedAfterWal(err: unknown, records: WalRecord[]): never {
    this.log.fatal({ err, first: records[0].index, last: records[records.length - 1].index }, 'LMDB commit failed after the WAL append; restarting storage to replay the batch');
    process.exit(1);
  }

  /** Nothing of this batch was committed (LMDB aborted, WAL append rolled back). */
  private failBatch(batch: Pending[], err: unknown): void {
    // Every caller learns its write failed, and the counters are re-read.
    this.executor.reload();
    this.lessor.reload();
    this.log.error({ err, batch: batch.length }, 'write batch failed; nothing of it was applied');
    const message = `kvs: write failed in storage: ${(err as Error).message}`;
    for (const p of batch) this.finish(p, { code: status.UNAVAILABLE, message });
  }

  /** A Compact with physical=true is answered once the compacted history is removed (as etcd). */
  private afterRemoval(done: Done): Done {
    return (r) => (r.code ? done(r) : this.compaction.whenRemoved((ok) => done(ok ? r : REMOVAL_STOPPED)));
  }

  private execute(p: Pending, walIndex: number): { response: Buffer; entry?: WalEntry; physical?: boolean } {
    const { op, body } = p;
    if (body.length > MAX_REQUEST_BYTES) throw Errors.requestTooLarge;
    // The gateway checked permissions at p.authRevision; auth changed since (a revocation, or
    // auth enabled) means that check no longer holds: etcd's ErrAuthOldRevision (the gateway
    // checks again and resends).
    if (p.authRevision !== 0 && this.auth.enabled && p.authRevision !== this.auth.revision) throw AuthErrors.authOldRevision;
    // The gateway forwards the client's bytes undecoded. A body that does not decode fails
    // alone, with gRPC's unmarshalling error (INTERNAL, as etcd): nothing has been written for
    // it yet, so it must not abort the batch it shares with other clients' writes.
    const request = <T>(typeName: string): T => decodeRequest((b) => decode<T>(typeName, b), body);
    switch (op) {
      case Op.PUT:
        return this.executor.put(request('etcdserverpb.PutRequest'));
      case Op.DELETE_RANGE:
        return this.executor.deleteRange(request('etcdserverpb.DeleteRangeRequest'));
      case Op.TXN: {
        const txn = request<TxnRequest>('etcdserverpb.TxnRequest');
        p.kind = classifyTxn(txn).kind;
        return this.executor.txn(txn);
      }
      case Op.COMPACT: {
        const r = request<CompactionRequest>('etcdserverpb.CompactionRequest');
        return { ...this.executor.compact(r), physical: r.physical };
      }
      case Op.LEASE_GRANT:
        return this.lessor.grant(request('etcdserverpb.LeaseGrantRequest'));
      case Op.LEASE_REVOKE:
        return this.lessor.revoke(request('etcdserverpb.LeaseRevokeRequest'));
      default:
        if (AuthExecutor.handles(op)) return this.auth.execute(op, request, walIndex);
        throw new EtcdError(status.INVALID_ARGUMENT, `kvs: unknown storage operation ${op}`);
    }
  }

  /** Why writes are refused now (the free-space floor), or undefined while they are taken. */
  writesRefused(): string | undefined {
    return this.space.check()?.message;
  }

  /** Seals the WAL if its segment is older than the rotation age (called from a timer). */
  rotateIfDue(): void {
    this.wal.rotateIfDue();
  }

  private trimming = false;

  /**
   * Deletes sealed WAL segments that LMDB no longer needs: LMDB commits without fsync, so a
   * segment may go only after an explicit LMDB sync that covers its last entry.
   */
  trimWal(): void {
    const sealed = this.wal.sealedSegments();
    if (this.trimming || this.closed || sealed.length === 0) return;
    // With an object store, a segment also waits until it is uploaded and checkpointed.
    const archived = this.opts.archivedThrough?.() ?? Infinity;
    const through = BigInt(Math.min(this.index, archived));
    if (sealed[0].lastIndex > through) return;
    this.trimming = true;
    // lmdb-js's env.sync (mdb_env_sync, forced) is missing from its type declarations.
    (this.db.env as unknown as { sync(cb: (err?: Error) => void): void }).sync((err?: Error) => {
      this.trimming = false;
      if (err) return this.log.error({ err }, 'LMDB sync failed; keeping WAL segments');
      if (this.closed) return;
      const removed = this.wal.removeSealedThrough(through);
      if (this.opts.archivedThrough) M.walGcSegmentsTotal.inc(removed.length);
      if (removed.length) this.log.debug({ removed }, 'removed WAL segments covered by the synced database');
    });
  }

  /** Stops taking writes, finishes the queued ones, and closes the WAL. */
  async close(): Promise<void> {
    this.lessor.stop();
    this.compaction.stop();
    this.closed = true;
    if (this.opts.upload || this.role === 'leader') {
      // Nothing new goes to the object store or the followers now: queued writes fail without
      // being executed, and the batches in flight end (their upload is cancelled, or the peer
      // agent's link closed, by the caller first).
      for (const p of this.queue.splice(0)) this.finish(p, { code: status.UNAVAILABLE, message: 'kvs: storage is shutting down' });
      await Promise.all(this.running);
    } else if (this.queue.length) this.drain();
    this.wal.close();
    await this.db.env.close();
  }
}

function encodeEntry(e: WalEntry): Buffer {
  const { leaseGrant: g, leaseRevoke: r, auth: a, ...rest } = e;
  return encode(WAL_ENTRY, {
    ...rest,
    ...(g && { leaseGrant: { id: int64(g.id), ttl: g.ttl } }),
    ...(r && { leaseRevoke: { id: int64(r.id) } }),
    ...(a && { auth: a }),
  });
}

type Int64 = number | Long;
export function decodeEntry(buf: Uint8Array): WalEntry {
  const m = decode<{
    revision: unknown; mutations: { type: number; kv: Uint8Array }[]; compactRevision: unknown;
    leaseGrant?: { id: Int64; ttl: Int64 }; leaseRevoke?: { id: Int64 }; auth?: AuthChange & { authRevision: Int64 };
  }>(WAL_ENTRY, buf);
  const e: WalEntry = { revision: num(m.revision as number), mutations: m.mutations, compactRevision: num(m.compactRevision as number) };
  if (m.leaseGrant) e.leaseGrant = { id: bigint(m.leaseGrant.id), ttl: num(m.leaseGrant.ttl) };
  if (m.leaseRevoke) e.leaseRevoke = { id: bigint(m.leaseRevoke.id) };
  if (m.auth) {
    const a = m.auth;
    e.auth = { ...a, authRevision: num(a.authRevision), putTokens: a.putTokens.map((t) => ({ ...t, expiresAtMs: num(t.expiresAtMs as unknown as Int64) })) };
  }
  return e;
}

/**
 * A fresh database gets a random cluster and member id (as etcd does at bootstrap). In cluster
 * mode both come from the configuration: the member id from --node-id (the database may come
 * from the leader's checkpoint, with the leader's id in it), the cluster id from the bucket and
 * prefix every node shares.
 */
function ensureIdentity(db: MvccDb, cluster?: { memberId: string; clusterId: string }): Identity {
  let clusterId = db.meta.get(META.clusterId) as string | undefined;
  let memberId = db.meta.get(META.memberId) as string | undefined;
  if (!clusterId || !memberId) {
    const rnd = () => (randomBytes(8).readBigUInt64BE() >> 1n).toString();
    clusterId = rnd();
    memberId = rnd();
    const c = clusterId, m = memberId;
    db.env.transactionSync(() => {
      db.meta.putSync(META.clusterId, c);
      db.meta.putSync(META.memberId, m);
      if (db.meta.get(META.revision) === undefined) db.meta.putSync(META.revision, 1);
    });
  }
  if (cluster && (cluster.memberId !== memberId || cluster.clusterId !== clusterId)) {
    ({ memberId, clusterId } = cluster);
    db.env.transactionSync(() => {
      db.meta.putSync(META.memberId, cluster.memberId);
      db.meta.putSync(META.clusterId, cluster.clusterId);
    });
  }
  return { clusterId, memberId, raftTerm: 1 };
}
