// What every mode of the engine shares: the executors over LMDB, the applied index, the queue's
// answers, and the execution of one batch of writes inside the caller's transaction. The local
// drain, the leader pipeline and the follower replica each drive it (see ../engine.ts).
import { randomBytes } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META, readMeta, dbPath } from '../../../shared/mvcc/schema.js';
import { EtcdError, MAX_REQUEST_BYTES, Errors, decodeRequest } from '../../../shared/errors.js';
import { decode } from '../../../shared/proto/index.js';
import type { Logger } from '../../../shared/log.js';
import { encodeWalEntry, type WalEntry } from '../../../shared/wal/entry.js';
import { classifyTxn, metricOp, type WriteKind } from '../../../shared/mvcc/write-kind.js';
import * as M from '../../../shared/metrics.js';
import { AuthErrors } from '../../../shared/auth/errors.js';
import { Stage, microsFromPerformance, stages } from '../../../shared/stages.js';
import type { Wal } from '../wal/log.js';
import type { WalRecord } from '../../../shared/wal/frame.js';
import { Executor, type Identity } from '../mvcc/execute.js';
import type { TxnRequest, CompactionRequest } from '../../../shared/mvcc/requests.js';
import { Lessor } from '../lease/lessor.js';
import { CommitFeed } from '../feed.js';
import { DiskSpace } from '../disk-space.js';
import { CompactionSteps, REMOVAL_STOPPED } from '../compaction-steps.js';
import { WalSpans } from '../wal-spans.js';
import { AuthExecutor } from '../auth/executor.js';
import { Op } from '../../../shared/storage/ops.js';
import type { ClusterRole, Done, EngineOptions, Replicator, WriteResult } from '../engine.js';

export interface Pending {
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
export const KIND_OF_OP: Record<number, WriteKind | undefined> = { 1: 'put', 2: 'delete', 3: 'txn', 4: 'compact' };

export abstract class EngineCore {
  readonly executor: Executor;
  readonly identity: Identity;
  readonly lessor: Lessor;
  /** A compaction's physical removal, in steps between batches. */
  readonly compaction: CompactionSteps;
  readonly auth: AuthExecutor;
  /** Committed batches, for watchers (Storage.Feed). */
  readonly feed = new CommitFeed();
  queue: Pending[] = [];
  closed = false;
  /**
   * Nothing drains while a batch is being executed and written, a failure is being undone, or a
   * read-only batch awaits proof of leadership (hold()).
   */
  holds = 0;
  /** The drains under way (close and role changes wait for them). */
  readonly running = new Set<Promise<void>>();
  /** The last WAL index applied to LMDB. */
  index: number;
  readonly space: DiskSpace;
  /** Debug lines per batch only when asked for: at info the write path builds none. */
  readonly debug: boolean;
  /** Undefined while tracing is off: a batch then checks this once and nothing else. */
  readonly walSpans: WalSpans | undefined;
  /** Cluster mode: this node's role, set by the peer agent. */
  role: ClusterRole;
  /** Leader: how a batch reaches the followers before it is applied and answered. */
  replicate: Replicator | undefined;
  /** Leader: a connected follower runs on another machine (the peer agent's Placement). */
  followersElsewhere = false;
  /** Called when the role changes. */
  onRole: (role: ClusterRole) => void = () => {};

  constructor(
    readonly db: MvccDb,
    readonly wal: Wal,
    dataDir: string,
    readonly log: Logger,
    readonly opts: EngineOptions,
  ) {
    this.space = opts.space ?? new DiskSpace(dbPath(dataDir));
    this.walSpans = opts.tracing && new WalSpans(opts.tracing);
    this.debug = log.isLevelEnabled('debug');
    this.identity = ensureIdentity(db, opts.cluster);
    this.role = opts.cluster ? 'none' : 'single';
    this.executor = new Executor(db, this.identity);
    this.lessor = new Lessor(db, this.executor, this.identity.memberId, (op, body, done) => this.submit(op, body, done), opts.now);
    this.index = readMeta(db, META.appliedIndex);
    this.compaction = new CompactionSteps(db, log, () => this.holds > 0 || this.inFlight() > 0);
    this.compaction.resume();
    this.auth = new AuthExecutor(db, () => this.executor.currentHeader(), { tokenTtlMs: opts.tokenTtlMs ?? 300_000 });
    const trace = stages;
    if (trace) wal.onWritten = (last) => trace.stamp(this.role === 'follower' ? Stage.FOLLOWER_WAL_WRITTEN : Stage.STORAGE_WAL_WRITTEN, Number(last));
  }

  abstract submit(op: number, body: Uint8Array, done: Done, authRevision?: number, traceParent?: string): void;
  /** Batches executed and written but not yet applied (compaction steps run only between them). */
  protected abstract inFlight(): number;
  /** Drains again if writes are queued (a batch ended, or a hold was let go). */
  abstract redrain(): void;
  /** Drops WAL entries never applied (and never acknowledged) and re-reads the counters. */
  abstract dropUnapplied(): void;

  /** The WAL's last index: past `index` are staged entries (cluster mode). */
  get lastIndex(): number {
    return Number(this.wal.lastIndex);
  }

  /** Holds the drain (see `holds`); the returned function lets go, once. */
  hold(): () => void {
    this.holds++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.holds--;
    };
  }

  track(drain: Promise<void>): void {
    this.running.add(drain);
    void drain.finally(() => this.running.delete(drain));
  }

  /** Answers one write, and counts it. */
  finish(p: Pending, r: WriteResult): void {
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
  executeBatch(batch: Pending[], results: WriteResult[], records: WalRecord[], entries: WalEntry[], after = this.index): number {
    let index = after;
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i];
      try {
        const { response, entry, physical } = this.execute(p, index + 1);
        if (physical) p.done = this.afterRemoval(p.done);
        if (entry) {
          records.push({ index: BigInt(++index), payload: encodeWalEntry(entry) });
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
  commitFailedAfterWal(err: unknown, records: WalRecord[]): never {
    this.log.fatal({ err, first: records[0].index, last: records[records.length - 1].index }, 'LMDB commit failed after the WAL append; restarting storage to replay the batch');
    process.exit(1);
  }

  /** Nothing of this batch was committed (LMDB aborted, WAL append rolled back). */
  failBatch(batch: Pending[], err: unknown): void {
    // Every caller learns its write failed, and the counters are re-read.
    this.executor.reload();
    this.lessor.reload();
    this.log.error({ err, batch: batch.length }, 'write batch failed; nothing of it was applied');
    const message = `kvs: write failed in storage: ${(err as Error).message}`;
    for (const p of batch) this.finish(p, { code: status.UNAVAILABLE, message });
  }

  /** Stage tracing: the batch through `index` is committed to LMDB (and which revision it ends at). */
  stampCommitted(batch: Pending[], index: number, revision = this.executor.revision): void {
    const trace = stages!;
    trace.stamp(Stage.STORAGE_COMMITTED, index);
    trace.stamp(Stage.STORAGE_RECEIVE, index, microsFromPerformance(batch[0].arrived));
    trace.link(index, revision);
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
