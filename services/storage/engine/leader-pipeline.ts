// The drain of a batch that must be somewhere else before it is applied: in the object store
// (a single node with --wal-sync-upload) or on the followers (a cluster's leader). A write
// transaction cannot stay open across that wait, so the batch is executed in a transaction
// that is ABORTED (keeping the responses and WAL entries), appended to the WAL, uploaded or
// sent, and then applied through the replay path in a second transaction. Requests arriving
// meanwhile wait for the next drain.
//
// A leader keeps up to PIPELINE_DEPTH batches in flight: the next batch is executed (on top of
// the entries of those in flight, applied again inside its aborted transaction), written and
// sent while the previous one waits for its ACKs. Batches are applied and answered in order,
// and a batch that fails fails every batch executed after it.
import { status } from '@grpc/grpc-js';
import { ABORT } from 'lmdb';
import type { Span } from '@opentelemetry/api';
import { EtcdError } from '../../../shared/errors.js';
import * as M from '../../../shared/metrics.js';
import { Stage, stages } from '../../../shared/stages.js';
import type { WalEntry } from '../../../shared/wal/entry.js';
import { encodeFrames, type WalRecord } from '../../../shared/wal/frame.js';
import { applyEntry } from '../mvcc/apply.js';
import { compactionPending } from '../mvcc/compaction.js';
import { endWalSpans } from '../wal-spans.js';
import { Op } from '../../../shared/storage/ops.js';
import type { Replicator, Upload, WriteResult } from '../engine.js';
import type { EngineCore, Pending } from './core.js';

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

export class LeaderPipeline {
  /** Batches between their execution and their LMDB apply, oldest first (see the header). */
  readonly flights: Flight[] = [];
  /** The revision LMDB holds while batches are in flight (the executor's runs ahead). */
  appliedRevision = 0;

  constructor(private readonly core: EngineCore) {}

  /** The revision readers see: that of the last applied batch while others are in flight. */
  revision(): number {
    return this.flights.length ? this.appliedRevision : this.core.executor.revision;
  }

  /** No batch may start now: as many are in flight as allowed, or the last one changes auth. */
  full(): boolean {
    if (this.flights.length >= this.depth()) return true;
    return this.flights.length > 0 && this.flights[this.flights.length - 1].barrier;
  }

  /**
   * How many batches may wait for their ACKs at once: one but on a cluster's leader
   * (--write-pipeline), and one there too while compacted history is being removed, whose
   * steps run only between batches.
   */
  depth(): number {
    const c = this.core;
    if (c.role !== 'leader' || !c.replicate || c.compaction.removing) return 1;
    const want = c.opts.writePipeline ?? 1;
    return want === 'auto' ? (c.followersElsewhere ? PIPELINE_DEPTH : 1) : want;
  }

  /**
   * Execute (aborted), append to the WAL, then apply and answer once the batch is in the object
   * store (`Upload`: single node, --wal-sync-upload; it follows the local fsync, as the store must
   * never hold a record the local WAL failed to keep) or may be acknowledged by the cluster
   * (`Replicator`: the followers receive it before the local fsync, and append it meanwhile).
   * On a leader the next batch may start once this one is durable here (see the header).
   */
  async drain(batch: Pending[], out: Upload | Replicator): Promise<void> {
    const c = this.core;
    const results: WriteResult[] = new Array(batch.length);
    const records: WalRecord[] = [];
    const entries: WalEntry[] = [];
    // The batches in flight: this one executes on top of them, and fails if one of them does.
    const prior = this.flights.slice();
    const before = prior[prior.length - 1];
    let index = before ? before.last : c.index;
    let frames: Buffer;
    const revisionBefore = c.executor.revision;
    const replicator = typeof out === 'function' ? undefined : out;
    // The kvs.wal.append spans (tracing on) cover the local append AND the upload: in this mode
    // a batch is appended to the WAL of record once it is in the object store.
    let spans: Span[] | undefined;
    // Nothing else drains until this batch is durable here (or has failed).
    const release = c.hold();
    try {
      c.db.env.transactionSync(() => {
        for (const f of prior) {
          for (let i = 0; i < f.entries.length; i++) applyEntry(c.db, f.entries[i], Number(f.records[i].index));
        }
        index = c.executeBatch(batch, results, records, entries, index);
        return ABORT; // nothing visible to readers before it is in the object store
      });
      frames = encodeFrames(records); // validates sizes before anything is written or sent
    } catch (err) {
      await before?.settled; // the counters are re-read once no batch is in flight
      release();
      c.failBatch(batch, err);
      c.redrain();
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
          for (const p of batch) c.finish(p, { code: e.code ?? status.UNAVAILABLE, message: e.message });
          c.redrain();
          return;
        }
      }
      release();
      c.redrain();
      for (let i = 0; i < batch.length; i++) c.finish(batch[i], results[i]);
      return;
    }
    const first = Number(records[0].index);
    stages?.stamp(Stage.STORAGE_EXECUTED, index);
    if (!before) this.appliedRevision = revisionBefore;
    let settle!: (applied: boolean) => void;
    const settled = new Promise<boolean>((resolve) => (settle = resolve));
    const flight: Flight = {
      last: index, records, entries, revision: c.executor.revision, failed: false, settled, settle,
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
        if (c.walSpans) spans = c.walSpans.begin(batch, records.length);
        c.wal.appendSync(records, frames); // fdatasync
        stages?.stamp(Stage.STORAGE_FSYNCED, index);
      } catch (err) {
        endWalSpans(spans, err);
        this.flights.pop(); // the last one: nothing was executed after it (held)
        replicator?.durable(index, err as Error);
        await acked?.catch(() => undefined); // the peer agent has dropped the batch
        await before?.settled; // the counters are re-read once no batch is in flight
        release();
        settle(false);
        c.failBatch(batch, err);
        c.redrain();
        return;
      }
      replicator?.durable(index);
    }
    // The next batch may execute and be written while this one waits for its ACKs (a leader;
    // a single node's upload allows one batch in flight: depth()).
    release();
    c.redrain();
    try {
      await (acked ?? (out as Upload)(first, index, frames));
      endWalSpans(spans);
    } catch (err) {
      endWalSpans(spans, err);
      if (c.role !== 'single') {
        // Cluster: the batch was not acknowledged (deposed, or stopping). It is dropped from the
        // WAL with every batch after it; if a follower kept them, the next leader's log has them
        // and this node receives them again as a follower. The callers cannot know the outcome.
        await this.dropFrom(flight);
        for (const p of batch) c.finish(p, { code: status.UNAVAILABLE, message: `kvs: the write's outcome is unknown: ${(err as Error).message}` });
        c.redrain();
        return;
      }
      // Storage is stopping. The records are in the local WAL: the next start uploads them,
      // then applies them. The callers cannot know the outcome.
      const message = `kvs: storage stopped before the write reached the object store; its outcome is unknown (${(err as Error).message})`;
      for (const p of batch) c.finish(p, { code: status.UNAVAILABLE, message });
      return;
    }
    // Acknowledged in order, so the batch before it has been applied by now.
    if (before && !(await before.settled)) {
      c.log.fatal({ first, last: index }, 'a batch was acknowledged after one before it failed; restarting storage');
      process.exit(1);
    }
    let compacting = false;
    try {
      c.db.env.transactionSync(() => {
        for (let i = 0; i < entries.length; i++) applyEntry(c.db, entries[i], Number(records[i].index));
        compacting = compactionPending(c.db);
      });
    } catch (err) {
      // The records are durable (WAL and object store) but LMDB refused them: later batches
      // would execute against a state without them. Restart; the replay applies them.
      c.log.fatal({ err, first: records[0].index, last: index }, 'applying an archived batch to LMDB failed; restarting storage to replay it');
      process.exit(1);
    }
    c.index = index;
    this.flights.shift();
    this.appliedRevision = flight.revision;
    settle(true);
    if (stages) c.stampCommitted(batch, index, flight.revision);
    if (c.debug) c.log.debug({ entries: records.length, requests: batch.length, index }, 'batch archived and committed');
    c.feed.publish(records, flight.revision, index);
    for (let i = 0; i < batch.length; i++) c.finish(batch[i], results[i]);
    stages?.stamp(Stage.STORAGE_ANSWERED, index);
    c.compaction.kick(compacting);
    c.redrain();
  }

  /**
   * A leader's batch in flight was not acknowledged: it and every batch executed after it (on
   * top of it) are dropped from the WAL, once the batches before it have ended (they may still
   * be acknowledged). The first of them to fail does the drop; the others just fail.
   */
  private async dropFrom(flight: Flight): Promise<void> {
    const c = this.core;
    const k = this.flights.indexOf(flight);
    if (flight.failed || k < 0) return;
    const doomed = this.flights.slice(k);
    for (const f of doomed) f.failed = true; // one in its turn before the fsync is not written
    const release = c.hold();
    await this.flights[this.flights.indexOf(flight) - 1]?.settled;
    // A batch before it may have failed meanwhile and dropped this one with it.
    if (this.flights.includes(flight)) {
      this.flights.splice(this.flights.indexOf(flight));
      c.dropUnapplied();
    }
    release();
    for (const f of doomed) f.settle(false);
  }
}
