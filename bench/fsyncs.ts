// The WAL fsyncs a server has done, from its Prometheus metrics: kvs's
// kvs_wal_fsync_duration_seconds_count (on the node's --metrics-addr) and etcd's
// etcd_disk_wal_fsync_duration_seconds_count (etcd 3.4 serves /metrics on its client URL).
// Read before and after each timed window, for fsyncs per second and ops per fsync.
import type { System } from './system.js';

export const FSYNC_COUNTER: Record<System, string> = {
  kvs: 'kvs_wal_fsync_duration_seconds_count',
  etcd: 'etcd_disk_wal_fsync_duration_seconds_count',
};

/** kvs's scrape asks each component for its registry, 2 s at most each. */
const SCRAPE_TIMEOUT_MS = 5000;

/** The counter's value in a Prometheus text exposition (its series summed), undefined if absent. */
export function counterValue(text: string, name: string): number | undefined {
  let sum: number | undefined;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== ' ' && rest[0] !== '{') continue; // another metric with this prefix
    const v = Number(rest.slice(rest.lastIndexOf(' ') + 1));
    if (!Number.isFinite(v)) return undefined;
    sum = (sum ?? 0) + v;
  }
  return sum;
}

/** The counter summed over `urls` (a cluster's members); null if any scrape fails. */
export async function scrapeFsyncs(system: System, urls: string[]): Promise<number | null> {
  try {
    const values = await Promise.all(
      urls.map(async (url) => {
        const res = await fetch(url, { signal: AbortSignal.timeout(SCRAPE_TIMEOUT_MS) });
        if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
        const v = counterValue(await res.text(), FSYNC_COUNTER[system]);
        if (v === undefined) throw new Error(`${url}: no ${FSYNC_COUNTER[system]}`);
        return v;
      }),
    );
    return values.reduce((a, b) => a + b, 0);
  } catch {
    return null;
  }
}
