// size: after loading the data set (100,000 keys of 256-byte values; no timed phase) and
// letting the server idle for 12 s (etcd commits its backend every 100 ms; kvs seals an idle
// WAL segment after 10 s and then trims it, LMDB holding its entries), the on-disk bytes per
// live key (kvs: db/data.mdb + wal/; etcd: member/snap/db + member/wal/) and the resident
// memory of all the server's processes (RSS, and PSS, which counts shared pages once).
import { DATA_AREA, JSON_PREFIX, jsonKey, jsonValue, prefix, prefixEnd } from '../keys.js';
import { fmt, PARALLEL, type MeasureTarget, type Workload } from '../workload.js';

const SETTLE_MS = 12_000;
const SETTLE_QUICK_MS = 1_000;

export const size: Workload = {
  name: 'size',
  summary: 'disk bytes per live key and server RSS after the preload',
  clients: 0,
  preload: true,
  measure: (target, _run, opts) => settleAndMeasure(target, Buffer.from(prefix(DATA_AREA), 'latin1'), opts.quick),
  metrics: [
    { key: 'bytesPerKey', label: 'B/key', format: (v) => `${fmt.int(v)} B/key`, better: 'lower' },
    { key: 'dbBytes', label: 'db', format: (v) => `db ${fmt.mb(v)}`, better: 'lower' },
    { key: 'walBytes', label: 'wal', format: (v) => `wal ${fmt.mb(v)}`, better: 'lower' },
    { key: 'rssBytes', label: 'RSS', format: (v) => `RSS ${fmt.mb(v)}`, better: 'lower' },
    { key: 'pssBytes', label: 'PSS', format: (v) => `PSS ${fmt.mb(v)}`, better: 'lower' },
  ],
};

/** The same at ten times the data set (1,000,000 keys by default), where etcd's fixed WAL weighs less. */
export const size10x: Workload = {
  ...size,
  name: 'size-10x',
  summary: 'disk bytes per live key and server RSS after a preload of 10x --preload keys',
  preloadScale: 10,
};

/** After SETTLE_MS idle: disk bytes per live key under `keyPrefix` and the server's memory. */
async function settleAndMeasure(target: MeasureTarget, keyPrefix: Buffer, quick: boolean): Promise<Record<string, number>> {
  const settleMs = quick ? SETTLE_QUICK_MS : SETTLE_MS;
  await new Promise((r) => setTimeout(r, settleMs));
  const liveKeys = await target.kv.count(keyPrefix, prefixEnd(keyPrefix.toString('latin1')));
  const out: Record<string, number> = { liveKeys, settleMs };
  if (target.disk) {
    const d = await target.disk();
    Object.assign(out, { dbBytes: d.db, walBytes: d.wal, dbApparentBytes: d.dbApparent, walApparentBytes: d.walApparent });
    out.bytesPerKey = liveKeys > 0 ? (d.db + d.wal) / liveKeys : 0;
  } else {
    // A remote endpoint: only what Maintenance.Status tells (the database file, no WAL).
    out.dbBytes = (await target.kv.status()).dbSize;
    out.bytesPerKey = liveKeys > 0 ? out.dbBytes / liveKeys : 0;
  }
  if (target.rss) out.rssBytes = target.rss();
  if (target.pss) out.pssBytes = target.pss();
  return out;
}

/** Puts per Txn of the JSON data set's load (etcd's default limit is 128 operations). */
const LOAD_TXN = 100;

/**
 * The same with a Kubernetes-like data set instead of the preload: --preload ConfigMaps of
 * ~255 bytes of JSON under /registry/configmaps/default/ (bench/keys.ts), loaded here in Txns
 * of 100 puts by 16 concurrent callers; the spec's reference is 332 B/key for such values.
 */
export const sizeJson: Workload = {
  ...size,
  name: 'size-json',
  summary: 'disk bytes per live key and server RSS after loading --preload Kubernetes-like JSON objects',
  preload: false,
  async measure(target, _run, opts) {
    let next = 0;
    const load = async (): Promise<void> => {
      while (next < opts.preloadKeys) {
        const from = next;
        next = Math.min(opts.preloadKeys, next + LOAD_TXN);
        const pairs: [Buffer, Buffer][] = [];
        for (let i = from; i < next; i++) pairs.push([jsonKey(i), jsonValue(i)]);
        await target.kv.putMany(pairs);
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, load));
    return settleAndMeasure(target, Buffer.from(JSON_PREFIX), opts.quick);
  },
};
