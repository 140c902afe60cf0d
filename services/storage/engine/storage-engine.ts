// The Engine (../engine.ts): takes writes into the queue, hands each batch to the drain of this
// node's mode, and changes roles when the peer agent says so. The modes' work is in
// local-drain.ts, leader-pipeline.ts and follower-replica.ts; what they share in core.ts.
import { status } from '@grpc/grpc-js';
import { Errors } from '../../../shared/errors.js';
import * as M from '../../../shared/metrics.js';
import type { WalRecord } from '../../../shared/wal/frame.js';
import type { Done, Engine } from '../engine.js';
import { EngineCore, KIND_OF_OP, type Pending } from './core.js';
import { drainLocal } from './local-drain.js';
import { LeaderPipeline } from './leader-pipeline.js';
import { FollowerReplica } from './follower-replica.js';

export class StorageEngine extends EngineCore implements Engine {
  private scheduled = false;
  /** Single node with --wal-sync-upload, or a cluster's leader. */
  private readonly pipeline = new LeaderPipeline(this);
  /** A cluster's follower (and a new leader's staged entries). */
  private readonly replica = new FollowerReplica(this);

  /** The current revision as readers see it: not that of a batch still being uploaded. */
  get revision(): number {
    return this.pipeline.revision();
  }

  get appliedIndex(): number {
    return this.index;
  }

  protected inFlight(): number {
    // Called by compaction steps, which may run before the field is set (the core's constructor).
    return this.pipeline?.flights.length ?? 0;
  }

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
    if (this.holds || this.pipeline.full()) return;
    const batch: Pending[] = this.queue;
    this.queue = [];
    if (batch.length === 0) return;
    const refused = this.space.check();
    if (refused) {
      for (const p of batch) this.finish(p, { code: refused.code, message: refused.message });
      return;
    }
    M.writeBatchSize.observe(batch.length);
    if (this.role === 'leader' && this.replicate) this.track(this.pipeline.drain(batch, this.replicate));
    else if (this.opts.upload) this.track(this.pipeline.drain(batch, this.opts.upload));
    else drainLocal(this, batch);
  };

  redrain(): void {
    if (this.queue.length && !this.scheduled) {
      this.scheduled = true;
      setImmediate(this.drain);
    }
  }

  // ---- cluster mode (driven by services/storage/peer-attach.ts) -----------------------------

  /**
   * Becomes leader: every staged entry is applied (it may have been acknowledged by the
   * previous leader), then client writes are taken at this term. With staged entries and less
   * than the free-space floor free it throws FreeSpaceError and stays as it was (applying them
   * through the memory map could SIGBUS the process): peer-attach.ts then detaches, which ends
   * the peer agent's term.
   */
  becomeLeader(term: number): void {
    if (this.lastIndex > this.index) {
      const refused = this.space.check();
      if (refused) throw refused;
    }
    this.identity.raftTerm = term;
    this.replica.applyThrough(this.lastIndex);
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
  dropUnapplied(): void {
    this.replica.clear();
    const dropped = this.wal.truncateAfter(BigInt(this.index));
    this.executor.reload();
    this.lessor.reload();
    if (dropped) this.log.info({ dropped, appliedIndex: this.index }, 'dropped WAL entries that were never committed');
  }

  appendReplicated(records: WalRecord[], commitThrough?: number): void {
    this.replica.append(records, commitThrough);
  }

  applyReplicated(commitThrough: number): void {
    this.replica.apply(commitThrough);
  }

  // ---- upkeep and shutdown -------------------------------------------------------------------

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
