// A test-only failpoint, for the cluster tests (integration/cluster.test.ts, the differential
// suites with KVS_DIFFERENTIAL_CLUSTER): with KVS_FAILPOINT_COMMIT_DELAY_MS=N, a follower's peer
// agent hands each commit position the leader sends it (in a batch, a commit notice or a
// heartbeat) to its storage N ms late, as if every commit notice took that long to arrive. The
// entries themselves are appended and ACKed at once, so the leader acknowledges writes as soon
// as before while its followers apply them N ms later: the window in which a follower's own
// view lags a write the leader acknowledged (what a linearizable read there must wait out) is
// widened from a fraction of a millisecond to N ms. Without the variable the peer agent never
// builds this (main.ts reads it once, follower.ts only when it is set).
export const COMMIT_DELAY_ENV = 'KVS_FAILPOINT_COMMIT_DELAY_MS';

/** The delay the failpoint asks for, 0 when unset. */
export function commitDelayMs(env: NodeJS.ProcessEnv = process.env): number {
  const v = env[COMMIT_DELAY_ENV];
  if (v === undefined || v === '') return 0;
  const ms = Number(v);
  if (!Number.isFinite(ms) || ms < 0) throw new Error(`${COMMIT_DELAY_ENV}=${v}: expected a number of milliseconds`);
  return ms;
}

/**
 * One follower stream's commit positions, each released `ms` after it arrived (in arrival
 * order: timers of one delay fire in the order they were set).
 */
export class DelayedCommits {
  private released = 0;
  private latest = 0;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(
    private readonly ms: number,
    /** Hands a released position to storage (as a commit notice alone). */
    private readonly release: (commitThrough: number) => void,
  ) {}

  /** The leader says `commitThrough` is committed: returns what storage may apply now. */
  hold(commitThrough: number): number {
    if (commitThrough > this.latest) {
      this.latest = commitThrough;
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        if (commitThrough <= this.released) return;
        this.released = commitThrough;
        this.release(commitThrough);
      }, this.ms);
      this.timers.add(timer);
    }
    return this.released;
  }

  /** The stream ended: what was not released yet is dropped (the next stream says it again). */
  cancel(): void {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }
}
