// Helpers of the fencing tests (fencing-*.test.ts): an etcd client that sends every call once
// (so that what a test sees is what the node answered, when it answered), and a watcher of the
// cluster's leader lock that timestamps every change on the test's monotonic clock.
import { Etcd3 } from 'etcd3';
import { noop } from 'cockatiel';
import { openObjectStore } from '../shared/objectstore/index.js';
import { LEADER_LOCK } from '../shared/objectstore/layout.js';
import type { ObjectStore } from '../shared/objectstore/store.js';
import { onCleanup, type Ctx, type ObjectStoreSpec } from '../testkit/harness.js';

/** An etcd3 client of one node without retries or circuit breaker (etcd3's defaults retry UNAVAILABLE). */
export function onceClient(t: Ctx, endpoint: string): Etcd3 {
  const c = new Etcd3({
    hosts: `http://${endpoint}`,
    faultHandling: { host: () => noop, global: noop },
    grpcOptions: { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 500 },
  });
  onCleanup(t, () => c.close());
  return c;
}

/** A deadline for one call, in ms from now. */
export const within = (ms: number) => ({ deadline: Date.now() + ms });

/** etcd's retryable "no leader" family, as kvs sends it (UNAVAILABLE). */
export const NO_LEADER = /etcdserver: (no leader|leader changed)/;

export interface LockVersion {
  etag: string;
  nodeId: string;
  term: number;
  /** When the watcher first saw this version (performance.now() of the test process). */
  seenAt: number;
}

/**
 * Reads the leader lock every `everyMs` and keeps each version it saw. A version is seen at most
 * `everyMs` (plus one read) after it was written: the slack a timing assertion allows.
 */
export class LockWatch {
  readonly versions: LockVersion[] = [];
  private stopped = false;
  private readonly loop: Promise<void>;

  private constructor(
    private readonly store: ObjectStore,
    readonly everyMs: number,
  ) {
    this.loop = this.run();
  }

  static async start(t: Ctx, spec: ObjectStoreSpec, everyMs = 25): Promise<LockWatch> {
    const w = new LockWatch(await openObjectStore(spec), everyMs);
    onCleanup(t, () => w.stop());
    await w.next(() => true, 10_000);
    return w;
  }

  get current(): LockVersion {
    return this.versions[this.versions.length - 1]!;
  }

  /** Resolves with the first version (from now on, or already seen) that satisfies `ok`. */
  async next(ok: (v: LockVersion) => boolean, deadlineMs: number, since = 0): Promise<LockVersion> {
    const deadline = performance.now() + deadlineMs;
    for (;;) {
      const v = this.versions.find((x, i) => i >= since && ok(x));
      if (v) return v;
      if (performance.now() > deadline) throw new Error(`no such lock version within ${deadlineMs} ms; seen: ${JSON.stringify(this.versions.slice(-5))}`);
      await new Promise((r) => setTimeout(r, this.everyMs));
    }
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.loop;
    this.store.close();
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const got = await this.store.get(LEADER_LOCK).catch(() => undefined);
      if (got && got.etag !== this.versions[this.versions.length - 1]?.etag) {
        const r = JSON.parse(got.body.toString('utf8')) as { nodeId: string; term: number };
        this.versions.push({ etag: got.etag, nodeId: r.nodeId, term: r.term, seenAt: performance.now() });
      }
      await new Promise((r) => setTimeout(r, this.everyMs));
    }
  }
}
