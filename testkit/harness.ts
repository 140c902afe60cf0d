// Integration-test harness: real etcd and kvs processes, etcdctl / `kvs ctl` runners and
// etcd3 clients, all cleaned up when the test ends (the process plumbing under them, temp
// dirs and ports included, is process.ts, and is re-exported here).

import assert from 'node:assert/strict';
import { etcdArgs, freePorts } from './loopback.js';
import { type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after as afterAll } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { noop } from 'cockatiel';
import { Etcd3 } from 'etcd3';
import { socketPath } from '../shared/config.js';
import { service } from '../shared/proto/index.js';
import {
  REPO_ROOT, TailBuffer, cleanEnv, describeExit, drained, killQuietly, launch, onCleanup, reapGroup, reservePort, run, runCommand, tail, tempDir, terminate,
  type Ctx, type CmdOptions, type CmdResult, type ExitInfo, type Proc,
} from './process.js';
// The harness is the tests' one import: the process plumbing is theirs through it.
export {
  REPO_ROOT, freePort, onCleanup, portClaimName, reservePort, RESERVED_PORTS_FROM, runCommand, startProcess, tempDir,
  type CmdOptions, type CmdResult, type Ctx, type ExitInfo, type ServerProcess,
} from './process.js';
export { freePorts };

export const KVS_BIN = path.join(REPO_ROOT, 'bin', 'kvs.js');
export const ETCD_BIN = '/usr/bin/etcd';
export const ETCDCTL_BIN = '/usr/bin/etcdctl';

/**
 * A Ctx for resources shared by all tests of one file (a server started at the top level):
 * cleaned up after the file's tests, by node:test's top-level `after`.
 */
export const fileScope: Ctx = {
  after: (fn) => afterAll(() => (fn as unknown as () => unknown)?.()),
};

/**
 * Wait until a Maintenance.Status call to `endpoint` succeeds (fresh etcd3 client per
 * probe, short deadline, backoff 25 ms doubling to 500 ms), the process exits (reject),
 * or `deadlineMs` passes (reject).
 */
async function waitReady(endpoint: string, proc: Proc, deadlineMs: number, what: string, output: () => string, tls?: ClientTls): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  let delay = 25;
  let lastError = 'no attempt made';
  const exitedFirst = proc.exited.then((info) => {
    throw new Error(`${what} exited (${describeExit(info)}) before becoming ready`);
  });
  exitedFirst.catch(() => {}); // handled via the races below
  while (Date.now() < deadline) {
    const probe = new Etcd3({ hosts: `${tls ? 'https' : 'http'}://${endpoint}`, dialTimeout: 1000, ...(tls ? { credentials: etcd3Credentials(tls) } : {}) });
    try {
      await Promise.race([
        probe.maintenance.status({ deadline: Date.now() + Math.min(2000, Math.max(100, deadline - Date.now())) }),
        exitedFirst,
      ]);
      return;
    } catch (err) {
      // With auth enabled, Status needs a user: an auth refusal means the server is up.
      if (/user name is empty|invalid auth token/.test((err as Error).message)) return;
      if (proc.exitInfo) {
        await drained(proc);
        throw new Error(`${(err as Error).message}\n--- ${what} output ---\n${tail(output())}`);
      }
      lastError = (err as Error).message;
    } finally {
      probe.close();
    }
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, Math.min(delay, deadline - Date.now()))))),
      exitedFirst.catch(() => {}),
    ]);
    clearTimeout(timer);
    delay = Math.min(delay * 2, 500);
  }
  throw new Error(
    `${what} not ready at ${endpoint} after ${deadlineMs} ms (last error: ${lastError})\n--- ${what} output ---\n${tail(output())}`,
  );
}

function looksLikePortClash(output: string): boolean {
  return /address already in use|EADDRINUSE/i.test(output);
}

const ControlClient = grpc.makeGenericClientConstructor(service('kvs.control.Control'), 'Control');

interface ControlStatus {
  supervisorPid: number;
  listen: string;
  components: { name: string; state: string; pid: number }[];
}

/** A node's own Control.Status, on its data directory's control socket; undefined while none answers there. */
function controlStatus(dataDir: string): Promise<ControlStatus | undefined> {
  const c = new ControlClient(`unix:${socketPath(dataDir, 'ctl')}`, grpc.credentials.createInsecure()) as grpc.Client & Record<string, Function>;
  return new Promise((resolve) => {
    c.Status!({}, { deadline: Date.now() + 2000 }, (err: grpc.ServiceError | null, res?: ControlStatus) => {
      c.close();
      resolve(err ? undefined : res);
    });
  });
}

/**
 * After waitReady: waits until the supervisor we started (`proc`, on its data directory's control
 * socket) reports its gateway ready on `listen`. Its gateway then holds the port (nothing else
 * can listen there meanwhile), so what answers there is this node. A Status answer on the port
 * alone does not say so: another process may have the port (one that took it while this node
 * was down, between kill9() and restart()), and answer the probe while this node's gateway
 * fails to listen and the node exits.
 */
async function waitOwnGateway(dataDir: string, proc: Proc, listen: string, deadlineMs: number, output: () => string): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  let delay = 25;
  let last = 'nothing answers on its control socket';
  for (;;) {
    if (proc.exitInfo) {
      await drained(proc);
      const clash = looksLikePortClash(output()) ? `: ${listen} is taken by another process, which answered the readiness probe in its place` : '';
      throw new Error(`kvs exited (${describeExit(proc.exitInfo)}) before its gateway served ${listen}${clash}\n--- kvs output ---\n${tail(output())}`);
    }
    const st = await controlStatus(dataDir);
    if (st) {
      const gateway = st.components.find((c) => c.name === 'gateway');
      if (st.supervisorPid === proc.pid && st.listen === listen && gateway?.state === 'ready') return;
      last = `supervisor ${st.supervisorPid} (started: ${proc.pid}) on ${st.listen}, gateway ${gateway?.state ?? 'absent'}`;
    }
    if (Date.now() > deadline) throw new Error(`kvs (pid ${proc.pid}) did not report its gateway ready on ${listen} within ${deadlineMs} ms (${last})\n--- kvs output ---\n${tail(output())}`);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([new Promise<void>((resolve) => (timer = setTimeout(resolve, delay))), proc.exited]);
    clearTimeout(timer);
    delay = Math.min(delay * 2, 500);
  }
}

/**
 * Whether a process of group `pgid` still runs. A zombie does not: it has released its files,
 * locks and sockets, and runs nothing more.
 */
function groupRuns(pgid: number): boolean {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && state !== 'Z' && state !== 'X') return true;
  }
  return false;
}

// ---------------------------------------------------------------- TLS

/** A client's TLS material, PEM: the CA it trusts, and a certificate for mutual TLS. */
export interface ClientTls {
  ca: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/** The etcd3 client's `credentials` for `tls`. */
export function etcd3Credentials(tls: ClientTls): { rootCertificate: Buffer; certChain?: Buffer; privateKey?: Buffer } {
  return { rootCertificate: tls.ca, ...(tls.cert && tls.key ? { certChain: tls.cert, privateKey: tls.key } : {}) };
}

/** A server's TLS files (paths): its certificate and key, and the CA of its clients (mTLS). */
export interface ServerTlsFiles {
  cert: string;
  key: string;
  clientCa?: string;
}

// ---------------------------------------------------------------- etcd

export interface EtcdNode {
  /** '127.0.0.1:PORT' */
  endpoint: string;
  dataDir: string;
  name: string;
  peerPort: number;
  process: ChildProcess;
  pid: number;
  /** Last 64 KiB of etcd's stderr (+ stdout). */
  stderr(): string;
  /** SIGTERM, wait for exit (SIGKILL after 10 s). Idempotent. The dir is removed at test end. */
  stop(): Promise<void>;
}

let etcdSeq = 0;

/** Start a single-member /usr/bin/etcd on free 127.0.0.1 ports with its own temp data dir. */
export async function startEtcd(t: Ctx, extraArgs: string[] = [], opts: { tls?: ServerTlsFiles; probe?: ClientTls } = {}): Promise<EtcdNode> {
  const dataDir = await tempDir(t, 'kvs-etcd-');
  for (let attempt = 1; ; attempt++) {
    const [clientPort, peerPort] = (await freePorts(2)) as [number, number];
    const name = `etcd-${process.pid}-${++etcdSeq}`;
    const endpoint = `127.0.0.1:${clientPort}`;
    const out = new TailBuffer(64 * 1024);
    const proc = await launch(
      ETCD_BIN,
      [...etcdArgs(name, dataDir, clientPort, peerPort), ...(opts.tls ? etcdTlsArgs(clientPort, opts.tls) : []), ...extraArgs],
      // ETCD_* variables (e.g. from /etc/default/etcd) would silently configure etcd.
      { env: cleanEnv(undefined, (k) => k.startsWith('ETCD')), detached: false, out },
    );
    const stop = async (): Promise<void> => {
      await terminate(proc, 'SIGTERM', 10_000);
    };
    onCleanup(t, stop);
    try {
      await waitReady(endpoint, proc, 20_000, 'etcd', () => out.toString(), opts.probe);
    } catch (err) {
      await stop();
      if (attempt < 3 && looksLikePortClash(out.toString())) {
        await rm(dataDir, { recursive: true, force: true });
        await mkdir(dataDir);
        continue;
      }
      throw err;
    }
    return { endpoint, dataDir, name, peerPort, process: proc.child, pid: proc.pid, stderr: () => out.toString(), stop };
  }
}

/** etcd's flags for a TLS client port (they override etcdArgs' http URLs: the last flag wins). */
function etcdTlsArgs(clientPort: number, tls: ServerTlsFiles): string[] {
  const url = `https://127.0.0.1:${clientPort}`;
  return [
    `--listen-client-urls=${url}`,
    `--advertise-client-urls=${url}`,
    `--cert-file=${tls.cert}`,
    `--key-file=${tls.key}`,
    ...(tls.clientCa ? [`--trusted-ca-file=${tls.clientCa}`, '--client-cert-auth'] : []),
  ];
}

// ---------------------------------------------------------------- kvs

export interface KvsOptions {
  /** Extra arguments after `run --data-dir D --listen 127.0.0.1:P`. */
  args?: string[];
  /** Added to the environment (KVS_LOG_LEVEL is removed unless given here). */
  env?: Record<string, string>;
  /** Use this data dir (caller owns it) instead of a fresh temp dir. */
  dataDir?: string;
  /** Run with an object store (adds --s3-endpoint, --s3-bucket, --s3-prefix). */
  objectStore?: ObjectStoreSpec;
  /** The client port speaks TLS: the readiness probe connects with this. */
  probe?: ClientTls;
}

/** Where a node keeps its objects: a `file://` directory, or an S3 endpoint. */
export interface ObjectStoreSpec {
  endpoint: string;
  bucket: string;
  prefix: string;
}

/** A fresh local-directory object store (file://), removed when `t` finishes. */
export async function localObjectStore(t: Ctx, prefix = 'node/'): Promise<ObjectStoreSpec & { root: string }> {
  const root = await tempDir(t, 'kvs-objects-');
  return { root, endpoint: `file://${root}`, bucket: 'kvs-test', prefix };
}

export function objectStoreArgs(s: ObjectStoreSpec): string[] {
  return ['--s3-endpoint', s.endpoint, '--s3-bucket', s.bucket, '--s3-prefix', s.prefix];
}

export interface KvsNode {
  /** '127.0.0.1:PORT' */
  readonly endpoint: string;
  readonly port: number;
  readonly dataDir: string;
  /** pid of the current `kvs run` (the supervisor; also its process group id). */
  readonly pid: number;
  readonly process: ChildProcess;
  /** Send `signal` to the supervisor only and await its exit (SIGKILL to the group after 15 s). */
  stop(signal?: NodeJS.Signals): Promise<ExitInfo>;
  /**
   * SIGKILL the whole process group (supervisor + storage/gateway children) and await the exit
   * of every one of them (the supervisor's exit alone leaves its components dying a moment longer).
   */
  kill9(): Promise<ExitInfo>;
  /**
   * Start again on the same data dir and port (stops first, with SIGTERM, if still running).
   * Rejects if the node cannot listen there (another process took the port meanwhile).
   */
  restart(): Promise<void>;
  /** Captured stdout+stderr of all runs of this node (last 1 MiB). */
  output(): string;
  /** `node bin/kvs.js ctl --data-dir <dataDir> ...args`. Never throws on non-zero exit. */
  ctl(args: string[], opts?: CmdOptions): Promise<CmdResult>;
}

/**
 * Start `node bin/kvs.js run` detached (own process group) on a reserved port (reservePort), and
 * wait for Maintenance.Status there and for its own supervisor to report its gateway ready.
 */
export async function startKvs(t: Ctx, opts: KvsOptions = {}): Promise<KvsNode> {
  const dataDir = opts.dataDir ?? (await tempDir(t, 'kvs-node-'));
  const env = cleanEnv(opts.env, (k) => k === 'KVS_LOG_LEVEL');
  const out = new TailBuffer(1024 * 1024);
  let port = 0;
  let proc: Proc | undefined;

  const start = async (retryOnPortClash: boolean): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      // restart() binds the same port again: reserved for the test (see reservePort).
      if (retryOnPortClash) port = await reservePort(t);
      const p = await launch(
        process.execPath,
        [KVS_BIN, 'run', '--data-dir', dataDir, '--listen', `127.0.0.1:${port}`, ...(opts.objectStore ? objectStoreArgs(opts.objectStore) : []), ...(opts.args ?? [])],
        { env, detached: true, out },
      );
      proc = p;
      onCleanup(t, () => terminate(p, 'SIGTERM', 15_000));
      try {
        await waitReady(`127.0.0.1:${port}`, p, 30_000, 'kvs', () => out.toString(), opts.probe);
        await waitOwnGateway(dataDir, p, `127.0.0.1:${port}`, 30_000, () => out.toString());
        return;
      } catch (err) {
        await terminate(p, 'SIGTERM', 5_000);
        if (retryOnPortClash && attempt < 3 && looksLikePortClash(out.toString())) continue;
        throw err;
      }
    }
  };
  await start(true);

  const current = (): Proc => proc!;
  const node: KvsNode = {
    get endpoint() {
      return `127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    dataDir,
    get pid() {
      return current().pid;
    },
    get process() {
      return current().child;
    },
    stop: (signal = 'SIGTERM') => terminate(current(), signal, 15_000),
    kill9: async () => {
      const p = current();
      killQuietly(-p.pid, 'SIGKILL');
      const info = await p.exited;
      reapGroup(p);
      // The components are not our children: no exit event reaches us, so /proc is watched.
      // A component that the kernel has not finished killing yet holds what a restart takes
      // over (its sockets, its LMDB locks, the WAL's descriptors) for as long.
      const deadline = Date.now() + 10_000;
      while (groupRuns(p.pid)) {
        if (Date.now() > deadline) throw new Error(`kill -9 of kvs (group ${p.pid}): a process of it still runs after 10 s`);
        await new Promise((resolve) => setTimeout(resolve, 1));
      }
      return info;
    },
    restart: async () => {
      await terminate(current(), 'SIGTERM', 15_000);
      await start(false);
    },
    output: () => out.toString(),
    ctl: (args, o = {}) =>
      run(process.execPath, [KVS_BIN, 'ctl', '--data-dir', dataDir, ...args], {
        ...o,
        env: { ...env, ...o.env },
        timeoutMs: o.timeoutMs ?? 30_000,
      }),
  };
  return node;
}

// ---------------------------------------------------------------- commands and clients

/** `kvs run` with `args` on a data directory under `dir`, listening nowhere it could: its result (for flags it must refuse). */
export function runKvsRefused(dir: string, args: string[], opts: CmdOptions = {}): Promise<CmdResult> {
  return runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', path.join(dir, 'data'), '--listen', '127.0.0.1:1', ...args], opts);
}

/** `kvs run` with `args` refuses to start: exit code 2 and one line on stderr, matching `expected`. */
export async function assertKvsRefuses(dir: string, args: string[], expected: RegExp): Promise<void> {
  const r = await runKvsRefused(dir, args);
  assert.equal(r.exitCode, 2, `${args.join(' ')}: ${r.stderr}`);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, r.stderr);
  assert.match(lines[0]!, expected);
}

/** Run `/usr/bin/etcdctl --endpoints=<endpoint> ...args` with ETCDCTL_API=3 (other ETCDCTL_* dropped). */
export function etcdctl(endpoint: string, args: string[], opts: CmdOptions = {}): Promise<CmdResult> {
  const env = cleanEnv({ ETCDCTL_API: '3', ...opts.env }, (k) => k.startsWith('ETCDCTL_'));
  return run(ETCDCTL_BIN, [`--endpoints=${endpoint}`, ...args], { ...opts, env });
}

/** A long-running etcdctl (such as `watch`), read as it prints. */
export interface EtcdctlProcess {
  /** stdout so far. */
  stdout(): string;
  /** Resolves once stdout satisfies `done`; fails after `timeoutMs`, or if etcdctl exits first. */
  until(done: (stdout: string) => boolean, timeoutMs?: number): Promise<void>;
  /** Writes to etcdctl's stdin (interactive mode). */
  write(text: string): void;
  /** SIGTERM; resolves with everything it printed. */
  stop(): Promise<CmdResult>;
}

/** Starts `/usr/bin/etcdctl --endpoints=<endpoint> ...args` in the background; stopped when `t` ends. */
export async function startEtcdctl(t: Ctx, endpoint: string, args: string[]): Promise<EtcdctlProcess> {
  const env = cleanEnv({ ETCDCTL_API: '3' }, (k) => k.startsWith('ETCDCTL_'));
  const out = new TailBuffer(1024 * 1024);
  const proc = await launch(ETCDCTL_BIN, [`--endpoints=${endpoint}`, ...args], { env, detached: false, out, stdin: 'pipe' });
  let stdout = '';
  let stderr = '';
  let wake: (() => void) | undefined;
  proc.child.stdout!.on('data', (b: Buffer) => {
    stdout += b.toString();
    wake?.();
  });
  proc.child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  void proc.exited.then(() => wake?.());
  const stop = async (): Promise<CmdResult> => {
    proc.child.stdin?.end();
    const info = await terminate(proc, 'SIGTERM', 5_000);
    await drained(proc);
    const signo = info.signal ? os.constants.signals[info.signal] : undefined;
    return { stdout, stderr, exitCode: info.code ?? (signo !== undefined ? 128 + signo : 1), timedOut: false };
  };
  onCleanup(t, stop);
  return {
    stdout: () => stdout,
    write: (text) => proc.child.stdin!.write(text),
    stop,
    async until(done, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      while (!done(stdout)) {
        const left = deadline - Date.now();
        if (proc.exitInfo || left <= 0) {
          throw new Error(`etcdctl ${args.join(' ')} ${proc.exitInfo ? `exited (${describeExit(proc.exitInfo)})` : `still waiting after ${timeoutMs} ms`}\n--- stdout:\n${stdout}\n--- stderr:\n${stderr}`);
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    },
  };
}

/**
 * An etcd3 client for `endpoint` ('127.0.0.1:PORT' or a URL), closed when `t` finishes. With
 * `tls`, a bare endpoint is https.
 */
/**
 * A deadline for every unary call of the tests' etcd3 clients (streams have none): a server
 * that stops answering fails the test with the call's name, instead of hanging it.
 */
export const TEST_CALL_OPTIONS = (c: { isStream: boolean }) => (c.isStream ? {} : { deadline: Date.now() + 60_000 });

/**
 * The tests' etcd3 clients keep etcd3's retries but have no circuit breaker: each client has one
 * host, and tests kill and restart processes on purpose, so a breaker opened by the failures a
 * test expects would fail its next check for 5 s without asking the server.
 */
export const TEST_FAULT_HANDLING = { host: () => noop };

export function client(t: Ctx, endpoint: string, tls?: ClientTls): Etcd3 {
  const hosts = /^https?:\/\//.test(endpoint) ? endpoint : `${tls ? 'https' : 'http'}://${endpoint}`;
  const c = new Etcd3({ hosts, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING, ...(tls ? { credentials: etcd3Credentials(tls) } : {}) });
  onCleanup(t, () => c.close());
  return c;
}

/**
 * Polls `probe` (25 ms, backing off to 500 ms) until it returns a value other than undefined,
 * and returns it; fails after `deadlineMs` with `what`. For state that changes on a timer of the
 * server (e.g. lease expiry), where there is no event to await.
 */
export async function pollUntil<T>(what: string, probe: () => Promise<T | undefined>, deadlineMs = 60_000): Promise<T> {
  const deadline = Date.now() + deadlineMs;
  let delay = 25;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`gave up after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 500);
  }
}

// ---------------------------------------------------------------- component status

export interface ComponentState {
  name: string;
  state: string;
  pid: number;
  restarts: number;
  lastExit: string;
  /** What the component reports doing (e.g. the archiver's upload position). */
  detail: string;
}

/** `kvs ctl status --json` of a node. */
export async function status(node: KvsNode): Promise<{ ready: boolean; components: ComponentState[] }> {
  const r = await node.ctl(['status', '--json']);
  assert.equal(r.exitCode, 0, `kvs ctl status: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** One component's entry in `kvs ctl status`. */
export async function component(node: KvsNode, name: string): Promise<ComponentState> {
  const c = (await status(node)).components.find((x) => x.name === name);
  assert.ok(c, `no component ${name} in kvs ctl status`);
  return c;
}

/** Polls `kvs ctl status` until `name` satisfies `ok`, or fails after `timeoutMs`. */
export async function waitComponent(node: KvsNode, name: string, ok: (c: ComponentState) => boolean, timeoutMs = 20_000): Promise<ComponentState> {
  const deadline = Date.now() + timeoutMs;
  let last: ComponentState | undefined;
  while (Date.now() < deadline) {
    last = await component(node, name);
    if (ok(last)) return last;
  }
  assert.fail(`${name} did not reach the expected state within ${timeoutMs} ms; last: ${JSON.stringify(last)}\n${node.output().slice(-4000)}`);
}
