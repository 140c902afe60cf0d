// `npm run event-lag [-- flags]`: when a put's watch event reaches a watcher, against when the
// put's answer reaches the writer (issue 14, "the watch event's route"). Serial puts through
// the bench's h2 client, one watcher of their prefix on its own connection; per put, the time
// from the request to its answer, to its event, and the event's lag behind the answer (0 when
// the event came first). kvs and etcd 3.4 alternate, each on a fresh data directory.
import { parseArgs } from 'node:util';
import { decode, encode, num, service } from '../shared/proto/index.js';
import { KvClient } from '../testkit/kv-client.js';
import { value } from './keys.js';
import { ensureEtcd, startServer } from './servers.js';
import type { System } from './system.js';
import { percentile } from './stats.js';
import { WatchLoadStream } from './watch-load-stream.js';

const HELP = `Usage: npm run event-lag -- [flags]

Serial puts with one watcher of their keys on another connection, against kvs and etcd 3.4
(alternating): per put, request → answer, request → event, and how long the event came after
the answer (µs: p50, p90, p99), and how often the event came first.

  --puts <n>        measured puts per round (default 3000; 10 % more as warm-up)
  --rounds <n>      rounds per system, alternating kvs, etcd, kvs, ... (default 2)
  --systems a,b     which (default kvs,etcd)
  -h, --help        this text
`;

const PUT = service('etcdserverpb.KV').Put!.path;
const PREFIX = 'kvs-bench/event-lag/';

interface Lag {
  system: System;
  answer: number[];
  event: number[];
  lag: number[];
  eventFirst: number;
}

async function round(system: System, puts: number): Promise<Lag> {
  const server = await startServer(system);
  try {
    const kv = new KvClient(server.endpoint);
    await kv.connect();
    // revision -> true (its event came first) or the resolver of a put waiting for it
    const events = new Map<number, true | (() => void)>();
    const watch = new WatchLoadStream(server.endpoint, (_id, revision) => {
      const waiting = events.get(revision);
      if (typeof waiting === 'function') waiting();
      else events.set(revision, true);
    });
    await watch.create(Buffer.from(PREFIX), Buffer.from(PREFIX.slice(0, -1) + '0'));
    const out: Lag = { system, answer: [], event: [], lag: [], eventFirst: 0 };
    const warmup = Math.ceil(puts / 10);
    for (let i = 0; i < warmup + puts; i++) {
      const body = encode('etcdserverpb.PutRequest', { key: Buffer.from(`${PREFIX}${i % 100}`), value: value() });
      const t0 = performance.now();
      const res = await kv.call(PUT, body);
      const answered = performance.now();
      const revision = num(decode<{ header: { revision: number } }>('etcdserverpb.PutResponse', res).header.revision);
      let evented = answered;
      if (events.get(revision) !== true) {
        await new Promise<void>((resolve) => events.set(revision, resolve));
        evented = performance.now();
      }
      events.delete(revision);
      if (i < warmup) continue;
      out.answer.push((answered - t0) * 1000);
      out.event.push((evented - t0) * 1000);
      out.lag.push((evented - answered) * 1000);
      if (evented === answered) out.eventFirst++;
    }
    watch.close();
    return out;
  } finally {
    await server.stop();
  }
}

const stats = (xs: number[]) => {
  const s = Float64Array.from(xs).sort();
  return [0.5, 0.9, 0.99].map((q) => percentile(s, q).toFixed(0)).join(' / ');
};

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { puts: { type: 'string' }, rounds: { type: 'string' }, systems: { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) return void process.stdout.write(HELP);
  const puts = Number(values.puts ?? 3000);
  const rounds = Number(values.rounds ?? 2);
  const systems = (values.systems ?? 'kvs,etcd').split(',');
  const bad = systems.find((s) => s !== 'kvs' && s !== 'etcd');
  if (!Number.isInteger(puts) || puts < 10 || !Number.isInteger(rounds) || rounds < 1 || bad !== undefined) {
    process.stderr.write(`${bad !== undefined ? `unknown system "${bad}" (kvs, etcd)` : '--puts takes a whole number of at least 10, --rounds of at least 1'}\n\n${HELP}`);
    process.exitCode = 2;
    return;
  }
  if (systems.includes('etcd')) ensureEtcd((s) => process.stderr.write(`${s}\n`));
  const lines = ['| round | system | answer p50 / p90 / p99 µs | event p50 / p90 / p99 µs | event after answer p50 / p90 / p99 µs | event first |', '|--:|---|--:|--:|--:|--:|'];
  for (let r = 1; r <= rounds; r++) {
    for (const system of systems as System[]) {
      const l = await round(system, puts);
      lines.push(`| ${r} | ${system} | ${stats(l.answer)} | ${stats(l.event)} | ${stats(l.lag)} | ${l.eventFirst} of ${puts} |`);
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

await main();
