// Runs a compaction's physical removal (mvcc/compaction.ts) in bounded steps between write
// batches: each step is one short LMDB write transaction, scheduled with setImmediate, so a
// write that arrives meanwhile is drained after at most one step. The engine kicks it after
// every committed batch (a Compact may have moved the target) and once at open (a removal
// interrupted by a crash, or a Compact just replayed from the WAL, resumes).
import { performance } from 'node:perf_hooks';
import { status } from '@grpc/grpc-js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { META, readMeta } from '../../shared/mvcc/schema.js';
import type { Logger } from '../../shared/log.js';
import { compactStep, compactionPending } from './mvcc/compaction.js';

/** After a failed step (e.g. a full disk), the next try waits this long. */
const RETRY_MS = 1000;

export class CompactionSteps {
  private scheduled = false;
  private stopped = false;
  private started = 0;
  private steps = 0;
  private waiters: ((ok: boolean) => void)[] = [];

  /** `paused`: no step now (a batch is between execution and apply); the engine kicks again after it. */
  constructor(private readonly db: MvccDb, private readonly log: Logger, private readonly paused: () => boolean) {}

  /** At open: a removal interrupted by a stop or crash, or a Compact just replayed from the WAL, continues. */
  resume(): void {
    if (!compactionPending(this.db)) return;
    const target = readMeta(this.db, META.compactRevision);
    const cursor = this.db.meta.get(META.compactCursor) as [number, number] | undefined;
    const from = cursor ? cursor[0] : readMeta(this.db, META.compactedThrough) + 1;
    this.log.info({ revision: target, from }, `compaction: resuming the removal of history compacted to revision ${target}, at revision ${from}`);
    this.kick();
  }

  /**
   * Schedules the next step if a removal is pending. After each batch the engine passes
   * `pending` as read inside the batch's write transaction: a read outside one renews lmdb-js's
   * shared read snapshot, which lmdb-js releases with a setTimeout(0), so a storage process that
   * then sleeps (a leader waiting for its followers, a follower for the next batch) is woken
   * once more per batch for nothing (docs/perf/wake-ups.md, "lmdb-js's read-snapshot timer").
   */
  kick(pending?: boolean): void {
    if (this.scheduled || this.stopped || !(pending ?? compactionPending(this.db))) return;
    if (!this.started) {
      this.started = performance.now();
      this.steps = 0;
    }
    this.scheduled = true;
    setImmediate(this.step);
  }

  /**
   * A removal is under way (kicked, not finished). Its steps run only between batches, so a
   * cluster's leader keeps one batch in flight meanwhile instead of two (Engine.depth).
   */
  get removing(): boolean {
    return this.started !== 0;
  }

  /** Calls `done(true)` once the history through the compact revision is removed (Compact with physical=true). */
  whenRemoved(done: (ok: boolean) => void): void {
    if (!compactionPending(this.db)) return done(true);
    if (this.stopped) return done(false);
    this.waiters.push(done);
    this.kick();
  }

  /** Stops stepping (storage is closing); the removal resumes at the next start. */
  stop(): void {
    this.stopped = true;
    for (const w of this.waiters.splice(0)) w(false);
  }

  private step = (): void => {
    this.scheduled = false;
    if (this.stopped || this.paused()) return;
    let done = false;
    try {
      this.db.env.transactionSync(() => {
        done = compactStep(this.db);
      });
    } catch (err) {
      this.log.error({ err }, `compaction: removing compacted history failed; retrying in ${RETRY_MS} ms`);
      this.scheduled = true;
      setTimeout(() => this.step(), RETRY_MS).unref();
      return;
    }
    this.steps++;
    if (!done) return this.kick();
    const revision = readMeta(this.db, META.compactedThrough);
    this.log.info({ revision, steps: this.steps, ms: Math.round(performance.now() - this.started) }, `compaction: history removed through revision ${revision}`);
    this.started = 0;
    for (const w of this.waiters.splice(0)) w(true);
  };
}

/** The answer to a physical Compact whose removal did not finish because storage stopped. */
export const REMOVAL_STOPPED = {
  code: status.UNAVAILABLE,
  message: 'kvs: storage stopped before the compacted history was removed; the removal resumes when it starts again',
};
