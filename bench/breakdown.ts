// `npm run breakdown [-- flags]`: where the time of one serial put goes (issue 14). Starts a kvs
// node (or a 3-node cluster) with KVS_STAGE_TRACE set, sends N puts one after the other through
// the bench's plain HTTP/2 client (testkit/unary-grpc-channel.ts), stamping send and receive itself, stops
// kvs (each component writes its stage file as it exits: shared/stages.ts), joins the files per
// put and prints per stage the median and p99 of the time since the previous stage and since
// the client sent the request; then each process's CPU and main-thread wake-ups per measured
// put (/proc, over the measured puts). Optionally the same puts against etcd 3.4, for its
// total and its CPU per put.
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { encode, service } from '../shared/proto/index.js';
import { monotonicMicros, readStageFiles } from '../shared/stages.js';
import { headerRevision } from '../services/gateway/cluster-view.js';
import { KvClient } from '../testkit/kv-client.js';
import { key, VALUE_BYTES, value } from './keys.js';
import { cleanup, ensureEtcd, startEtcd, startKvs, type Server } from './servers.js';
import { startCluster, type BenchCluster } from './cluster-servers.js';
import { formatBreakdown, joinBreakdown, type Breakdown, type ClientPut, type Summary } from './breakdown-join.js';
import { percentile } from './stats.js';
import { processCosts, processName, sampleProcesses, type ProcessCost } from '../testkit/proc.js';
import { syscallStages, type SyscallStages } from './syscall-stages.js';
import { perfUnavailable, SyscallRecording } from './syscall-trace.js';

const HELP = `Usage: npm run breakdown -- [flags]

Starts kvs with KVS_STAGE_TRACE set, sends serial puts (${VALUE_BYTES}-byte values), stops kvs,
and prints where a put's time goes: per stage, the median and p99 of the time since the
previous stage and since the client sent the request (µs), and the client-measured total;
then per kvs process its CPU (every thread) and its main thread's wake-ups per measured put.

  --puts <n>            measured puts (default 5000)
  --warmup <n>          puts before them, not measured (default 500)
  --cluster             three kvs nodes (as the bench's cluster workloads start them), puts to
                        the leader; the followers' stages are those of the first to ACK
  --via-follower        with --cluster: the puts go to a follower, which forwards them to the
                        leader (the stage table then has the leader's storage and peer stages
                        only; the per-process CPU and wake-ups cover the whole path)
  --no-etcd             skip the same puts against etcd 3.4 (/usr/bin/etcd; a 3-member
                        cluster with --cluster), whose total is printed beside kvs's
  --kvs-flags "<flags>" more flags for kvs run (split on spaces)
  --syscalls            also record the servers' and the client's reads, writes and fdatasyncs
                        with \`perf record\` (needs perf and root; single node only) and print
                        the same stages for kvs and etcd as the kernel saw them: client →
                        server, server → WAL write, fdatasync, → answer, → client; for kvs
                        each process's own work and each crossing between its processes
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
  viaFollower: boolean;
  etcd: boolean;
  kvsFlags: string[];
  syscalls: boolean;
  out: string | undefined;
}

function settings(argv: string[]): Settings | undefined {
  // node 20's parseArgs has no negated booleans.
  const noEtcd = argv.includes('--no-etcd');
  const options = {
    puts: { type: 'string', default: '5000' },
    warmup: { type: 'string', default: '500' },
    cluster: { type: 'boolean', default: false },
    'via-follower': { type: 'boolean', default: false },
    etcd: { type: 'boolean', default: true },
    'kvs-flags': { type: 'string', default: '' },
    syscalls: { type: 'boolean', default: false },
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
  if (values['via-follower'] && !values.cluster) throw new UsageError('--via-follower needs --cluster');
  if (values.syscalls && values.cluster) throw new UsageError('--syscalls measures a single node: leave out --cluster');
  const noPerf = values.syscalls ? perfUnavailable() : undefined;
  if (noPerf) throw new UsageError(noPerf);
  const count = (name: string, v: string, min: number) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer >= ${min}, got ${v}`);
    return n;
  };
  return {
    puts: count('puts', values.puts, 1),
    warmup: count('warmup', values.warmup, 0),
    cluster: values.cluster,
    viaFollower: values['via-follower'],
    etcd: values.etcd && !noEtcd,
    kvsFlags: values['kvs-flags'].split(' ').filter(Boolean),
    syscalls: values.syscalls,
    out: values.out,
  };
}

/**
 * `warmup` + `n` puts, one at a time, on one connection; returns the measured ones. Requests
 * are encoded before the send stamp, so the client's own encoding is not in the times.
 */
async function serialPuts(endpoint: string, n: number, warmup: number, pids: () => number[], syscalls = false): Promise<{ puts: ClientPut[]; costs: ProcessCost[]; syscalls?: SyscallStages }> {
  const kv = new KvClient(endpoint);
  const v = value();
  const bodies = Array.from({ length: warmup + n }, (_, i) => encode('etcdserverpb.PutRequest', { key: key('breakdown', i), value: v }));
  const puts: ClientPut[] = [];
  let before = sampleProcesses(pids());
  const dir = syscalls ? await mkdtemp(path.join(os.tmpdir(), 'kvs-breakdown-perf-')) : undefined;
  if (dir) cleanup.dir(dir);
  let recording: SyscallRecording | undefined;
  let stages: SyscallStages | undefined;
  try {
    const names = new Map([...pids(), process.pid].map((pid) => [pid, pid === process.pid ? 'client' : processName(pid)]));
    if (dir) {
      recording = new SyscallRecording([...names.keys()], path.join(dir, 'perf.data'));
      await recording.start(); // recording every thread from here
    }
    await kv.connect();
    for (let i = 0; i < bodies.length; i++) {
      if (i === warmup) before = sampleProcesses(pids());
      const send = monotonicMicros();
      const res = await kv.call(PUT_PATH, bodies[i]!, DEADLINE_MS);
      const receive = monotonicMicros();
      if (i >= warmup) puts.push({ send, receive, revision: headerRevision(res) });
    }
    const after = sampleProcesses(pids());
    if (recording) stages = syscallStages(await recording.stop(), puts, process.pid, names);
    return { puts, costs: processCosts(before, after, puts.length), syscalls: stages };
  } finally {
    kv.close();
    if (recording && !stages) await recording.abort();
    if (dir) {
      await rm(dir, { recursive: true, force: true });
      cleanup.dirGone(dir);
    }
  }
}

function totals(puts: ClientPut[]): Summary & { mean: number } {
  const sorted = Float64Array.from(puts, (p) => p.receive - p.send).sort();
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), mean };
}

/** Starts what is measured; `endpoint`: where the puts go (a cluster's leader, or a follower); `node`: the leader. */
async function start(system: 'kvs' | 'etcd', s: Settings, traceDir: string): Promise<{ endpoint: string; node: string; pids(): number[]; stop(): Promise<void> }> {
  // KVS_CPU_PROF (supervisor/component.ts) is passed through: CPU profiles of the same puts.
  const env: Record<string, string> = { KVS_STAGE_TRACE: traceDir, ...(process.env.KVS_CPU_PROF ? { KVS_CPU_PROF: process.env.KVS_CPU_PROF } : {}) };
  if (s.cluster) {
    const c: BenchCluster = await startCluster(system, 3, s.kvsFlags, env);
    const i = await c.leader();
    const to = s.viaFollower ? (i + 1) % c.endpoints.length : i;
    const all = c.asServer(c.endpoints[to]!);
    return { endpoint: c.endpoints[to]!, node: c.members[i]!.name, pids: () => all.pids(), stop: () => c.stop() };
  }
  const server: Server = system === 'kvs' ? await startKvs(undefined, s.kvsFlags, env) : await startEtcd();
  return { endpoint: server.endpoint, node: 'default', pids: () => server.pids(), stop: () => server.stop() };
}

async function runKvs(s: Settings): Promise<{ breakdown: Breakdown; costs: ProcessCost[]; syscalls?: SyscallStages }> {
  const traceDir = await mkdtemp(path.join(os.tmpdir(), 'kvs-breakdown-'));
  cleanup.dir(traceDir);
  try {
    const kvs = await start('kvs', s, traceDir);
    let run: Awaited<ReturnType<typeof serialPuts>>;
    try {
      // A start that was retried (a port taken) may have left the files of the stopped attempt;
      // the running processes write theirs only when they exit.
      for (const f of await readdir(traceDir)) await rm(path.join(traceDir, f), { force: true });
      run = await serialPuts(kvs.endpoint, s.puts, s.warmup, kvs.pids, s.syscalls);
    } finally {
      await kvs.stop(); // SIGTERM: every component writes its stage file on the way out
    }
    const files = readStageFiles(traceDir);
    if (files.length === 0) throw new Error(`kvs wrote no stage files in ${traceDir}`);
    return { breakdown: joinBreakdown(files, run.puts, kvs.node, s.cluster), costs: run.costs, syscalls: run.syscalls };
  } finally {
    await rm(traceDir, { recursive: true, force: true });
    cleanup.dirGone(traceDir);
  }
}

async function runEtcd(s: Settings): Promise<{ total: Summary & { mean: number }; costs: ProcessCost[]; syscalls?: SyscallStages }> {
  ensureEtcd((m) => console.error(m));
  const etcd = await start('etcd', s, '');
  try {
    const run = await serialPuts(etcd.endpoint, s.puts, s.warmup, etcd.pids, s.syscalls);
    return { total: totals(run.puts), costs: run.costs, syscalls: run.syscalls };
  } finally {
    await etcd.stop();
  }
}

async function main(): Promise<void> {
  const s = settings(process.argv.slice(2));
  if (!s) return void process.stdout.write(HELP);
  const mode = !s.cluster ? 'single node' : s.viaFollower ? '3-node cluster, puts to a follower' : '3-node cluster, puts to the leader';
  console.error(`kvs (${mode}): ${s.warmup} warm-up + ${s.puts} serial puts${s.kvsFlags.length ? `, kvs run ${s.kvsFlags.join(' ')}` : ''}`);
  const { breakdown: kvs, costs, syscalls } = await runKvs(s);
  let etcd: Awaited<ReturnType<typeof runEtcd>> | undefined;
  if (s.etcd) {
    console.error(`etcd 3.4 (${s.cluster ? '3 members' : '1 member'}): the same puts`);
    etcd = await runEtcd(s);
  }
  console.log(`Serial puts, ${mode}: ${kvs.puts} measured (after ${s.warmup} warm-up), ${VALUE_BYTES}-byte values; µs`);
  console.log(formatBreakdown(kvs, etcd?.total));
  console.log(`\nPer measured put, by process: CPU (every thread, µs) and wake-ups (the main thread's waits)`);
  console.log(formatCosts(costs, etcd?.costs));
  if (syscalls) {
    console.log(`\nThe same puts as the kernel saw them (perf record of read, write and fdatasync; µs)`);
    console.log(formatSyscallStages(syscalls, etcd?.syscalls));
  }
  const missing = Object.entries(kvs.missing).filter(([, n]) => n > 0);
  if (missing.length) console.log(`puts missing a stage: ${missing.map(([name, n]) => `${name} ${n}`).join(', ')}`);
  const disorder = Object.entries(kvs.outOfOrder).filter(([, n]) => n > 0);
  if (disorder.length) console.log(`puts with one process's stamps out of order: ${disorder.map(([name, n]) => `${name} ${n}`).join(', ')}`);
  const early = kvs.stages.filter((st) => st.beforePrev > 0);
  if (early.length) console.log(`puts with a stage stamped before its cause: ${early.map((st) => `${st.name} ${st.beforePrev}`).join(', ')}`);
  if (kvs.firstAck) console.log(`first ACK from: ${Object.entries(kvs.firstAck).map(([who, n]) => `${who} ${n}×`).join(', ')}`);
  if (s.out) {
    const report = {
      mode: s.cluster ? 'cluster' : 'single',
      warmup: s.warmup,
      kvsFlags: s.kvsFlags,
      kvs,
      etcd: etcd?.total,
      kvsProcesses: costs,
      etcdProcesses: etcd?.costs,
      ...(syscalls ? { kvsSyscalls: summarize(syscalls), etcdSyscalls: etcd?.syscalls && summarize(etcd.syscalls) } : {}),
    };
    await writeFile(s.out, JSON.stringify(report, null, 2) + '\n');
    console.error(`wrote ${s.out}`);
  }
}

/** The per-process table: kvs's processes by name and their total, then etcd's total CPU. */
function formatCosts(kvs: readonly ProcessCost[], etcd?: readonly ProcessCost[]): string {
  const rows = [...kvs].sort((a, b) => a.name.localeCompare(b.name));
  const total = rows.reduce((t, r) => ({ cpu: t.cpu + r.cpuMicrosPerOp, wakeups: t.wakeups + r.wakeupsPerOp }), { cpu: 0, wakeups: 0 });
  const width = Math.max(24, ...rows.map((r) => r.name.length + 4));
  const line = (name: string, cpu: number, wakeups?: number) =>
    `${name.padEnd(width)}${cpu.toFixed(0).padStart(8)} µs${wakeups === undefined ? '' : `${wakeups.toFixed(2).padStart(9)} wake-ups`}`;
  const out = rows.map((r) => line(`kvs ${r.name}`, r.cpuMicrosPerOp, r.wakeupsPerOp));
  out.push(line('kvs total', total.cpu, total.wakeups));
  if (etcd) out.push(line('etcd 3.4 total', etcd.reduce((t, r) => t + r.cpuMicrosPerOp, 0)));
  return out.join('\n');
}

function summarize(st: SyscallStages): { unmatched: number; stages: Record<string, Summary> } {
  const stages: Record<string, Summary> = {};
  for (const [name, list] of st.samples) {
    const sorted = Float64Array.from(list).sort();
    stages[name.trim()] = { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
  }
  return { unmatched: st.unmatched, stages };
}

/** kvs's syscall stages beside etcd's: the stages both have, then kvs's own sub-stages. */
function formatSyscallStages(kvs: SyscallStages, etcd?: SyscallStages): string {
  const k = summarize(kvs).stages;
  const e = etcd ? summarize(etcd).stages : {};
  const width = Math.max(40, ...[...kvs.samples.keys()].map((n) => n.length + 2));
  const cell = (v?: Summary) => (v ? `${v.p50.toFixed(0).padStart(8)}${v.p99.toFixed(0).padStart(8)}` : `${'-'.padStart(8)}${'-'.padStart(8)}`);
  const out = [`${'stage'.padEnd(width)}${'kvs p50'.padStart(8)}${'p99'.padStart(8)}${etcd ? `${'etcd p50'.padStart(10)}${'p99'.padStart(8)}` : ''}`];
  for (const name of kvs.samples.keys()) out.push(`${name.padEnd(width)}${cell(k[name.trim()])}${etcd ? `  ${cell(e[name.trim()])}` : ''}`);
  out.push(`puts without an fdatasync of their own or a stage's events: kvs ${kvs.unmatched}${etcd ? `, etcd ${etcd.unmatched}` : ''}`);
  return out.join('\n');
}

main().then(
  () => process.exit(0),
  (err: Error & { output?: string }) => {
    console.error(err instanceof UsageError ? err.message : (err.stack ?? err.message));
    if (err.output) console.error(err.output);
    process.exit(1);
  },
);
