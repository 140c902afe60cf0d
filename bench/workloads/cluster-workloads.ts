// The cluster workloads: a three-member kvs cluster against a three-member etcd 3.4 cluster
// (bench/cluster-servers.ts), both at their default flags.
//   cluster-seq-put, cluster-par-put:   seq-put / par-put with the clients on the leader
//   cluster-{seq,par}-put-via-follower: the same through a follower (which forwards the writes)
//   cluster-seq-get, cluster-par-get:   seq-get / par-get (linearizable) on a follower
//   cluster-failover:                   kill -9 of the leader while one client writes through a
//                                       follower; the time until writes are acknowledged again
import { performance } from 'node:perf_hooks';
import { decode } from '../../shared/proto/index.js';
import { KvClient } from '../../testkit/kv-client.js';
import { key, value } from '../keys.js';
import { median } from '../stats.js';
import { CLUSTER_NODES, baselineMetrics, type ClusterControl, type ClusterRole, type MeasureTarget, type Workload } from '../workload.js';
import { parGet, seqGet } from './get.js';
import { parPut, seqPut } from './put.js';

function onCluster(base: Workload, name: string, role: ClusterRole): Workload {
  return {
    ...base,
    name,
    summary: `${base.summary}; ${CLUSTER_NODES}-member cluster, clients on ${role === 'leader' ? 'the leader' : 'a follower'}`,
    cluster: role,
    baseline: base.name,
    metrics: baselineMetrics(base.name),
  };
}

export const clusterSeqPut = onCluster(seqPut, 'cluster-seq-put', 'leader');
export const clusterParPut = onCluster(parPut, 'cluster-par-put', 'leader');
export const clusterSeqPutViaFollower = onCluster(seqPut, 'cluster-seq-put-via-follower', 'follower');
export const clusterParPutViaFollower = onCluster(parPut, 'cluster-par-put-via-follower', 'follower');
export const clusterSeqGet = onCluster(seqGet, 'cluster-seq-get', 'follower');
export const clusterParGet = onCluster(parGet, 'cluster-par-get', 'follower');

// ------------------------------------------------------------------ failover

/** The writer sends a Put every PUT_INTERVAL_MS, not waiting for earlier ones (open loop). */
export const PUT_INTERVAL_MS = 10;
/** Each Put's deadline: at most PUT_DEADLINE_MS / PUT_INTERVAL_MS are in flight. */
const PUT_DEADLINE_MS = 1000;
/** Before the kill, writes must have been acknowledged without a failure for this long. */
const STEADY_MS = 1000;
/** A failover that takes longer fails the trial. */
const RECOVERY_TIMEOUT_MS = 120_000;

/**
 * An open-loop writer through one member: a Put of a new key every PUT_INTERVAL_MS, each
 * with its own deadline; records when each started and ended and whether it was acknowledged.
 */
class FailoverWriter {
  private readonly kv: KvClient;
  private readonly value = value();
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private n = 0;
  /** Every finished Put (performance.now() times; `error`: its message when it failed). */
  readonly done: { start: number; end: number; error?: string }[] = [];
  /** performance.now() of the latest failure, and of the first success after it. */
  private lastFailure = -Infinity;
  private okSince = Infinity;
  private watch: { from: number; resolve(t: number): void } | undefined;

  constructor(readonly endpoint: string, private readonly area: string) {
    this.kv = new KvClient(endpoint);
  }

  async start(): Promise<void> {
    await this.kv.connect();
    this.timer = setInterval(() => this.one(), PUT_INTERVAL_MS);
  }

  private one(): void {
    const start = performance.now();
    const p = this.kv.put(key(this.area, this.n++), this.value, PUT_DEADLINE_MS).then(
      () => {
        const end = performance.now();
        this.done.push({ start, end });
        if (start > this.lastFailure && this.okSince === Infinity) this.okSince = start;
        const w = this.watch;
        if (w && start >= w.from) {
          this.watch = undefined;
          w.resolve(end);
        }
      },
      (err: Error) => {
        this.done.push({ start, end: performance.now(), error: err.message.replace(/\d+\.\d+\.\d+\.\d+:\d+/g, 'ADDR').slice(0, 120) });
        this.lastFailure = Math.max(this.lastFailure, start);
        this.okSince = Infinity;
      },
    );
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }

  /** Resolves once Puts have been acknowledged for `ms` without a failure in between. */
  async steady(ms: number, timeoutMs = 60_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!(performance.now() - this.okSince >= ms)) {
      if (performance.now() > deadline) throw new Error(`writes through ${this.endpoint} did not succeed steadily for ${ms} ms within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Resolves with the performance.now() of the first acknowledgment of a Put started at or after `from`. */
  acknowledgedFrom(from: number, timeoutMs: number): Promise<number> {
    const ends = this.done.filter((d) => !d.error && d.start >= from).map((d) => d.end);
    if (ends.length) return Promise.resolve(Math.min(...ends));
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this.watch = undefined;
        reject(new Error(`no write through ${this.endpoint} acknowledged within ${timeoutMs / 1000} s of the kill`));
      }, timeoutMs);
      this.watch = {
        from,
        resolve: (at) => {
          clearTimeout(t);
          resolve(at);
        },
      };
    });
  }

  /** Failed Puts started in [from, until), by message. */
  failures(from: number, until: number): Map<string, number> {
    const out = new Map<string, number>();
    for (const d of this.done) if (d.error && d.start >= from && d.start < until) out.set(d.error, (out.get(d.error) ?? 0) + 1);
    return out;
  }

  /** Stops sending, waits for the Puts in flight (each ends by its deadline), closes. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all([...this.inFlight]);
    this.kv.close();
  }
}

/**
 * One failover: returns the numbers, and a line for the log. Unless it is the last round,
 * the killed member is started again and caught up before it returns.
 */
export async function failoverTrial(target: MeasureTarget, _opts?: unknown, round = { n: 1, of: 2 }): Promise<{ numbers: Record<string, number>; note: string; failed?: string }> {
  const c = target.cluster;
  if (!c) throw new Error('cluster-failover needs a cluster');
  const leader = await c.leader();
  // The client writes through a member that survives: the one after the leader.
  const via = (leader + 1) % c.members.length;
  const writer = new FailoverWriter(c.members[via]!.endpoint, 'failover');
  let killedAt: number;
  let ackAt: number;
  try {
    await writer.start();
    await writer.steady(STEADY_MS);
    killedAt = await c.kill9(leader);
    ackAt = await writer.acknowledgedFrom(killedAt, RECOVERY_TIMEOUT_MS);
  } finally {
    await writer.stop();
  }
  const newLeader = await c.leader();
  if (newLeader === leader) throw new Error(`${c.members[leader]!.name} still leads after its kill`);
  let failed: string | undefined;
  if (round.n < round.of) {
    try {
      await rejoin(c, leader, newLeader);
    } catch (err) {
      failed = (err as Error).message.split('\n')[0];
    }
  }
  const failoverMs = ackAt - killedAt;
  // The Puts sent between the kill and the first acknowledged one: how they failed.
  const failures = writer.failures(killedAt, ackAt);
  const nFailed = [...failures.values()].reduce((a, b) => a + b, 0);
  const how = [...failures].map(([m, k]) => `${k}× ${m}`).join('; ');
  return {
    numbers: { failoverMs, failedWrites: nFailed },
    note:
      `${(failoverMs / 1000).toFixed(2)} s: ${c.members[leader]!.name} killed, writes through ${c.members[via]!.name}, ` +
      `${c.members[newLeader]!.name} leads; ${nFailed} of the Puts sent before the first acknowledged one failed${how ? ` (${how})` : ''}`,
    ...(failed ? { failed: `after the failover: ${failed}` } : {}),
  };
}

/**
 * Back to full strength for the next round: the killed member started again on its own data
 * dir, following the new leader, and caught up (a linearizable read through it of a key
 * written through the leader now); then every member must hold the same history through that
 * write (Maintenance.HashKV at its revision).
 */
async function rejoin(c: ClusterControl, member: number, leader: number): Promise<void> {
  await c.restart(member);
  await c.leader();
  const clients = c.members.map((m) => new KvClient(m.endpoint));
  try {
    const put = decode('etcdserverpb.PutResponse', await clients[leader]!.put(key('failover-probe', 0), value(), 10_000));
    const revision = Number(put.header?.revision ?? 0);
    const deadline = performance.now() + 60_000;
    for (;;) {
      try {
        await clients[member]!.range(key('failover-probe', 0), {}, 5000);
        break;
      } catch (err) {
        if (performance.now() > deadline) throw new Error(`${c.members[member]!.name} does not serve linearizable reads 60 s after its restart: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // Each member has applied the probe (a linearizable read through it), then its hash.
    const hashes: number[] = [];
    for (const kv of clients) {
      await kv.range(key('failover-probe', 0), {}, 10_000);
      hashes.push((await kv.hashKv(revision)).hash);
    }
    if (new Set(hashes).size > 1) {
      throw new Error(`the members' histories differ after the rejoin: HashKV at revision ${revision}: ${c.members.map((m, i) => `${m.name} ${hashes[i]}`).join(', ')}`);
    }
  } finally {
    for (const kv of clients) kv.close();
  }
}

const seconds = (v: number) => `${(v / 1000).toFixed(2)} s`;

export const clusterFailover: Workload = {
  name: 'cluster-failover',
  summary:
    `kill -9 of the leader (kvs: its process group) while 1 client sends a Put every ${PUT_INTERVAL_MS} ms through a follower; ` +
    'time from the kill to the first acknowledged Put sent after it',
  clients: 0,
  preload: false,
  cluster: 'follower',
  trial: failoverTrial,
  summarize(trials) {
    const ms = trials.map((t) => t.failoverMs!);
    const out: Record<string, number> = {
      failoverMs: median(ms),
      failoverMinMs: Math.min(...ms),
      failoverMaxMs: Math.max(...ms),
      failoverRounds: ms.length,
      failedWrites: median(trials.map((t) => t.failedWrites!)),
    };
    ms.forEach((v, i) => (out[`failoverRound${i + 1}Ms`] = v));
    return out;
  },
  metrics: [
    { key: 'failoverMs', label: 'failover', format: (v) => `failover ${seconds(v)} (median)`, better: 'lower' },
    { key: 'failoverMinMs', label: 'min', format: (v) => `min ${seconds(v)}`, better: 'lower' },
    { key: 'failoverMaxMs', label: 'max', format: (v) => `max ${seconds(v)}`, better: 'lower' },
  ],
};
