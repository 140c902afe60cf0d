// What a workload is. A workload is one small module in bench/workloads/ (listed in
// bench/workloads/index.ts): its `op` runs in the load-generator processes, once per client,
// and its optional `measure` runs in the main process after the timed phase.
import { decode } from '../shared/proto/index.js';
import type { KvClient } from '../testkit/kv-client.js';

/** Clients of the parallel workloads: 16, each with its own gRPC connection. */
export const PARALLEL = 16;

export interface WorkloadOptions {
  /** Keys of the preloaded data set (and the key space the put workloads write into). */
  preloadKeys: number;
  valueBytes: number;
  /** A smoke run (--quick): shorter waits. */
  quick: boolean;
}

export interface OpContext {
  kv: KvClient;
  /** This client's number, 0 ≤ client < clients. */
  client: number;
  clients: number;
  opts: WorkloadOptions;
  /** A random value of opts.valueBytes, this client's own. */
  value: Buffer;
}

/**
 * One request; resolves with the encoded response (its length counts as bytes received).
 * `close`, if set, releases what the op opened (e.g. watch streams) after the timed phase.
 */
export type Op = (() => Promise<Buffer>) & { close?(): void };

/** What the timed phase measured, as a workload's `measure` sees it. */
export interface RunSummary {
  ops: number;
  bytes: number;
  durationS: number;
}

/** The server a workload ran against, for `measure` (main process). */
export interface MeasureTarget {
  system: string;
  kv: KvClient;
  /** On-disk bytes of the database and of the WAL, when the server runs here. */
  disk?(): Promise<{ db: number; wal: number; dbApparent: number; walApparent: number }>;
  /** Resident memory of all the server's processes, when the server runs here. */
  rss?(): number;
  /** The same as proportional set size (pages shared between its processes counted once). */
  pss?(): number;
  /** The cluster, for the cluster workloads (bench/cluster-servers.ts). */
  cluster?: ClusterControl;
}

/** Members of the cluster workloads' clusters (kvs nodes, etcd members). */
export const CLUSTER_NODES = 3;

/** Which member of a cluster the clients talk to: the leader, or a follower. */
export type ClusterRole = 'leader' | 'follower';

/** A cluster started for a workload, as a `trial` sees it (main process). */
export interface ClusterControl {
  /** The members in start order (n1, n2, n3). */
  readonly members: readonly { name: string; endpoint: string }[];
  /** Waits until every running member names the same leader, one of them; returns its index. */
  leader(deadlineMs?: number): Promise<number>;
  /**
   * kill -9 of member i (kvs: the node's whole process group, supervisor and components; etcd:
   * the member process). Resolves once it is gone, with performance.now() just before the signal.
   */
  kill9(i: number): Promise<number>;
  /** Starts member i again on its own data dir, ports and flags; resolves once it answers Status. */
  restart(i: number): Promise<void>;
}

/** A workload-specific number shown in the table's last column and compared between systems. */
export interface Metric {
  key: string;
  label: string;
  /** Formats the value for the table. */
  format(v: number): string;
  /** For the ratio: higher is better (kvs/etcd) or lower is better (etcd/kvs). */
  better: 'higher' | 'lower';
}

/**
 * The op of a workload that the Go load generator (`--client go`, bench/go/src/kvsbench)
 * implements, with the same semantics as the workload's `op`.
 */
export type GoOp = 'put' | 'get' | 'mixed' | 'range';

export interface Workload {
  name: string;
  summary: string;
  /** Concurrent clients in the timed phase; 0 = no timed phase (only `measure`). */
  clients: number;
  /** Needs the data set (opts.preloadKeys keys under kvs-bench/data/) loaded first. */
  preload: boolean;
  /** Preloads this many times --preload keys instead (size-10x: 1,000,000 by default). */
  preloadScale?: number;
  /** Writes the data set this many times over, so each key has as many changes (default 1). */
  preloadRevisions?: number;
  /** Builds one client's operation (load-generator process). */
  op?(ctx: OpContext): Op;
  /** The same op in the Go load generator; without it, the workload does not run with `--client go`. */
  go?: GoOp;
  /**
   * Without a timed phase: one trial (e.g. a failover), run `--failover-rounds` times per
   * system, the systems alternating (kvs, etcd, kvs, ...), in the main process. Returns its
   * numbers and a line for the log, and `failed` when the trial measured but left the target
   * unfit for another round (it then counts as an error, and no more trials run on it);
   * `summarize` folds all trials' numbers into the result's metrics.
   */
  trial?(target: MeasureTarget, opts: WorkloadOptions, round: { n: number; of: number }): Promise<{ numbers: Record<string, number>; note: string; failed?: string }>;
  summarize?(trials: Record<string, number>[]): Record<string, number>;
  /**
   * A write workload: the servers' WAL fsyncs are read from their metrics before and after each
   * timed window (SystemResult's fsyncs, fsyncsPerSec, opsPerFsync; null for the others).
   */
  fsyncs?: boolean;
  /** Extra numbers after the timed phase (main process). */
  measure?(target: MeasureTarget, run: RunSummary, opts: WorkloadOptions): Promise<Record<string, number>>;
  /** Which of `measure`'s numbers the table shows. */
  metrics?: Metric[];
  /**
   * kvs runs with an object store and `--wal-sync-upload` (each batch uploaded before it is
   * acknowledged): a local directory, or Ceph RGW (`--rgw`). etcd runs as always.
   */
  objectStore?: ObjectStoreKind;
  /**
   * Runs with auth enabled (bench/auth.ts): set up after the preload, each client logs in as
   * `bench` before the timed phase and sends its token with every request. `baseline` names
   * the same workload without auth; when both ran, the table compares with it.
   */
  auth?: { baseline: string };
  /**
   * Runs against a cluster of CLUSTER_NODES members of each system (bench/cluster-servers.ts) instead
   * of one server; the clients talk to the leader or to a follower; the preload goes through
   * the leader. Server CPU and memory are the whole cluster's.
   */
  cluster?: ClusterRole;
  /**
   * The same workload on one server (cluster workloads): when both ran, each system's row shows
   * its ops/s and server CPU per op relative to the baseline's (as the -auth workloads do).
   */
  baseline?: string;
}

/** The `other` column's comparison with a baseline workload (main.ts fills the numbers in). */
export function baselineMetrics(b: string): Metric[] {
  return [
    { key: 'opsVsBaseline', label: `ops/s vs ${b}`, format: (v) => `ops/s ${v.toFixed(2)}× ${b}`, better: 'higher' },
    { key: 'cpuPerOpVsBaseline', label: `CPU/op vs ${b}`, format: (v) => `server CPU/op ${v.toFixed(2)}× ${b}`, better: 'lower' },
  ];
}

export type ObjectStoreKind = 'local' | 'rgw';

/** Throws unless an encoded RangeResponse holds exactly `n` key-values. */
export function expectKvs(res: Buffer, n: number): void {
  const got = (decode('etcdserverpb.RangeResponse', res).kvs ?? []).length;
  if (got !== n) throw new Error(`expected ${n} key-values in the Range response, got ${got}`);
}

/** Wraps an op so that its first response is checked (cheap sanity, not on every call). */
export function checkFirst(op: Op, check: (res: Buffer) => void): Op {
  let checked = false;
  return async () => {
    const res = await op();
    if (!checked) {
      checked = true;
      check(res);
    }
    return res;
  };
}

export const fmt = {
  int: (v: number) => Math.round(v).toLocaleString('en-US'),
  mb: (v: number) => `${(v / 1e6).toFixed(1)} MB`,
};
