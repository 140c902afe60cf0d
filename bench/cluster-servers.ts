// Clusters for the cluster workloads: three kvs nodes (`node bin/kvs.js run --node-id nX
// --peer-listen ...`, sharing one local-directory object store in a temp dir, every other flag
// at its default) or a three-member etcd 3.4 (/usr/bin/etcd with --initial-cluster, each
// member its own data dir, default durability), all on free loopback ports. A member can be
// killed with SIGKILL (kvs: the node's whole process group) and started again on its own data
// dir, ports and flags; stop() stops every member and removes every temp dir.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { freePorts } from '../testkit/loopback.js';
import { KvClient } from '../testkit/kv-client.js';
import { key, value } from './keys.js';
import { processTree, pssBytes, rssBytes } from '../testkit/proc.js';
import { scrapeFsyncs } from './fsyncs.js';
import { ETCD_BIN, KVS_BIN, REPO_ROOT, SERVER_SESSION, Tail, cleanup, diskUsage, env, stopChild, waitReady, type DiskUsage, type Server } from './servers.js';
import type { System } from './system.js';
import type { ClusterControl } from './workload.js';
import { TcpProxy } from '../testkit/proxy.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One member: a process (etcd) or a process group (kvs: supervisor and components). */
class Member {
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  readonly out = new Tail();
  /** SIGKILLs of this member so far (their exits are not failures). */
  kills = 0;

  constructor(
    readonly system: System,
    readonly name: string,
    readonly endpoint: string,
    readonly dataDir: string,
    private readonly command: string,
    private readonly args: string[],
    /** Its Prometheus metrics (kvs: --metrics-addr; etcd: the client URL). */
    readonly metricsUrl: string,
    /** Set in its environment (KVS_* / ETCD_* variables are not passed through otherwise). */
    private readonly extraEnv: Record<string, string> = {},
  ) {}

  /** Every member runs in its own process group and session, as a single server (SERVER_SESSION). */
  private get group(): boolean {
    return SERVER_SESSION;
  }

  get pid(): number | undefined {
    const c = this.child;
    return c && c.exitCode === null && c.signalCode === null ? c.pid : undefined;
  }

  start(): void {
    const child = spawn(this.command, this.args, {
      cwd: REPO_ROOT,
      // KVS_* / ETCD_* variables (e.g. from /etc/default/etcd) would silently configure them.
      env: { ...env((k) => k.startsWith(this.system === 'kvs' ? 'KVS_' : 'ETCD')), ...this.extraEnv },
      detached: this.group, // its own process group, killed as one, and its own session
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    cleanup.process(child.pid!, this.group);
    this.exited = new Promise<void>((r) => child.once('exit', () => r()));
    const push = (b: Buffer) => this.out.push(b.toString());
    child.stdout!.on('data', push);
    child.stderr!.on('data', push);
    this.out.push(`\n--- ${this.name} started (pid ${child.pid}) ---\n`);
  }

  /** Resolves once the member answers Maintenance.Status. */
  ready(ms = 60_000): Promise<void> {
    return waitReady(this.endpoint, this.child!, ms, `${this.system} ${this.name}`, this.out);
  }

  pids(): number[] {
    const pid = this.pid;
    return pid === undefined ? [] : processTree(pid);
  }

  /** SIGKILL to the member's whole process group; resolves once all of it is gone. */
  async kill9(): Promise<number> {
    const child = this.child!;
    const pid = child.pid!;
    this.kills++;
    const t = performance.now();
    try {
      process.kill(this.group ? -pid : pid, 'SIGKILL');
    } catch {}
    await this.exited;
    if (this.group) await this.groupGone(pid);
    cleanup.processGone(pid);
    this.out.push(`\n--- ${this.name} killed with SIGKILL ---\n`);
    return t;
  }

  private async groupGone(pgid: number): Promise<void> {
    for (let i = 0; i < 200; i++) {
      try {
        process.kill(-pgid, 0);
      } catch {
        return; // ESRCH: no process of the group is left
      }
      await sleep(25);
    }
    throw new Error(`${this.system} ${this.name}: processes of group ${pgid} still alive 5 s after SIGKILL`);
  }

  /** SIGTERM, then SIGKILL after `graceMs`; then nothing of the group is left. */
  async stop(graceMs = 15_000): Promise<void> {
    const child = this.child;
    if (!child) return;
    await stopChild(child, this.exited, this.group, graceMs);
    cleanup.processGone(child.pid!);
  }
}

export interface BenchCluster extends ClusterControl {
  readonly system: System;
  /** What startCluster saw on the way (e.g. writes refused before the cluster took them). */
  readonly notes: string[];
  /** The members' client endpoints, in start order. */
  readonly endpoints: string[];
  /** The whole cluster as one Server (CPU, memory, disk of all members), clients on `endpoint`. */
  asServer(endpoint: string): Server;
  /** Every member's recent output, for error reports. */
  output(): string;
  /** Stops every member and removes the data dirs and the object store. Idempotent. */
  stop(): Promise<void>;
}

async function tempDir(prefix: string): Promise<string> {
  const d = await mkdtemp(path.join(os.tmpdir(), prefix));
  cleanup.dir(d);
  return d;
}

async function removeDir(d: string): Promise<void> {
  await rm(d, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
  cleanup.dirGone(d);
}

/** Each running member's Status: the leader it names, and its own member id. */
async function statuses(members: Member[]): Promise<({ leader: string; memberId: string } | undefined)[]> {
  return Promise.all(
    members.map(async (m) => {
      if (m.pid === undefined) return undefined;
      const c = new KvClient(m.endpoint);
      try {
        return await c.status(1000);
      } catch {
        return undefined;
      } finally {
        c.close();
      }
    }),
  );
}

function makeCluster(system: System, members: Member[], dirs: string[], proxies: TcpProxy[] = []): BenchCluster {
  let stopped: Promise<void> | undefined;
  const running = () => members.filter((m) => m.pid !== undefined);
  const cluster: BenchCluster = {
    system,
    notes: [],
    members: members.map((m) => ({ name: m.name, endpoint: m.endpoint })),
    endpoints: members.map((m) => m.endpoint),
    async leader(deadlineMs = 60_000) {
      const deadline = Date.now() + deadlineMs;
      let last = '';
      while (Date.now() < deadline) {
        const live = running();
        const st = await statuses(live);
        const leaders = new Set(st.map((s) => s?.leader));
        const id = [...leaders][0];
        if (leaders.size === 1 && id && id !== '0') {
          const i = st.findIndex((s) => s!.memberId === id);
          if (i >= 0) return members.indexOf(live[i]!);
        }
        last = live.map((m, i) => `${m.name}: ${st[i] ? `leader ${st[i]!.leader}, self ${st[i]!.memberId}` : 'no answer'}`).join('; ');
        await sleep(100);
      }
      throw new Error(`${system} cluster: no leader that every running member names after ${deadlineMs} ms (${last})`);
    },
    kill9: (i) => members[i]!.kill9(),
    async restart(i) {
      const m = members[i]!;
      if (m.pid !== undefined) throw new Error(`${system} ${m.name} is running`);
      m.start();
      await m.ready();
    },
    asServer(endpoint) {
      const pids = () => running().flatMap((m) => m.pids());
      return {
        system,
        endpoint,
        dataDir: members[0]!.dataDir,
        pids,
        rss: () => rssBytes(pids()),
        pss: () => pssBytes(pids()),
        async disk(): Promise<DiskUsage> {
          const all = await Promise.all(members.map((m) => (system === 'kvs' ? diskUsage(path.join(m.dataDir, 'db', 'data.mdb'), path.join(m.dataDir, 'wal')) : diskUsage(path.join(m.dataDir, 'member', 'snap', 'db'), path.join(m.dataDir, 'member', 'wal')))));
          return all.reduce((a, b) => ({ db: a.db + b.db, wal: a.wal + b.wal, dbApparent: a.dbApparent + b.dbApparent, walApparent: a.walApparent + b.walApparent }));
        },
        output: () => cluster.output(),
        fsyncs: () => scrapeFsyncs(system, running().map((m) => m.metricsUrl)),
        stop: () => cluster.stop(),
      };
    },
    output: () => members.map((m) => `=== ${system} ${m.name} ===\n${m.out}`).join('\n'),
    stop: () =>
      (stopped ??= (async () => {
        // All at once (SIGTERM; SIGKILL after 15 s): nothing is measured any more.
        await Promise.all(members.map((m) => m.stop()));
        await Promise.all([...dirs.map(removeDir), ...proxies.map((p) => p.close())]);
      })()),
  };
  return cluster;
}

/**
 * Starts the members (`start`), then waits for a leader they all name. On a failure the
 * cluster is stopped and its members' output rides on the error, so the bench says why.
 */
async function started(cluster: BenchCluster, start: () => Promise<void>): Promise<BenchCluster> {
  try {
    await start();
    await cluster.leader();
  } catch (err) {
    const out = cluster.output();
    await cluster.stop();
    throw Object.assign(err as Error, { output: out });
  }
  return cluster;
}

/** Each member's peer port behind a delay proxy (--peer-delay), or none for 0 ms. */
async function peerProxies(ports: number[], delayMs: number): Promise<TcpProxy[]> {
  if (delayMs <= 0) return [];
  return Promise.all(ports.map(async (port, i) => {
    const proxy = new TcpProxy({ name: `peer-${i + 1}`, target: () => port, delayMs });
    await proxy.start();
    return proxy;
  }));
}

async function kvsCluster(n: number, extra: string[], extraEnv: Record<string, string>, peerDelayMs: number): Promise<BenchCluster> {
  const dirs: string[] = [];
  const objects = await tempDir('kvs-bench-objects-');
  dirs.push(objects);
  const ports = await freePorts(3 * n);
  const proxies = await peerProxies(Array.from({ length: n }, (_, i) => ports[2 * i + 1]!), peerDelayMs);
  const members: Member[] = [];
  for (let i = 0; i < n; i++) {
    const name = `n${i + 1}`;
    const dataDir = await tempDir(`kvs-bench-kvs-${name}-`);
    dirs.push(dataDir);
    const endpoint = `127.0.0.1:${ports[2 * i]}`;
    // Default flags apart from where things are (failure detection, peer buffer, ... at their
    // defaults). In cluster mode a batch is acknowledged once it is durable on the leader and
    // on every connected follower; with a follower missing, once it is in the object store;
    // sealed WAL segments are uploaded in the background (--wal-sync-upload does not apply).
    const metricsAddr = `127.0.0.1:${ports[2 * n + i]}`;
    const args = [KVS_BIN, 'run', '--data-dir', dataDir, '--listen', endpoint, '--node-id', name, '--peer-listen', `127.0.0.1:${ports[2 * i + 1]}`, '--metrics-addr', metricsAddr];
    args.push('--s3-endpoint', pathToFileURL(objects).href, '--s3-bucket', 'b', '--s3-prefix', 'cluster/', ...extra);
    if (proxies.length) args.push('--advertise-peer', `127.0.0.1:${proxies[i]!.port}`);
    members.push(new Member('kvs', name, endpoint, dataDir, process.execPath, args, `http://${metricsAddr}/metrics`, extraEnv));
  }
  // The first alone (it takes the leader lock), then the others together.
  return started(makeCluster('kvs', members, dirs, proxies), async () => {
    members[0]!.start();
    await members[0]!.ready();
    for (const m of members.slice(1)) m.start();
    await Promise.all(members.slice(1).map((m) => m.ready()));
  });
}

async function etcdCluster(n: number, peerDelayMs: number): Promise<BenchCluster> {
  const dirs: string[] = [];
  const ports = await freePorts(2 * n);
  const proxies = await peerProxies(Array.from({ length: n }, (_, i) => ports[2 * i + 1]!), peerDelayMs);
  const token = `kvs-bench-${process.pid}-${Date.now()}`;
  const peerUrl = (i: number) => `http://127.0.0.1:${ports[2 * i + 1]}`;
  // What the other members dial: the proxy in front of the peer port, if any.
  const advertisedPeerUrl = (i: number) => (proxies.length ? `http://127.0.0.1:${proxies[i]!.port}` : peerUrl(i));
  const initial = Array.from({ length: n }, (_, i) => `n${i + 1}=${advertisedPeerUrl(i)}`).join(',');
  const members: Member[] = [];
  for (let i = 0; i < n; i++) {
    const name = `n${i + 1}`;
    const dataDir = await tempDir(`kvs-bench-etcd-${name}-`);
    dirs.push(dataDir);
    const clientUrl = `http://127.0.0.1:${ports[2 * i]}`;
    // etcd's defaults otherwise (heartbeat 100 ms, election timeout 1000 ms, fsync on commit).
    // On a restart the data dir exists, and etcd ignores the --initial-* flags.
    const args = [
      `--name=${name}`,
      `--data-dir=${dataDir}`,
      `--listen-client-urls=${clientUrl}`,
      `--advertise-client-urls=${clientUrl}`,
      `--listen-peer-urls=${peerUrl(i)}`,
      `--initial-advertise-peer-urls=${advertisedPeerUrl(i)}`,
      `--initial-cluster=${initial}`,
      `--initial-cluster-token=${token}`,
      '--initial-cluster-state=new',
      '--logger=zap',
      '--log-outputs=stderr',
    ];
    members.push(new Member('etcd', name, `127.0.0.1:${ports[2 * i]}`, dataDir, ETCD_BIN, args, `${clientUrl}/metrics`));
  }
  // Together: a member serves clients only once the cluster has a quorum.
  return started(makeCluster('etcd', members, dirs, proxies), async () => {
    for (const m of members) m.start();
    await Promise.all(members.map((m) => m.ready()));
  });
}

/**
 * After the members agree on a leader: a Put through the leader is acknowledged and a
 * linearizable Range through every member answers (each retried for up to 60 s, the
 * failures noted), so that the workload does not start in the cluster's first moments.
 */
async function takesWrites(c: BenchCluster): Promise<void> {
  const leader = await c.leader();
  const k = key('cluster-ready', 0);
  const retry = async (what: string, endpoint: string, call: (kv: KvClient) => Promise<unknown>) => {
    const kv = new KvClient(endpoint);
    const t0 = performance.now();
    const errors = new Map<string, number>();
    try {
      for (;;) {
        try {
          await call(kv);
          break;
        } catch (err) {
          const m = (err as Error).message;
          errors.set(m, (errors.get(m) ?? 0) + 1);
          if (performance.now() - t0 > 60_000) throw new Error(`${c.system} cluster: ${what} failed for 60 s: ${[...errors].map(([e, n]) => `${n}× ${e}`).join('; ')}`);
          await sleep(100);
        }
      }
    } finally {
      kv.close();
    }
    if (errors.size) {
      c.notes.push(`${what} failed ${[...errors.values()].reduce((a, b) => a + b)} times before it succeeded after ${((performance.now() - t0) / 1000).toFixed(1)} s: ${[...errors].map(([e, n]) => `${n}× ${e}`).join('; ')}`);
    }
  };
  await retry(`a Put through the leader ${c.members[leader]!.name}`, c.endpoints[leader]!, (kv) => kv.put(k, value(), 5000));
  for (const [i, m] of c.members.entries()) await retry(`a linearizable Range through ${m.name}`, c.endpoints[i]!, (kv) => kv.range(k, {}, 5000));
}

/**
 * Starts an n-member cluster of `system` and waits until every member names one leader.
 * `kvsArgs`: more flags for every kvs node (--kvs-flags);
 * `kvsEnv`: variables for every kvs node (bench/breakdown.ts: KVS_STAGE_TRACE);
 * `peerDelayMs`: each member's peer port behind a proxy that delays both directions (--peer-delay).
 */
export async function startCluster(system: System, n: number, kvsArgs: string[] = [], kvsEnv: Record<string, string> = {}, peerDelayMs = 0): Promise<BenchCluster> {
  for (let attempt = 1; ; attempt++) {
    try {
      const c = await (system === 'kvs' ? kvsCluster(n, kvsArgs, kvsEnv, peerDelayMs) : etcdCluster(n, peerDelayMs));
      try {
        await takesWrites(c);
      } catch (err) {
        const out = c.output();
        await c.stop();
        throw Object.assign(err as Error, { output: out });
      }
      return c;
    } catch (err) {
      const out = (err as { output?: string }).output ?? '';
      // Free ports are picked before the members bind them: another process may win one.
      if (attempt < 3 && /address already in use|EADDRINUSE/i.test(out)) continue;
      throw err; // its `output`: every member's recent output
    }
  }
}
