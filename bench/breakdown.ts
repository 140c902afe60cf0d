// `npm run breakdown [-- flags]`: where the time of one serial put goes (issue 14). Starts a kvs
// node (or a 3-node cluster) with KVS_STAGE_TRACE set, sends N puts one after the other through
// the bench's plain HTTP/2 client (bench/h2-channel.ts), stamping send and receive itself, stops
// kvs (each component writes its stage file as it exits: shared/stages.ts), joins the files per
// put and prints per stage the median and p99 of the time since the previous stage and since
// the client sent the request. Optionally the same puts against etcd 3.4, for its total.
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { encode, service } from '../shared/proto/index.js';
import { monotonicMicros, readStageFiles } from '../shared/stages.js';
import { headerRevision } from '../services/gateway/cluster.js';
import { KvClient } from './kv-client.js';
import { key, VALUE_BYTES, value } from './keys.js';
import { cleanup, ensureEtcd, startEtcd, startKvs, type Server } from './servers.js';
import { startCluster, type BenchCluster } from './cluster.js';
import { formatBreakdown, joinBreakdown, type Breakdown, type ClientPut, type Summary } from './breakdown-join.js';
import { percentile } from './stats.js';

const HELP = `Usage: npm run breakdown -- [flags]

Starts kvs with KVS_STAGE_TRACE set, sends serial puts (${VALUE_BYTES}-byte values), stops kvs,
and prints where a put's time goes: per stage, the median and p99 of the time since the
previous stage and since the client sent the request (µs), and the client-measured total.

  --puts <n>            measured puts (default 5000)
  --warmup <n>          puts before them, not measured (default 500)
  --cluster             three kvs nodes (as the bench's cluster workloads start them), puts to
                        the leader; the followers' stages are those of the first to ACK
  --no-etcd             skip the same puts against etcd 3.4 (/usr/bin/etcd; a 3-member
                        cluster with --cluster), whose total is printed beside kvs's
  --kvs-flags "<flags>" more flags for kvs run (split on spaces)
  --out <file>          also write the results as JSON
  -h, --help            this text
`;

/** A bad flag: its message is all the user needs (no stack). */
class UsageError extends Error {}

const PUT_PATH = service('etcdserverpb.KV').Put!.path;
const DEADLINE_MS = 30_000;

interface Settings {
  puts: number;
  warmup: number;
  cluster: boolean;
  etcd: boolean;
  kvsFlags: string[];
  out: string | undefined;
}

function settings(argv: string[]): Settings | undefined {
  // node 20's parseArgs has no negated booleans.
  const noEtcd = argv.includes('--no-etcd');
  const options = {
    puts: { type: 'string', default: '5000' },
    warmup: { type: 'string', default: '500' },
    cluster: { type: 'boolean', default: false },
    etcd: { type: 'boolean', default: true },
    'kvs-flags': { type: 'string', default: '' },
    out: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  } as const;
  let parsed;
  try {
    parsed = parseArgs({ args: argv.filter((a) => a !== '--no-etcd'), options });
  } catch (err) {
    throw new UsageError(`${(err as Error).message}\n\n${HELP}`);
  }
  const { values } = parsed;
  if (values.help) return undefined;
  const count = (name: string, v: string, min: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer >= ${min}, got ${v}`);
    return n;
  };
  return {
    puts: count('puts', values.puts, 1),
    warmup: count('warmup', values.warmup, 0),
    cluster: values.cluster,
    etcd: values.etcd && !noEtcd,
    kvsFlags: values['kvs-flags'].split(' ').filter(Boolean),
    out: values.out,
  };
}

/**
 * `warmup` + `n` puts, one at a time, on one connection; returns the measured ones. Requests
 * are encoded before the send stamp, so the client's own encoding is not in the times.
 */
async function serialPuts(endpoint: string, n: number, warmup: number): Promise<ClientPut[]> {
  const kv = new KvClient(endpoint);
  const v = value();
  const bodies = Array.from({ length: warmup + n }, (_, i) => encode('etcdserverpb.PutRequest', { key: key('breakdown', i), value: v }));
  const puts: ClientPut[] = [];
  try {
    await kv.connect();
    for (let i = 0; i < bodies.length; i++) {
      const send = monotonicMicros();
      const res = await kv.call(PUT_PATH, bodies[i]!, DEADLINE_MS);
      const receive = monotonicMicros();
      if (i >= warmup) puts.push({ send, receive, revision: headerRevision(res) });
    }
  } finally {
    kv.close();
  }
  return puts;
}

function totals(puts: ClientPut[]): Summary & { mean: number } {
  const sorted = Float64Array.from(puts, (p) => p.receive - p.send).sort();
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), mean };
}

/** Starts what is measured; `endpoint`: where the puts go (a cluster's leader). */
async function start(system: 'kvs' | 'etcd', s: Settings, traceDir: string): Promise<{ endpoint: string; node: string; stop(): Promise<void> }> {
  // KVS_CPU_PROF (supervisor/component.ts) is passed through: CPU profiles of the same puts.
  const env: Record<string, string> = { KVS_STAGE_TRACE: traceDir, ...(process.env.KVS_CPU_PROF ? { KVS_CPU_PROF: process.env.KVS_CPU_PROF } : {}) };
  if (s.cluster) {
    const c: BenchCluster = await startCluster(system, 3, s.kvsFlags, env);
    const i = await c.leader();
    return { endpoint: c.endpoints[i]!, node: c.members[i]!.name, stop: () => c.stop() };
  }
  const server: Server = system === 'kvs' ? await startKvs(undefined, s.kvsFlags, env) : await startEtcd();
  return { endpoint: server.endpoint, node: 'default', stop: () => server.stop() };
}

async function runKvs(s: Settings): Promise<Breakdown> {
  const traceDir = await mkdtemp(path.join(os.tmpdir(), 'kvs-breakdown-'));
  cleanup.dir(traceDir);
  try {
    const kvs = await start('kvs', s, traceDir);
    let puts: ClientPut[];
    try {
      // A start that was retried (a port taken) may have left the files of the stopped attempt;
      // the running processes write theirs only when they exit.
      for (const f of await readdir(traceDir)) await rm(path.join(traceDir, f), { force: true });
      puts = await serialPuts(kvs.endpoint, s.puts, s.warmup);
    } finally {
      await kvs.stop(); // SIGTERM: every component writes its stage file on the way out
    }
    const files = readStageFiles(traceDir);
    if (files.length === 0) throw new Error(`kvs wrote no stage files in ${traceDir}`);
    return joinBreakdown(files, puts, kvs.node, s.cluster);
  } finally {
    await rm(traceDir, { recursive: true, force: true });
    cleanup.dirGone(traceDir);
  }
}

async function runEtcd(s: Settings): Promise<Summary & { mean: number }> {
  ensureEtcd((m) => console.error(m));
  const etcd = await start('etcd', s, '');
  try {
    return totals(await serialPuts(etcd.endpoint, s.puts, s.warmup));
  } finally {
    await etcd.stop();
  }
}

async function main(): Promise<void> {
  const s = settings(process.argv.slice(2));
  if (!s) return void process.stdout.write(HELP);
  const mode = s.cluster ? '3-node cluster, puts to the leader' : 'single node';
  console.error(`kvs (${mode}): ${s.warmup} warm-up + ${s.puts} serial puts${s.kvsFlags.length ? `, kvs run ${s.kvsFlags.join(' ')}` : ''}`);
  const kvs = await runKvs(s);
  let etcd: (Summary & { mean: number }) | undefined;
  if (s.etcd) {
    console.error(`etcd 3.4 (${s.cluster ? '3 members' : '1 member'}): the same puts`);
    etcd = await runEtcd(s);
  }
  console.log(`Serial puts, ${mode}: ${kvs.puts} measured (after ${s.warmup} warm-up), ${VALUE_BYTES}-byte values; µs`);
  console.log(formatBreakdown(kvs, etcd));
  const missing = Object.entries(kvs.missing).filter(([, n]) => n > 0);
  if (missing.length) console.log(`puts missing a stage: ${missing.map(([name, n]) => `${name} ${n}`).join(', ')}`);
  const disorder = Object.entries(kvs.outOfOrder).filter(([, n]) => n > 0);
  if (disorder.length) console.log(`puts with one process's stamps out of order: ${disorder.map(([name, n]) => `${name} ${n}`).join(', ')}`);
  const early = kvs.stages.filter((st) => st.beforePrev > 0);
  if (early.length) console.log(`puts with a stage stamped before its cause: ${early.map((st) => `${st.name} ${st.beforePrev}`).join(', ')}`);
  if (kvs.firstAck) console.log(`first ACK from: ${Object.entries(kvs.firstAck).map(([who, n]) => `${who} ${n}×`).join(', ')}`);
  if (s.out) {
    await writeFile(s.out, JSON.stringify({ mode: s.cluster ? 'cluster' : 'single', warmup: s.warmup, kvsFlags: s.kvsFlags, kvs, etcd }, null, 2) + '\n');
    console.error(`wrote ${s.out}`);
  }
}

main().then(
  () => process.exit(0),
  (err: Error & { output?: string }) => {
    console.error(err instanceof UsageError ? err.message : (err.stack ?? err.message));
    if (err.output) console.error(err.output);
    process.exit(1);
  },
);
