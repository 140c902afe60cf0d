// One system's measurements of one workload, accumulated over alternating rounds (kvs, etcd,
// kvs, etcd, ...) so that a change in the machine's background load hits both alike.
import { KvClient } from '../testkit/kv-client.js';
import type { LoadGenerator } from './load.js';
import { cpuSeconds, cpuSecondsOf, processName } from '../testkit/proc.js';
import type { SystemResult } from './report.js';
import type { Server } from './servers.js';
import { merge, summarize } from './stats.js';
import type { ClusterControl, MeasureTarget, Workload, WorkloadOptions } from './workload.js';

/** What a workload runs against: a server (or a cluster) started here, or remote endpoints. */
export interface Target {
  name: string;
  endpoints: string[];
  server?: Server;
  /** Where the preload goes, when not to endpoints[0] (a cluster: its leader). */
  preloadEndpoint?: string;
  cluster?: ClusterControl;
}

/** Lead time of the -auth workloads' rounds: connecting and 16 logins before the warm-up. */
const AUTH_LEAD_MS = 2500;

interface CpuSample {
  server: Map<number, number> | null;
  client: number;
}

export class Tally {
  private readonly latencies: Float64Array[] = [];
  private bytes = 0;
  private errors = 0;
  private firstError: string | undefined;
  private relogins = 0;
  private durationS = 0;
  private clientCpu = 0;
  private serverCpu: Record<string, number> | null = null;
  /** WAL fsyncs in the measured windows (fsync workloads on servers started here); null once a scrape failed. */
  private fsyncs: number | null;
  private readonly trials: Record<string, number>[] = [];
  /** A trial failed: the target may be left broken, so no more trials run on it. */
  broken = false;

  constructor(
    readonly target: Target,
    readonly workload: Workload,
    private readonly opts: WorkloadOptions,
  ) {
    this.fsyncs = workload.fsyncs && target.server ? 0 : null;
  }

  /** One timed round: warm-up, then `durationMs` measured. Returns a one-line summary. */
  async round(load: LoadGenerator, warmupMs: number, durationMs: number): Promise<string> {
    const { target: t, workload: w } = this;
    const cpu: Partial<Record<'start' | 'end', CpuSample>> = {};
    const fsyncs: Partial<Record<'start' | 'end', number | null>> = {};
    const server = this.fsyncs !== null ? t.server : undefined;
    // -auth workloads: 16 logins (a bcrypt check each on the server) before the warm-up.
    const timing = { warmupMs, durationMs, ...(w.auth ? { leadMs: AUTH_LEAD_MS } : {}) };
    const sampleCpu = (which: 'start' | 'end') => {
      const server = t.server ? new Map(t.server.pids().map((pid) => [pid, cpuSecondsOf(pid)])) : null;
      cpu[which] = { server, client: cpuSeconds(load.pids()) };
    };
    // The fsync counters are scraped outside the CPU window (before its start, after its end),
    // so that the servers' work answering the scrape is not counted as the workload's.
    const out = await load.run(w.name, t.endpoints, w.clients, this.opts, timing, async (which) => {
      if (!server) return sampleCpu(which);
      if (which === 'start') fsyncs.start = await server.fsyncs();
      sampleCpu(which);
      if (which === 'end') fsyncs.end = await server.fsyncs();
    });
    const lat = out.results.map((r) => r.latencies);
    this.latencies.push(...lat);
    const ops = lat.reduce((n, l) => n + l.length, 0);
    const seconds = (out.endAt - out.measureAt) / 1000;
    this.durationS += seconds;
    this.bytes += out.results.reduce((n, r) => n + r.bytes, 0);
    const errors = out.results.reduce((n, r) => n + r.errors, 0);
    this.errors += errors;
    this.firstError ??= out.results.find((r) => r.firstError)?.firstError;
    const relogins = out.results.reduce((n, r) => n + (r.relogins ?? 0), 0);
    this.relogins += relogins;
    if (this.fsyncs !== null) {
      const { start: f0, end: f1 } = fsyncs;
      this.fsyncs = f0 != null && f1 != null && f1 >= f0 ? this.fsyncs + (f1 - f0) : null;
    }
    const { start, end } = cpu;
    if (start && end) {
      this.clientCpu += end.client - start.client;
      if (start.server && end.server) {
        this.serverCpu ??= {};
        // Per process name (a process that appeared during the window counts from 0).
        for (const [pid, s1] of end.server) {
          const name = processName(pid);
          this.serverCpu[name] = (this.serverCpu[name] ?? 0) + s1 - (start.server.get(pid) ?? 0);
        }
      }
    }
    return (
      `${Math.round(ops / seconds).toLocaleString('en-US')} ops/s` +
      (relogins ? `, ${relogins} logins again after an invalid token` : '') +
      (errors ? `, ${errors} errors (${this.firstError})` : '')
    );
  }

  /** One trial of a workload without a timed phase (cluster-failover). Returns a one-line summary. */
  async trial(round: { n: number; of: number }): Promise<string> {
    const kv = new KvClient(this.target.endpoints[0]!);
    try {
      const { numbers, note, failed } = await this.workload.trial!(this.measureTarget(kv), this.opts, round);
      this.trials.push(numbers);
      if (failed) {
        this.broken = true;
        this.errors++;
        this.firstError ??= failed;
        return `${note}; FAILED: ${failed}`;
      }
      return note;
    } catch (err) {
      this.broken = true;
      this.errors++;
      const msg = (err as Error).message.split('\n')[0]!;
      this.firstError ??= msg;
      return `failed: ${msg}`;
    } finally {
      kv.close();
    }
  }

  private measureTarget(kv: KvClient): MeasureTarget {
    const { server, cluster } = this.target;
    return {
      system: this.target.name,
      kv,
      ...(server ? { disk: () => server.disk(), rss: () => server.rss(), pss: () => server.pss() } : {}),
      ...(cluster ? { cluster } : {}),
    };
  }

  /** The result over all rounds, with the workload's own numbers (`measure`). */
  async finish(): Promise<SystemResult> {
    const { target: t, workload: w } = this;
    const timed = w.clients > 0;
    const lat = merge(this.latencies);
    const result: SystemResult = {
      system: t.name,
      clients: w.clients,
      ops: lat.length,
      durationS: this.durationS,
      opsPerSec: this.durationS > 0 ? lat.length / this.durationS : 0,
      latencyMs: timed ? summarize(lat) : null,
      bytes: this.bytes,
      errors: this.errors,
      ...(this.firstError ? { firstError: this.firstError } : {}),
      ...(this.relogins ? { relogins: this.relogins } : {}),
      cpuSeconds: {
        server: this.serverCpu ? Object.values(this.serverCpu).reduce((a, b) => a + b, 0) : null,
        client: this.clientCpu,
        ...(this.serverCpu ? { byServerProcess: this.serverCpu } : {}),
      },
      rssBytes: null,
      fsyncs: this.fsyncs,
      fsyncsPerSec: this.fsyncs !== null && this.durationS > 0 ? this.fsyncs / this.durationS : null,
      opsPerFsync: this.fsyncs ? lat.length / this.fsyncs : null,
      metrics: {},
    };
    if (w.summarize && this.trials.length) result.metrics = w.summarize(this.trials);
    if (w.measure) {
      const kv = new KvClient(t.endpoints[0]!);
      try {
        const target = this.measureTarget(kv);
        Object.assign(result.metrics, await w.measure(target, { ops: result.ops, bytes: result.bytes, durationS: result.durationS }, this.opts));
      } finally {
        kv.close();
      }
    }
    if (t.server) result.rssBytes = t.server.rss();
    return result;
  }
}
