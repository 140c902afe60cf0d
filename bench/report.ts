// Results: their JSON shape, the kvs/etcd ratios, the table, and the docs/benchmarks.md
// section that --write-docs rewrites.
import { readFile, writeFile } from 'node:fs/promises';
import type { Machine } from './machine.js';
import type { Latency } from './stats.js';
import type { Metric } from './workload.js';

export interface SystemResult {
  /** 'kvs', 'etcd', or the endpoints measured with --endpoints. */
  system: string;
  clients: number;
  ops: number;
  durationS: number;
  opsPerSec: number;
  latencyMs: Latency | null;
  /** Response bytes received in the measured window. */
  bytes: number;
  errors: number;
  firstError?: string;
  /** -auth workloads: logins again after a token was refused as invalid (expired). */
  relogins?: number;
  /** CPU seconds in the measured window: the server's processes (null when remote), the load generator's. */
  cpuSeconds: { server: number | null; client: number; byServerProcess?: Record<string, number> };
  /** Resident memory of the server's processes at the end (null when remote). */
  rssBytes: number | null;
  /**
   * Write workloads (Workload.fsyncs) on servers started here: the WAL fsyncs in the measured
   * windows, from the server's metrics (kvs_wal_fsync_duration_seconds_count,
   * etcd_disk_wal_fsync_duration_seconds_count; a cluster: all members' summed), per second, and
   * requests per fsync (null without fsyncs). null for the other workloads, with --endpoints,
   * and when a scrape failed.
   */
  fsyncs: number | null;
  fsyncsPerSec: number | null;
  opsPerFsync: number | null;
  /** Workload-specific numbers (e.g. mbPerSec, bytesPerKey). */
  metrics: Record<string, number>;
}

export interface WorkloadResult {
  workload: string;
  summary: string;
  results: SystemResult[];
  /** kvs versus etcd, > 1 = kvs better (see RATIO_NOTE). */
  ratios?: Record<string, number>;
}

export interface Report {
  date: string;
  mode: 'kvs-vs-etcd' | 'endpoints';
  settings: {
    durationS: number;
    warmupS: number;
    rounds: number;
    /** cluster-failover: kills of the leader per system. */
    failoverRounds?: number;
    /** Members of the cluster workloads' clusters. */
    clusterNodes?: number;
    preloadKeys: number;
    keyBytes: number;
    valueBytes: number;
    parallelClients: number;
    loadProcesses: number;
    client: string;
    /** --kvs-flags: the extra flags every `kvs run` of the run had. */
    kvsFlags?: string[];
    /** --peer-delay: the cluster members' peer ports behind a delaying proxy. */
    peerDelayMs?: number;
    endpoints?: string[];
  };
  machine: Machine;
  workloads: WorkloadResult[];
}

export const RATIO_NOTE =
  'kvs/etcd rows: > 1 means kvs is better. Throughput (ops/s, MB/s) is kvs ÷ etcd; latencies, server CPU per op, bytes per key and memory (RSS, PSS) are etcd ÷ kvs.';

export function ratios(kvs: SystemResult, etcd: SystemResult, metrics: readonly Metric[]): Record<string, number> {
  const out: Record<string, number> = {};
  const div = (a: number | null | undefined, b: number | null | undefined): number | undefined =>
    a != null && b != null && Number.isFinite(a) && Number.isFinite(b) && b > 0 ? a / b : undefined;
  const set = (k: string, v: number | undefined) => {
    if (v !== undefined) out[k] = v;
  };
  if (kvs.clients > 0) {
    set('opsPerSec', div(kvs.opsPerSec, etcd.opsPerSec));
    for (const p of ['p50', 'p99', 'p999'] as const) set(p, div(etcd.latencyMs?.[p], kvs.latencyMs?.[p]));
    const perOp = (r: SystemResult) => (r.cpuSeconds.server != null && r.ops > 0 ? r.cpuSeconds.server / r.ops : undefined);
    set('serverCpuPerOp', div(perOp(etcd), perOp(kvs)));
  }
  for (const m of metrics) {
    const [a, b] = m.better === 'higher' ? [kvs.metrics[m.key], etcd.metrics[m.key]] : [etcd.metrics[m.key], kvs.metrics[m.key]];
    set(m.key, div(a, b));
  }
  return out;
}

// ------------------------------------------------------------------ the table

const int = (v: number) => Math.round(v).toLocaleString('en-US');
function ms(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return '–';
  return v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
}
const x = (v: number | undefined) => (v === undefined ? '–' : `${v.toFixed(2)}×`);
const perFsync = (v: number | null | undefined) => (v == null ? '–' : v < 10 ? v.toFixed(2) : v.toFixed(1));

export function table(report: Report, metricsOf: (workload: string) => readonly Metric[]): string {
  const rows: string[][] = [['workload', 'system', 'ops/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'server CPU s', 'client CPU s', 'fsyncs/s', 'ops/fsync', 'other']];
  for (const w of report.workloads) {
    const metrics = metricsOf(w.workload);
    w.results.forEach((r, i) => {
      const timed = r.clients > 0;
      const other = metrics.filter((m) => r.metrics[m.key] !== undefined).map((m) => m.format(r.metrics[m.key]!));
      if (r.errors) other.push(`**${int(r.errors)} errors** (${r.firstError ?? ''})`);
      rows.push([
        i === 0 ? `${w.workload}` : '',
        r.system,
        timed ? int(r.opsPerSec) : '–',
        timed ? ms(r.latencyMs?.p50) : '–',
        timed ? ms(r.latencyMs?.p99) : '–',
        timed ? ms(r.latencyMs?.p999) : '–',
        timed && r.cpuSeconds.server != null ? r.cpuSeconds.server.toFixed(1) : '–',
        timed ? r.cpuSeconds.client.toFixed(1) : '–',
        // Absent from reports written before these fields existed.
        r.fsyncsPerSec != null ? int(r.fsyncsPerSec) : '–',
        perFsync(r.opsPerFsync),
        other.join(', '),
      ]);
    });
    const q = w.ratios;
    if (q) {
      const other = metrics.filter((m) => q[m.key] !== undefined).map((m) => `${m.label} ${x(q[m.key])}`);
      rows.push([
        '',
        '**kvs/etcd**',
        `**${x(q.opsPerSec)}**`,
        x(q.p50),
        x(q.p99),
        x(q.p999),
        q.serverCpuPerOp !== undefined ? `${x(q.serverCpuPerOp)} per op` : '–',
        '',
        '',
        '',
        other.join(', '),
      ]);
    }
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const numeric = (c: number) => c >= 2 && c <= 9;
  const line = (r: string[]) => `| ${r.map((cell, c) => (numeric(c) ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!))).join(' | ')} |`;
  const sep = `|${widths.map((w, c) => (numeric(c) ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`;
  return [line(rows[0]!), sep, ...rows.slice(1).map(line)].join('\n');
}

export function machineLine(report: Report): string {
  const m = report.machine;
  const s = report.settings;
  const v = m.versions;
  return [
    `${m.cores} cores (${m.cpuModel}), ${(m.memoryBytes / 2 ** 30).toFixed(1)} GiB RAM, ${m.kernel};`,
    `fsync (write 4 KiB + fdatasync, ${m.fsync.samples}×) p50 ${m.fsync.p50.toFixed(2)} ms, p99 ${m.fsync.p99.toFixed(2)} ms;`,
    `node ${v.node}, etcd ${v.etcd ?? '–'}, kvs ${v.kvs}.`,
    `${s.durationS} s measured per workload and system, in ${s.rounds} alternating round${s.rounds > 1 ? 's' : ''} each after ${s.warmupS} s of warm-up; ${int(s.preloadKeys)} preloaded keys;`,
    `${s.keyBytes}-byte keys, ${s.valueBytes}-byte values; parallel = ${s.parallelClients} clients in ${s.loadProcesses} load-generator processes (${s.client} client)` +
      (s.kvsFlags?.length ? `; kvs run with ${s.kvsFlags.join(' ')}` : '') +
      (s.peerDelayMs ? `; cluster peer ports behind a proxy delaying each direction by ${s.peerDelayMs} ms.` : '.'),
  ].join(' ');
}

// ------------------------------------------------------------------ docs/benchmarks.md

export const DOCS_BEGIN = '<!-- bench:results:begin -->';
export const DOCS_END = '<!-- bench:results:end -->';

/** Replaces what lies between the two markers in `file` with this run's table. */
export async function writeDocs(file: string, report: Report, tableText: string): Promise<void> {
  const text = await readFile(file, 'utf8');
  const a = text.indexOf(DOCS_BEGIN);
  const b = text.indexOf(DOCS_END);
  if (a < 0 || b < a) throw new Error(`${file} has no ${DOCS_BEGIN} … ${DOCS_END} section`);
  const section = [
    DOCS_BEGIN,
    '',
    `Run of ${report.date.slice(0, 10)} (\`npm run bench -- --write-docs\`). Machine: ${machineLine(report)}`,
    '',
    RATIO_NOTE,
    '',
    tableText,
    '',
    DOCS_END,
  ].join('\n');
  await writeFile(file, text.slice(0, a) + section + text.slice(b + DOCS_END.length));
}
