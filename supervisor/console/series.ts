// Pure functions over samples of the node's metrics: the Activity view's rates and latency
// percentiles, and the Cluster view's timeline of role changes, elections and resyncs.
import type { MetricsJson } from '../../shared/metrics.js';

/** One scrape, flattened: `name{a="x",b="y"}` (labels sorted) -> value. */
export type Flat = Record<string, number>;

export interface Sample {
  /** Milliseconds since the epoch. */
  t: number;
  m: Flat;
}

export function seriesKey(name: string, labels: Record<string, string | number | undefined>): string {
  const parts = Object.keys(labels)
    .filter((k) => labels[k] !== undefined)
    .sort()
    .map((k) => `${k}="${labels[k]}"`);
  return parts.length ? `${name}{${parts.join(',')}}` : name;
}

export function flatten(json: MetricsJson): Flat {
  const out: Flat = {};
  for (const metric of json) {
    for (const v of metric.values) {
      const name = (v as { metricName?: string }).metricName ?? metric.name;
      out[seriesKey(name, v.labels as Record<string, string>)] = Number(v.value);
    }
  }
  return out;
}

/** The sum over every series of `name` whose labels include `match`. */
export function sumOf(m: Flat, name: string, match: Record<string, string> = {}): number {
  let s = 0;
  for (const [k, v] of Object.entries(m)) {
    if (k !== name && !k.startsWith(`${name}{`)) continue;
    if (Object.entries(match).every(([lk, lv]) => k.includes(`${lk}="${lv}"`))) s += v;
  }
  return s;
}

/** Values of one label across the series of `name` (e.g. every op of kvs_writes_total). */
export function labelValues(m: Flat, name: string, label: string): string[] {
  const seen = new Set<string>();
  const re = new RegExp(`${label}="([^"]*)"`);
  for (const k of Object.keys(m)) {
    if (!k.startsWith(`${name}{`)) continue;
    const got = re.exec(k);
    if (got) seen.add(got[1]!);
  }
  return [...seen].sort();
}

/** Per-second rate of a counter between two samples (0 across a reset, as after a restart). */
export function rate(a: Sample, b: Sample, name: string, match: Record<string, string> = {}): number {
  const dt = (b.t - a.t) / 1000;
  const d = sumOf(b.m, name, match) - sumOf(a.m, name, match);
  return dt > 0 && d > 0 ? d / dt : 0;
}

/**
 * The q-quantile (0..1) of a histogram's observations between two samples, interpolated within
 * the bucket as Prometheus's histogram_quantile does; undefined with no observation.
 */
export function quantile(a: Sample, b: Sample, name: string, q: number): number | undefined {
  const buckets = new Map<number, number>();
  for (const [k, v] of Object.entries(b.m)) {
    if (!k.startsWith(`${name}_bucket{`)) continue;
    const le = /le="([^"]+)"/.exec(k)?.[1];
    if (le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    const before = a.m[k] ?? 0;
    buckets.set(bound, (buckets.get(bound) ?? 0) + Math.max(0, v - before));
  }
  const sorted = [...buckets.entries()].sort((x, y) => x[0] - y[0]);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (total <= 0) return undefined;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const [bound, count] of sorted) {
    if (count >= rank) {
      if (bound === Infinity) return prevBound;
      const inBucket = count - prevCount;
      return inBucket > 0 ? prevBound + ((bound - prevBound) * (rank - prevCount)) / inBucket : bound;
    }
    prevBound = bound;
    prevCount = count;
  }
  return prevBound;
}

export interface ActivityPoint {
  t: number;
  writes: Record<string, number>;
  writeP50?: number;
  writeP90?: number;
  writeP99?: number;
  fsyncP50?: number;
  fsyncP99?: number;
  watches: number;
}

/** One point per consecutive pair of samples. */
export function activity(samples: Sample[]): ActivityPoint[] {
  const out: ActivityPoint[] = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1]!;
    const b = samples[i]!;
    const writes: Record<string, number> = {};
    for (const op of labelValues(b.m, 'kvs_writes_total', 'op')) writes[op] = rate(a, b, 'kvs_writes_total', { op });
    out.push({
      t: b.t,
      writes,
      writeP50: quantile(a, b, 'kvs_write_duration_seconds', 0.5),
      writeP90: quantile(a, b, 'kvs_write_duration_seconds', 0.9),
      writeP99: quantile(a, b, 'kvs_write_duration_seconds', 0.99),
      fsyncP50: quantile(a, b, 'kvs_wal_fsync_duration_seconds', 0.5),
      fsyncP99: quantile(a, b, 'kvs_wal_fsync_duration_seconds', 0.99),
      watches: sumOf(b.m, 'kvs_watch_active'),
    });
  }
  return out;
}

export interface TimelineEvent {
  t: number;
  kind: 'role' | 'election' | 'resync' | 'member';
  text: string;
}

/** The role a sample shows (the `kvs_role` series at 1), or undefined. */
export function roleOf(m: Flat): string | undefined {
  for (const role of ['leader', 'follower', 'single']) if ((m[seriesKey('kvs_role', { role })] ?? 0) >= 1) return role;
  return undefined;
}

/** What changed between two consecutive samples: a new role, elections, resyncs. */
export function changes(a: Sample, b: Sample): TimelineEvent[] {
  const out: TimelineEvent[] = [];
  const ra = roleOf(a.m);
  const rb = roleOf(b.m);
  if (rb !== ra && rb) out.push({ t: b.t, kind: 'role', text: ra ? `${ra} -> ${rb}` : `${rb} when first sampled` });
  for (const outcome of labelValues(b.m, 'kvs_elections_total', 'outcome')) {
    const d = sumOf(b.m, 'kvs_elections_total', { outcome }) - sumOf(a.m, 'kvs_elections_total', { outcome });
    if (d > 0) out.push({ t: b.t, kind: 'election', text: `${d} election${d > 1 ? 's' : ''} ${outcome}` });
  }
  for (const reason of labelValues(b.m, 'kvs_follower_resyncs_total', 'reason')) {
    const d = sumOf(b.m, 'kvs_follower_resyncs_total', { reason }) - sumOf(a.m, 'kvs_follower_resyncs_total', { reason });
    if (d > 0) out.push({ t: b.t, kind: 'resync', text: `${d} follower resync${d > 1 ? 's' : ''} (${reason})` });
  }
  return out;
}
