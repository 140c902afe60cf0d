// size: after loading the data set (100,000 keys of 256-byte values; no timed phase) and
// letting the server idle for 12 s (etcd commits its backend every 100 ms; kvs seals an idle
// WAL segment after 10 s and then trims it, LMDB holding its entries), the on-disk bytes per
// live key (kvs: db/data.mdb + wal/; etcd: member/snap/db + member/wal/) and the resident
// memory of all the server's processes (RSS, and PSS, which counts shared pages once).
import { DATA_AREA, prefix, prefixEnd } from '../keys.js';
import { fmt, type Workload } from '../workload.js';

const SETTLE_MS = 12_000;
const SETTLE_QUICK_MS = 1_000;

export const size: Workload = {
  name: 'size',
  summary: 'disk bytes per live key and server RSS after the preload',
  clients: 0,
  preload: true,
  async measure(target, _run, opts) {
    const settleMs = opts.quick ? SETTLE_QUICK_MS : SETTLE_MS;
    await new Promise((r) => setTimeout(r, settleMs));
    const liveKeys = await target.kv.count(Buffer.from(prefix(DATA_AREA), 'latin1'), prefixEnd(prefix(DATA_AREA)));
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
  },
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
