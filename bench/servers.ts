// Starts and stops the servers under test: a kvs node (`node bin/kvs.js run`: supervisor +
// storage + gateway) and a single-member etcd 3.4 (/usr/bin/etcd with its default
// durability), each on free loopback ports with its own temp data dir, removed at stop.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { lstat, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { KvClient } from '../testkit/kv-client.js';
import { etcdArgs, freePorts } from '../testkit/loopback.js';
import { processTree, pssBytes, rssBytes } from '../testkit/proc.js';
import { scrapeFsyncs } from './fsyncs.js';
import type { System } from './system.js';

/** Repository root (this file runs as dist/bench/servers.js). */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const KVS_BIN = path.join(REPO_ROOT, 'bin', 'kvs.js');
export const ETCD_BIN = '/usr/bin/etcd';

export interface DiskUsage {
  /** Allocated bytes (as du counts them). */
  db: number;
  wal: number;
  /** File sizes (as ls shows them; larger when a file is sparse). */
  dbApparent: number;
  walApparent: number;
}

export interface Server {
  system: System;
  /** host:port of the etcd v3 gRPC API. */
  endpoint: string;
  dataDir: string;
  /** The server's processes now (kvs: supervisor and its children). */
  pids(): number[];
  rss(): number;
  /** Proportional set size of the server's processes (shared pages counted once). */
  pss(): number;
  disk(): Promise<DiskUsage>;
  /** Last 64 KiB of the server's output. */
  output(): string;
  /**
   * WAL fsyncs so far, from the server's metrics (a cluster: all running members' summed);
   * null when a scrape fails.
   */
  fsyncs(): Promise<number | null>;
  /** http://host:port of the server's --metrics-addr (kvs: also the console; etcd: its /metrics). */
  metricsBase?: string;
  /** SIGTERM, wait for exit (SIGKILL after 15 s), remove the data dir. Idempotent. */
  stop(): Promise<void>;
}

// ------------------------------------------------------------------ last-resort cleanup

const live = new Map<number, { group: boolean }>();
const dirs = new Set<string>();
let hooked = false;

/**
 * Records a process (or process group) and a temp dir as this run's, so that they are killed
 * and removed even when the bench exits on an error or a signal (bench/cluster-servers.ts uses it too).
 */
export const cleanup = {
  process(pid: number, group: boolean): void {
    hook();
    live.set(pid, { group });
  },
  processGone(pid: number): void {
    live.delete(pid);
  },
  dir(d: string): void {
    hook();
    dirs.add(d);
  },
  dirGone(d: string): void {
    dirs.delete(d);
  },
};

function hook(): void {
  if (hooked) return;
  hooked = true;
  const killAll = (): void => {
    for (const [pid, { group }] of live) {
      try {
        process.kill(group ? -pid : pid, 'SIGKILL');
      } catch {}
    }
    live.clear();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
    dirs.clear();
  };
  process.on('exit', killAll);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      killAll();
      process.exit(128 + (os.constants.signals[sig] ?? 1));
    });
  }
}

// ------------------------------------------------------------------ helpers

export function env(drop: (name: string) => boolean): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !drop(k) && k !== 'NODE_TEST_CONTEXT') out[k] = v;
  return out;
}

export class Tail {
  private buf = '';
  push(s: string): void {
    this.buf = (this.buf + s).slice(-64 * 1024);
  }
  toString(): string {
    return this.buf;
  }
}

async function du(p: string): Promise<{ allocated: number; apparent: number }> {
  let allocated = 0;
  let apparent = 0;
  let st;
  try {
    st = await lstat(p);
  } catch {
    return { allocated, apparent };
  }
  if (st.isDirectory()) {
    for (const name of await readdir(p)) {
      const sub = await du(path.join(p, name));
      allocated += sub.allocated;
      apparent += sub.apparent;
    }
  } else {
    allocated += st.blocks * 512;
    apparent += st.size;
  }
  return { allocated, apparent };
}

export async function diskUsage(db: string, wal: string): Promise<DiskUsage> {
  const [d, w] = await Promise.all([du(db), du(wal)]);
  return { db: d.allocated, wal: w.allocated, dbApparent: d.apparent, walApparent: w.apparent };
}

/** Resolves once Maintenance.Status answers; rejects if the process exits or after `ms`. */
export async function waitReady(endpoint: string, child: ChildProcess, ms: number, what: string, out: Tail): Promise<void> {
  const deadline = Date.now() + ms;
  let last = '';
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${what} exited before it was ready\n--- output ---\n${out}`);
    }
    const c = new KvClient(endpoint);
    try {
      await c.status(1000);
      return;
    } catch (err) {
      last = (err as Error).message;
    } finally {
      c.close();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} not ready at ${endpoint} after ${ms} ms (${last})\n--- output ---\n${out}`);
}

/** SIGTERM, then SIGKILL (of its group) after `graceMs`; then nothing of the group is left. */
export async function stopChild(child: ChildProcess, exited: Promise<void>, group: boolean, graceMs: number): Promise<void> {
  const pid = child.pid!;
  const kill = (target: number) => {
    try {
      process.kill(target, 'SIGKILL');
    } catch {} // ESRCH: already gone
  };
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGTERM');
    const t = setTimeout(() => kill(group ? -pid : pid), graceMs);
    await exited;
    clearTimeout(t);
  }
  if (group) kill(-pid); // nothing of the group survives its leader
}

async function launch(
  system: System,
  start: (dataDir: string) => Promise<{ child: ChildProcess; endpoint: string; metricsUrl: string; group: boolean; out: Tail }>,
  paths: (dataDir: string) => { db: string; wal: string },
): Promise<Server> {
  hook();
  for (let attempt = 1; ; attempt++) {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), `kvs-bench-${system}-`));
    dirs.add(dataDir);
    const { child, endpoint, metricsUrl, group, out } = await start(dataDir);
    const pid = child.pid!;
    live.set(pid, { group });
    const exited = new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once('exit', () => r())));
    let stopped: Promise<void> | undefined;
    const stop = (): Promise<void> =>
      (stopped ??= (async () => {
        await stopChild(child, exited, group, 15_000);
        live.delete(pid);
        await rm(dataDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
        dirs.delete(dataDir);
      })());
    try {
      await waitReady(endpoint, child, 30_000, system, out);
    } catch (err) {
      await stop();
      if (attempt < 3 && /address already in use|EADDRINUSE/i.test(out.toString())) continue;
      throw err;
    }
    const p = paths(dataDir);
    return {
      system,
      endpoint,
      dataDir,
      pids: () => processTree(pid),
      rss: () => rssBytes(processTree(pid)),
      pss: () => pssBytes(processTree(pid)),
      disk: () => diskUsage(p.db, p.wal),
      output: () => out.toString(),
      fsyncs: () => scrapeFsyncs(system, [metricsUrl]),
      metricsBase: metricsUrl.replace(/\/metrics$/, ''),
      stop,
    };
  }
}

function capture(child: ChildProcess): Tail {
  const out = new Tail();
  child.stdout?.on('data', (b: Buffer) => out.push(b.toString()));
  child.stderr?.on('data', (b: Buffer) => out.push(b.toString()));
  return out;
}

// ------------------------------------------------------------------ the two servers

/** An object store for a kvs node: its flags and credentials; `remove` drops what it holds. */
export interface KvsObjectStore {
  args: string[];
  env: Record<string, string>;
  remove(): Promise<void>;
}

/** A fresh local-directory object store (`--s3-endpoint file://<temp dir>`), sync upload on. */
export async function localObjectStore(): Promise<KvsObjectStore> {
  hook();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-bench-objects-'));
  dirs.add(dir);
  return {
    args: ['--s3-endpoint', pathToFileURL(dir).href, '--s3-bucket', 'b', '--wal-sync-upload'],
    env: {},
    async remove() {
      await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
      dirs.delete(dir);
    },
  };
}

/**
 * Every server the bench starts (kvs and etcd alike, single nodes and cluster members) runs
 * detached: in its own process group, which the bench kills as one, and its own session. On a
 * kernel with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on in Debian's
 * kernels) a session is a scheduling group, and the CPU is shared fairly between groups before
 * it is shared between their threads: a server in a session of its own competes with the load
 * generators as a service in its own cgroup does. Both systems must get the same: with kvs
 * alone detached (until 2026-11-28), etcd shared the load generators' group and kvs did not,
 * which cost kvs about a fifth of its par-put throughput under etcd's Go client, and etcd
 * about as much when it was the one detached (docs/perf/scheduling-group.md).
 */
export const SERVER_SESSION = true;

/**
 * `store`: an object store; `flags`: more flags for `kvs run` (--kvs-flags); `extraEnv`: set in
 * the node's environment (the bench passes no KVS_* variable through otherwise; breakdown.ts:
 * KVS_STAGE_TRACE). The node serves its metrics on a free port (--metrics-addr) for the fsync
 * counts.
 */
export async function startKvs(store?: KvsObjectStore, flags: readonly string[] = [], extraEnv: Record<string, string> = {}): Promise<Server> {
  const server = await launch(
    'kvs',
    async (dataDir) => {
      const [port, metricsPort] = await freePorts(2);
      const endpoint = `127.0.0.1:${port}`;
      const metricsAddr = `127.0.0.1:${metricsPort}`;
      const args = [KVS_BIN, 'run', '--data-dir', dataDir, '--listen', endpoint, '--metrics-addr', metricsAddr, ...(store?.args ?? []), ...flags];
      const child = spawn(process.execPath, args, {
        cwd: REPO_ROOT,
        env: { ...env((k) => k.startsWith('KVS_')), ...store?.env, ...extraEnv },
        detached: SERVER_SESSION, // its own process group (supervisor, storage, gateway) and session
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      return { child, endpoint, metricsUrl: `http://${metricsAddr}/metrics`, group: true, out: capture(child) };
    },
    (d) => ({ db: path.join(d, 'db', 'data.mdb'), wal: path.join(d, 'wal') }),
  );
  if (!store) return server;
  const stop = server.stop;
  return { ...server, stop: async () => (await stop(), await store.remove()) };
}

export function startEtcd(): Promise<Server> {
  return launch(
    'etcd',
    async (dataDir) => {
      const [clientPort, peerPort] = await freePorts(2);
      const name = `bench-${process.pid}`;
      const child = spawn(
        ETCD_BIN,
        etcdArgs(name, dataDir, clientPort, peerPort),
        // ETCD_* variables (e.g. from /etc/default/etcd) would silently configure etcd.
        // Detached as kvs is: see SERVER_SESSION.
        { env: env((k) => k.startsWith('ETCD')), detached: SERVER_SESSION, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      // etcd 3.4 serves /metrics on its client URL.
      return { child, endpoint: `127.0.0.1:${clientPort}`, metricsUrl: `http://127.0.0.1:${clientPort}/metrics`, group: SERVER_SESSION, out: capture(child) };
    },
    (d) => ({ db: path.join(d, 'member', 'snap', 'db'), wal: path.join(d, 'member', 'wal') }),
  );
}

/** `store`, `kvsFlags`: kvs's object store and extra flags (etcd runs without either). */
export function startServer(system: System, store?: KvsObjectStore, kvsFlags: readonly string[] = []): Promise<Server> {
  return system === 'kvs' ? startKvs(store, kvsFlags) : startEtcd();
}

/** Installs Debian's etcd-server if /usr/bin/etcd is missing (without starting its daemon). */
export function ensureEtcd(log: (s: string) => void): void {
  if (existsSync(ETCD_BIN)) return;
  log(`${ETCD_BIN} not found: installing etcd-server with apt-get`);
  const root = process.getuid?.() === 0;
  const sh = (script: string): void => {
    execFileSync(root ? 'sh' : 'sudo', root ? ['-c', script] : ['-n', 'sh', '-c', script], {
      stdio: 'inherit',
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  };
  // policy-rc.d: the package's maintainer scripts must not start a daemon on :2379.
  const policy = '/usr/sbin/policy-rc.d';
  const ownPolicy = !existsSync(policy);
  if (ownPolicy) sh(`printf '#!/bin/sh\\nexit 101\\n' > ${policy} && chmod 755 ${policy}`);
  try {
    sh('apt-get -o Acquire::Retries=3 update && apt-get -o Acquire::Retries=3 install -y --no-install-recommends etcd-server </dev/null');
  } finally {
    if (ownPolicy) sh(`rm -f ${policy}`);
  }
  if (!existsSync(ETCD_BIN)) throw new Error(`apt-get install etcd-server did not provide ${ETCD_BIN}`);
}
