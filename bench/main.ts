// kvs benchmark suite: `kvs bench [flags]` (which runs bin/kvs-bench.js, this program's entry),
// or `npm run bench [-- flags]`. Starts a kvs node and a real etcd 3.4 (or uses --endpoints),
// runs each workload against both in alternating rounds, prints one table and writes the
// results as JSON. See docs/benchmarks.md. It ships in the package: what it uses of testkit/
// (process plumbing, loopback ports, the S3 server, the TCP proxy, the clients, /proc readers,
// the history fixture) loads neither node:test nor a devDependency (bench/shipped.test.ts).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { CLIENT_KINDS, KvClient } from '../testkit/kv-client.js';
import { enableAuth } from './auth.js';
import { KEY_BYTES, ROOT_PREFIX, VALUE_BYTES, prefixEnd } from './keys.js';
import { LoadGenerator, type LoadClient } from './load.js';
import { buildGoLoadGenerator } from './go-client.js';
import { describeMachine } from './machine.js';
import { RATIO_NOTE, machineLine, ratios, table, writeDocs, type Report, type SystemResult, type WorkloadResult } from './report.js';
import { REPO_ROOT, ensureEtcd, localObjectStore, startServer, type KvsObjectStore, type Server } from './servers.js';
import type { System } from './system.js';
import type { Rgw } from './rgw.js';
import { Tally, type Target } from './tally.js';
import { CLUSTER_NODES, PARALLEL, type Workload, type WorkloadOptions } from './workload.js';
import { CLUSTER_WORKLOADS, RGW_WORKLOADS, WORKLOADS, workload } from './workloads/index.js';
import { startCluster, type BenchCluster } from './cluster-servers.js';

/** The workloads the Go load generator does not run (`--client go`). */
const NOT_GO = [...WORKLOADS, ...RGW_WORKLOADS].filter((w) => !w.go).map((w) => w.name);
const GO_RUNS = 'the put, get, mixed and range workloads, with their -auth, -store-* and cluster- variants';

const HELP = `Usage: npx kvs bench [flags]     (or: npx kvs-bench [flags], npm run bench -- [flags])

Starts kvs and etcd 3.4 on loopback free ports with temp data dirs (fresh ones for each
workload), runs each workload against both in alternating rounds, prints a table and writes
.bench/results-<timestamp>.json.

  --duration <s>        measured seconds per workload (default 10)
  --warmup <s>          warm-up seconds before each round (default 2)
  --rounds <n>          split the measured time into n rounds, alternating the systems
                        (kvs, etcd, kvs, etcd, ...; default 2, --quick 1)
  --workloads a,b       which workloads (default all: ${WORKLOADS.map((w) => w.name).join(',')});
                        the cluster-* ones run against ${CLUSTER_NODES}-member clusters of kvs and etcd
  --preload <n>         keys in the preloaded data set (default 100000)
  --quick               smoke run: 1 s per workload, 0.25 s warm-up, 1 round, 5000 preloaded keys,
                        1 failover round
  --failover-rounds <n> kills of the leader per system in cluster-failover, and trials per
                        system of the embed-* workloads, alternating the systems; the table
                        shows the median (default 5, --quick 1)
  --endpoints h:p,...   measure these etcd v3 endpoints instead (no servers started, no ratios;
                        writes under ${ROOT_PREFIX} and deletes that prefix afterwards; not the
                        -auth workloads, which enable auth on the server, nor the cluster ones)
  --systems kvs,etcd    which servers to start (default both)
  --rgw                 also the workloads with kvs on Ceph RGW (${RGW_WORKLOADS.map((w) => w.name).join(',')}),
                        on a radosgw started for the run (needs Debian's radosgw, ceph-mon, ceph-osd)
  --kvs-flags="<flags>" more flags for every \`kvs run\` the bench starts, split on spaces
                        (e.g. --kvs-flags="--log-level warn"; for A/B tests of a server flag)
  --peer-delay <ms>     cluster workloads: every member's peer port (kvs and etcd alike) behind a
                        proxy that holds each chunk this long in each direction, as a network
                        between machines would (default 0: no proxy)
  --load-processes <n>  load-generator processes (default 2)
  --client h2|grpc-js|go  the load generator's client: a gRPC channel on raw node:http2
                        (default, cheapest of the Node ones), @grpc/grpc-js (several times the
                        client CPU per call), or etcd's Go client clientv3 (bench/go; built on
                        first use; needs Debian's golang-go and golang-etcd-server-dev): runs
                        the put, get, mixed and range workloads and their -auth, -store-* and
                        cluster- variants, not ${NOT_GO.join(', ')}
  --out <file>          JSON results file (default .bench/results-<timestamp>.json)
  --write-docs          rewrite the results section of docs/benchmarks.md
  -h, --help            this text
`;

interface Settings {
  workloads: Workload[];
  durationS: number;
  warmupS: number;
  rounds: number;
  failoverRounds: number;
  preloadKeys: number;
  endpoints?: string[];
  systems: System[];
  loadProcesses: number;
  /** --kvs-flags, split on spaces. */
  kvsFlags: string[];
  /** --peer-delay, ms (0: no proxy). */
  peerDelayMs: number;
  client: LoadClient;
  out: string;
  writeDocs: boolean;
  quick: boolean;
  rgw: boolean;
}

function positive(name: string, v: string | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number, got '${v}'`);
  return n;
}

function settings(argv: string[]): Settings | undefined {
  const { values: a } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      rounds: { type: 'string' },
      'failover-rounds': { type: 'string' },
      workloads: { type: 'string' },
      preload: { type: 'string' },
      quick: { type: 'boolean', default: false },
      endpoints: { type: 'string' },
      systems: { type: 'string' },
      'load-processes': { type: 'string' },
      'kvs-flags': { type: 'string' },
      'peer-delay': { type: 'string' },
      client: { type: 'string' },
      out: { type: 'string' },
      'write-docs': { type: 'boolean', default: false },
      rgw: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (a.help) {
    process.stdout.write(HELP);
    return undefined;
  }
  const list = (s: string | undefined) => (s ?? '').split(',').map((x) => x.trim()).filter(Boolean);
  const systems = a.systems ? list(a.systems) : ['kvs', 'etcd'];
  for (const s of systems) if (s !== 'kvs' && s !== 'etcd') throw new Error(`--systems: unknown system '${s}'`);
  const client = (a.client ?? 'h2') as LoadClient;
  const clients: readonly LoadClient[] = [...CLIENT_KINDS, 'go'];
  if (!clients.includes(client)) throw new Error(`--client must be one of ${clients.join(', ')}`);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  let workloads = a.workloads ? list(a.workloads).map(workload) : [...WORKLOADS, ...(a.rgw ? RGW_WORKLOADS : [])];
  if (a.endpoints) {
    // They create users and enable auth: only on servers started (and removed) here.
    const auth = workloads.filter((w) => w.auth);
    if (auth.length && a.workloads) throw new Error(`${auth.map((w) => w.name).join(', ')} enable auth on the server: not with --endpoints`);
    // They start (and kill) clusters of their own.
    const cluster = workloads.filter((w) => w.cluster);
    if (cluster.length && a.workloads) throw new Error(`${cluster.map((w) => w.name).join(', ')} start clusters of their own: not with --endpoints`);
    workloads = workloads.filter((w) => !w.auth && !w.cluster);
  }
  if (client === 'go') {
    // The Go load generator implements some ops (Workload.go); the rest are not run with another client.
    const notGo = workloads.filter((w) => !w.go);
    if (notGo.length && a.workloads) throw new Error(`--client go does not run ${notGo.map((w) => w.name).join(', ')} (it runs ${GO_RUNS})`);
    if (notGo.length) log(`--client go: leaving out ${notGo.map((w) => w.name).join(', ')} (the Go load generator does not run them)`);
    workloads = workloads.filter((w) => w.go);
  }
  const kvsFlags = (a['kvs-flags'] ?? '').split(/\s+/).filter(Boolean);
  if (kvsFlags.length && a.endpoints) throw new Error('--kvs-flags: not with --endpoints (no kvs is started)');
  const needsRgw = workloads.filter((w) => w.objectStore === 'rgw');
  if (needsRgw.length && !a.rgw) throw new Error(`${needsRgw.map((w) => w.name).join(', ')} need --rgw (Ceph RGW)`);
  return {
    workloads,
    durationS: positive('duration', a.duration, a.quick ? 1 : 10),
    warmupS: a.warmup === '0' ? 0 : positive('warmup', a.warmup, a.quick ? 0.25 : 2),
    rounds: Math.round(positive('rounds', a.rounds, a.quick ? 1 : 2)),
    failoverRounds: Math.round(positive('failover-rounds', a['failover-rounds'], a.quick ? 1 : 5)),
    preloadKeys: Math.round(positive('preload', a.preload, a.quick ? 5000 : 100_000)),
    ...(a.endpoints ? { endpoints: list(a.endpoints) } : {}),
    systems: systems as System[],
    loadProcesses: Math.round(positive('load-processes', a['load-processes'], 2)),
    kvsFlags,
    peerDelayMs: a['peer-delay'] === undefined || a['peer-delay'] === '0' ? 0 : positive('peer-delay', a['peer-delay'], 0),
    client,
    out: path.resolve(a.out ?? path.join(REPO_ROOT, '.bench', `results-${stamp}.json`)),
    writeDocs: a['write-docs'],
    quick: a.quick,
    rgw: a.rgw,
  };
}

const log = (s: string) => process.stderr.write(`bench: ${s}\n`);

function describe(r: SystemResult): string {
  const l = r.latencyMs;
  if (!l) {
    const round = (_k: string, v: unknown) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v);
    return JSON.stringify(r.metrics, round) + (r.errors ? `, ${r.errors} errors (${r.firstError})` : '');
  }
  return (
    `${Math.round(r.opsPerSec).toLocaleString('en-US')} ops/s, p50 ${l.p50.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms` +
    (r.errors ? `, ${r.errors} errors (${r.firstError})` : '')
  );
}

/** One workload against every target: preload, alternating rounds, measure. */
async function runWorkload(w: Workload, targets: Target[], load: LoadGenerator, s: Settings, preloaded: Set<string>): Promise<SystemResult[]> {
  const preloadKeys = Math.round(s.preloadKeys * (w.preloadScale ?? 1));
  const revisions = w.preloadRevisions ?? 1;
  const opts: WorkloadOptions = { preloadKeys, valueBytes: VALUE_BYTES, quick: s.quick };
  for (const t of targets) {
    const dataSet = `${t.name} ${preloadKeys} × ${revisions}`;
    if (!w.preload || preloaded.has(dataSet)) continue;
    const t0 = Date.now();
    for (let r = 0; r < revisions; r++) await load.preload(t.preloadEndpoint ?? t.endpoints[0]!, preloadKeys, PARALLEL, VALUE_BYTES);
    const times = revisions > 1 ? `, each ${revisions} times,` : '';
    log(`  ${t.name}: preloaded ${preloadKeys.toLocaleString('en-US')} keys${times} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    // Servers started here are fresh for each workload; with --endpoints the data set stays.
    if (!t.server) preloaded.add(dataSet);
  }
  if (w.auth) {
    for (const t of targets) {
      await enableAuth(t.endpoints[0]!, w.preload);
      log(`  ${t.name}: auth enabled (users root and bench); a Range without a token is refused`);
    }
  }
  const tallies = targets.map((t) => new Tally(t, w, opts));
  if (w.clients > 0) {
    for (let r = 1; r <= s.rounds; r++) {
      for (const tally of tallies) {
        const line = await tally.round(load, s.warmupS * 1000, (s.durationS * 1000) / s.rounds);
        log(`  ${tally.target.name}${s.rounds > 1 ? ` (round ${r}/${s.rounds})` : ''}: ${line}`);
      }
    }
  }
  if (w.trial) {
    for (let r = 1; r <= s.failoverRounds; r++) {
      for (const tally of tallies) {
        if (tally.broken) continue;
        const line = await tally.trial({ n: r, of: s.failoverRounds });
        log(`  ${tally.target.name} (round ${r}/${s.failoverRounds}): ${line}`);
      }
    }
  }
  const results = await Promise.all(tallies.map((t) => t.finish()));
  for (const r of results) log(`  ${r.system}: ${describe(r)}`);
  return results;
}

/**
 * For a workload run with auth whose baseline (the same without auth) ran too: each system's
 * ops/s and server CPU per op relative to its baseline's, and their kvs/etcd ratios.
 */
function compareWithBaselines(report: Report): void {
  for (const wr of report.workloads) {
    const w = workload(wr.workload);
    const baseName = w.baseline ?? w.auth?.baseline;
    const base = baseName && report.workloads.find((b) => b.workload === baseName);
    if (!base) continue;
    const cpuPerOp = (r: SystemResult) => (r.cpuSeconds.server != null && r.ops > 0 ? r.cpuSeconds.server / r.ops : undefined);
    for (const r of wr.results) {
      const b = base.results.find((x) => x.system === r.system);
      if (!b) continue;
      if (b.opsPerSec > 0) r.metrics.opsVsBaseline = r.opsPerSec / b.opsPerSec;
      const [c, cb] = [cpuPerOp(r), cpuPerOp(b)];
      if (c !== undefined && cb) r.metrics.cpuPerOpVsBaseline = c / cb;
    }
    const kvs = wr.results.find((r) => r.system === 'kvs');
    const etcd = wr.results.find((r) => r.system === 'etcd');
    if (kvs && etcd) wr.ratios = ratios(kvs, etcd, w.metrics ?? []);
  }
}

/** A cluster workload that failed or saw errors: every member's recent output, next to --out. */
async function saveClusterLogs(s: Settings, w: Workload, clusters: BenchCluster[]): Promise<void> {
  for (const c of clusters) await saveLog(s, w, c.system, c.output());
}

async function saveLog(s: Settings, w: Workload, system: string, output: string): Promise<void> {
  const file = s.out.replace(/\.json$/, '') + `-${w.name}-${system}.log`;
  try {
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, output);
    log(`  ${system}: the members' recent output is in ${path.relative(process.cwd(), file) || file}`);
  } catch (err) {
    log(`  ${system}: could not save the members' output: ${(err as Error).message}`);
  }
}

/** Warns (and notes in the JSON) when a cluster's leader changed during a timed workload. */
async function checkLeader(c: BenchCluster, before: number, wr: WorkloadResult): Promise<void> {
  const r = wr.results.find((x) => x.system === c.system);
  let now: number | undefined;
  try {
    now = await c.leader(10_000);
  } catch (err) {
    log(`  ${c.system}: WARNING: no agreed leader after the workload: ${(err as Error).message}`);
  }
  if (now === before) return;
  if (now !== undefined) log(`  ${c.system}: WARNING: the leader changed during the workload (${c.members[before]!.name} -> ${c.members[now]!.name})`);
  if (r) r.metrics.leaderChanged = 1;
}

async function main(): Promise<number> {
  let s: Settings | undefined;
  try {
    s = settings(process.argv.slice(2));
  } catch (err) {
    log(`${(err as Error).message} (see --help)`);
    return 2;
  }
  if (!s) return 0;
  let goBin: string | undefined;
  if (s.client === 'go') {
    try {
      goBin = buildGoLoadGenerator(log);
    } catch (err) {
      log((err as Error).message);
      return 1;
    }
  }
  if (!s.endpoints && s.systems.includes('etcd')) ensureEtcd(log);
  const machine = describeMachine({ etcd: !s.endpoints });
  const report: Report = {
    date: new Date().toISOString(),
    mode: s.endpoints ? 'endpoints' : 'kvs-vs-etcd',
    settings: {
      durationS: s.durationS,
      warmupS: s.warmupS,
      rounds: s.rounds,
      failoverRounds: s.failoverRounds,
      clusterNodes: CLUSTER_NODES,
      preloadKeys: s.preloadKeys,
      keyBytes: KEY_BYTES,
      valueBytes: VALUE_BYTES,
      parallelClients: PARALLEL,
      loadProcesses: s.loadProcesses,
      client: s.client,
      ...(s.kvsFlags.length ? { kvsFlags: s.kvsFlags } : {}),
      ...(s.peerDelayMs ? { peerDelayMs: s.peerDelayMs } : {}),
      ...(s.endpoints ? { endpoints: s.endpoints } : {}),
    },
    machine,
    workloads: [],
  };
  log(machineLine(report));

  const load = await LoadGenerator.start(s.loadProcesses, s.client, goBin);
  const preloaded = new Set<string>();
  let rgw: Rgw | undefined;
  const objectStore = async (w: Workload): Promise<KvsObjectStore | undefined> => {
    if (w.objectStore === 'local') return localObjectStore();
    if (w.objectStore !== 'rgw') return undefined;
    if (!rgw) {
      log('starting Ceph RGW for the -store-rgw workloads');
      // Loaded only here: it brings the integration harness along.
      const { startRgw } = await import('./rgw.js');
      rgw = await startRgw();
    }
    return rgw.store();
  };
  try {
    for (const w of s.workloads) {
      log(`${w.name}: ${w.summary}`);
      const wr: WorkloadResult = { workload: w.name, summary: w.summary, results: [] };
      const servers: Server[] = [];
      const clusters: BenchCluster[] = [];
      const leaders = new Map<string, number>();
      try {
        let targets: Target[];
        if (s.endpoints) {
          targets = [{ name: s.endpoints.join(','), endpoints: s.endpoints }];
        } else if (w.cluster) {
          targets = [];
          for (const system of s.systems) {
            const t0 = Date.now();
            const c = await startCluster(system, CLUSTER_NODES, s.kvsFlags, {}, s.peerDelayMs).catch(async (err: Error & { output?: string }) => {
              if (err.output) await saveLog(s, w, system, err.output);
              throw err;
            });
            clusters.push(c);
            const leader = await c.leader();
            // A follower: the member after the leader.
            const at = w.cluster === 'leader' ? leader : (leader + 1) % CLUSTER_NODES;
            const server = c.asServer(c.endpoints[at]!);
            servers.push(server);
            targets.push({ name: system, endpoints: [server.endpoint], server, preloadEndpoint: c.endpoints[leader]!, cluster: c });
            leaders.set(system, leader);
            log(
              `  ${system}: ${CLUSTER_NODES} members started in ${((Date.now() - t0) / 1000).toFixed(1)} s, ${c.members[leader]!.name} leads` +
                (w.clients > 0 ? `; clients on ${c.members[at]!.name} (${at === leader ? 'the leader' : 'a follower'})` : ''),
            );
            for (const note of c.notes) log(`  ${system}: NOTE: ${note}`);
          }
        } else {
          // Fresh servers for each workload: no history or garbage from earlier workloads.
          for (const system of s.systems) servers.push(await startServer(system, system === 'kvs' ? await objectStore(w) : undefined, s.kvsFlags));
          targets = servers.map((server) => ({ name: server.system, endpoints: [server.endpoint], server }));
        }
        wr.results = await runWorkload(w, targets, load, s, preloaded);
        // The timed cluster workloads assume one leader throughout.
        if (w.clients > 0) for (const c of clusters) await checkLeader(c, leaders.get(c.system)!, wr);
        if (wr.results.some((r) => r.errors)) await saveClusterLogs(s, w, clusters);
      } catch (err) {
        await saveClusterLogs(s, w, clusters);
        throw err;
      } finally {
        for (const server of servers) await server.stop();
      }
      const kvs = wr.results.find((r) => r.system === 'kvs');
      const etcd = wr.results.find((r) => r.system === 'etcd');
      if (kvs && etcd) wr.ratios = ratios(kvs, etcd, w.metrics ?? []);
      report.workloads.push(wr);
    }
    compareWithBaselines(report);
  } finally {
    load.close();
    await rgw?.stop();
    if (s.endpoints) {
      const kv = new KvClient(s.endpoints[0]!);
      try {
        await kv.deleteRange(Buffer.from(ROOT_PREFIX, 'latin1'), prefixEnd(ROOT_PREFIX));
      } catch (err) {
        log(`could not delete ${ROOT_PREFIX} on ${s.endpoints[0]}: ${(err as Error).message}`);
      } finally {
        kv.close();
      }
    }
  }

  const text = table(report, (name) => workload(name).metrics ?? []);
  process.stdout.write(`\n${machineLine(report)}\n\n${report.mode === 'kvs-vs-etcd' ? `${RATIO_NOTE}\n\n` : ''}${text}\n\n`);
  await mkdir(path.dirname(s.out), { recursive: true });
  await writeFile(s.out, `${JSON.stringify(report, null, 2)}\n`);
  log(`results written to ${path.relative(process.cwd(), s.out) || s.out}`);
  if (s.writeDocs) {
    const docs = path.join(REPO_ROOT, 'docs', 'benchmarks.md');
    await writeDocs(docs, report, text);
    log(`rewrote the results section of ${path.relative(process.cwd(), docs)}`);
  }
  const errors = report.workloads.flatMap((w) => w.results).reduce((n, r) => n + r.errors, 0);
  if (errors) log(`${errors} requests failed (see the table)`);
  return errors ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    log(err.stack ?? err.message);
    process.exit(1);
  },
);
