// `npm run console-bench [-- flags]`: the operator console's two reads that grow with the data,
// timed through its HTTP API (/api/keys, /api/history on --metrics-addr) against a real node:
// the key browser's first page with a million keys loaded, and the history of a key written a
// thousand times: at consecutive revisions (the console reads it with one watch), and
// interleaved with nine other writes each (parallel Range probes at past revisions;
// supervisor/console/history.ts), and a key's earlier incarnation (/api/history/earlier: one
// watch over every revision since the compact revision). Prints a markdown table of latencies (p50, p90, max over
// --samples requests).
import { parseArgs } from 'node:util';
import { LoadGenerator } from './load.js';
import { startKvs } from './servers.js';
import { DATA_AREA, prefix as areaPrefix } from './keys.js';
import { KvClient } from '../testkit/kv-client.js';

const HELP = `Usage: npm run console-bench -- [flags]

  --keys <n>        keys preloaded under the data set's prefix (default 1000000)
  --revisions <n>   writes of the one key whose history is read (default 1000)
  --samples <n>     requests timed per measurement (default 50)
  -h, --help        this text
`;

function flags(): { keys: number; revisions: number; samples: number } {
  let values: { keys?: string; revisions?: string; samples?: string; help?: boolean };
  try {
    ({ values } = parseArgs({ options: { keys: { type: 'string' }, revisions: { type: 'string' }, samples: { type: 'string' }, help: { type: 'boolean', short: 'h' } } }));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${HELP}`);
    process.exit(2);
  }
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const n = (v: string | undefined, name: string, def: number) => {
    if (v === undefined) return def;
    if (!/^\d+$/.test(v) || Number(v) < 1) {
      process.stderr.write(`--${name} must be a whole number of at least 1, got "${v}"\n${HELP}`);
      process.exit(2);
    }
    return Number(v);
  };
  return { keys: n(values.keys, 'keys', 1_000_000), revisions: n(values.revisions, 'revisions', 1000), samples: n(values.samples, 'samples', 50) };
}

/** Requests timed for /api/history/earlier, at most. */
const EARLIER_SAMPLES = 5;

async function timeGet(url: string, check: (body: any) => void): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url);
  const body = await res.json();
  const ms = performance.now() - t0;
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}: ${JSON.stringify(body)}`);
  check(body);
  return ms;
}

function summary(ms: number[]): { p50: number; p90: number; max: number } {
  const s = [...ms].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
  return { p50: at(0.5), p90: at(0.9), max: s.at(-1)! };
}

async function main(): Promise<void> {
  const opts = flags();
  const server = await startKvs();
  try {
    const base = server.metricsBase!;
    const log = (s: string) => process.stderr.write(`console-bench: ${s}\n`);
    log(`loading ${opts.keys} keys into ${server.endpoint}`);
    const t0 = Date.now();
    const gen = await LoadGenerator.start(2, 'h2');
    try {
      await gen.preload(server.endpoint, opts.keys, 16, 64);
    } finally {
      gen.close();
    }
    log(`loaded in ${((Date.now() - t0) / 1000).toFixed(1)} s; writing two keys ${opts.revisions} times each`);
    const kv = new KvClient(server.endpoint, 'h2');
    await kv.connect();
    const sparse = Buffer.from('console-bench/sparse');
    for (let i = 0; i < opts.revisions; i++) {
      await kv.put(sparse, Buffer.from(JSON.stringify({ i, at: Date.now() })));
      await Promise.all(Array.from({ length: 9 }, (_, j) => kv.put(Buffer.from(`console-bench/filler/${j}`), Buffer.from(String(i)))));
    }
    // A key with two lives: the earlier one (written as often, then deleted) is read on demand,
    // by one watch over every revision since the compact revision (here: all of them).
    const reborn = Buffer.from('console-bench/reborn');
    for (let i = 0; i < opts.revisions; i++) await kv.put(reborn, Buffer.from(JSON.stringify({ i, at: Date.now() })));
    await kv.deleteRange(reborn, Buffer.alloc(0));
    await kv.put(reborn, Buffer.from('second life'));
    // Last, so that the revisions since its creation are its own (the watch route).
    const hot = Buffer.from('console-bench/hot');
    for (let i = 0; i < opts.revisions; i++) await kv.put(hot, Buffer.from(JSON.stringify({ i, at: Date.now() })));
    kv.close();

    const pfx = Buffer.from(areaPrefix(DATA_AREA)).toString('base64');
    const pages: number[] = [];
    const histories: number[] = [];
    const sparseHistories: number[] = [];
    const earlier: number[] = [];
    let scanned = 0;
    for (let i = 0; i < opts.samples; i++) {
      pages.push(
        await timeGet(`${base}/api/keys?prefix=${encodeURIComponent(pfx)}&limit=100`, (b) => {
          if (b.keys.length !== Math.min(100, opts.keys)) throw new Error(`first page has ${b.keys.length} keys`);
        }),
      );
      histories.push(
        await timeGet(`${base}/api/history?key=${encodeURIComponent(hot.toString('base64'))}&limit=${opts.revisions}`, (b) => {
          if (b.revisions.length !== opts.revisions) throw new Error(`history has ${b.revisions.length} revisions, wrote ${opts.revisions}`);
        }),
      );
      sparseHistories.push(
        await timeGet(`${base}/api/history?key=${encodeURIComponent(sparse.toString('base64'))}&limit=${opts.revisions}`, (b) => {
          if (b.revisions.length !== opts.revisions) throw new Error(`sparse history has ${b.revisions.length} revisions, wrote ${opts.revisions}`);
        }),
      );
    }
    // Each scans the whole history (seconds on a million keys): a few samples, after the rest.
    for (let i = 0; i < Math.min(opts.samples, EARLIER_SAMPLES); i++) {
      earlier.push(
        await timeGet(`${base}/api/history/earlier?key=${encodeURIComponent(reborn.toString('base64'))}&limit=${opts.revisions}`, (b) => {
          const n = b.incarnations.reduce((sum: number, i: { revisions: unknown[] }) => sum + i.revisions.length, 0);
          if (b.incarnations.length !== 1 || n !== opts.revisions) throw new Error(`earlier: ${b.incarnations.length} incarnations, ${n} revisions; wrote 1 of ${opts.revisions}`);
          scanned = b.before - b.compactRevision - 1;
        }),
      );
    }
    const row = (what: string, ms: number[]) => {
      const s = summary(ms);
      return `| ${what} | ${s.p50.toFixed(1)} | ${s.p90.toFixed(1)} | ${s.max.toFixed(1)} |`;
    };
    process.stdout.write(
      [
        `console API latency (ms), ${opts.samples} requests each, ${opts.keys} keys loaded`,
        '',
        '| request | p50 | p90 | max |',
        '|---|---|---|---|',
        row(`/api/keys first page (100 of ${opts.keys})`, pages),
        row(`/api/history (${opts.revisions} revisions, consecutive)`, histories),
        row(`/api/history (${opts.revisions} revisions, 1 in 10)`, sparseHistories),
        row(`/api/history/earlier (${opts.revisions} revisions of an earlier life, ${scanned} revisions scanned; ${earlier.length} requests)`, earlier),
        '',
      ].join('\n'),
    );
  } finally {
    await server.stop();
  }
}

await main();
