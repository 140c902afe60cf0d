// Test-kit process plumbing: temp dirs, free and reserved ports, child processes stopped when
// their context ends, commands run to completion. It loads nothing of node:test or of the
// test clients, so the benchmark (which starts etcd, radosgw and kvs with it) can ship it.
//
// Cleanup model: every helper that takes a context `t` pushes its cleanup onto a per-`t`
// stack, run in reverse (LIFO) order by a single `t.after` hook. So a process is always
// stopped before the temp dir it writes to is removed, and a client is closed before the
// server it talks to is stopped. As a last resort, live children are SIGKILLed on process
// 'exit' and on SIGINT/SIGTERM/SIGHUP.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { bindAbstract } from '../shared/data-dir-lock.js';
import { freePorts } from './loopback.js';

/** Repository root (this file compiles to dist/testkit/process.js); children run there. */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Anything with `after` — normally the node:test TestContext (a type only: nothing of node:test is loaded). */
export type Ctx = Pick<TestContext, 'after'>;

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface CmdResult {
  /** Raw stdout (final newline kept). */
  stdout: string;
  stderr: string;
  /** Process exit code; 128+N when killed by signal N (e.g. on timeout). Never throws. */
  exitCode: number;
  timedOut: boolean;
}

export interface CmdOptions {
  /** Written to stdin; without it stdin is /dev/null. */
  input?: string;
  env?: Record<string, string>;
  /** Default 15 s (etcdctl) / 30 s (kvs ctl). */
  timeoutMs?: number;
}

// ---------------------------------------------------------------- cleanup

type Cleanup = () => unknown;
const cleanupStacks = new WeakMap<Ctx, Cleanup[]>();

/** Register `fn` to run when `t` finishes; cleanups run last-registered-first. */
export function onCleanup(t: Ctx, fn: Cleanup): void {
  let stack = cleanupStacks.get(t);
  if (!stack) {
    const s: Cleanup[] = [];
    stack = s;
    cleanupStacks.set(t, s);
    t.after(async () => {
      const errors: unknown[] = [];
      while (s.length > 0) {
        try {
          await s.pop()!();
        } catch (err) {
          errors.push(err);
        }
      }
      if (errors.length === 1) throw errors[0];
      if (errors.length > 1) throw new AggregateError(errors, 'harness cleanup failed');
    });
  }
  stack.push(fn);
}


// ---------------------------------------------------------------- ports and dirs

/** A currently free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/** The first port of the kernel's ephemeral range: bind(0) and outgoing connections take ports from there on. */
function ephemeralLow(): number {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
}

/** Whether `port` on 127.0.0.1 can be listened on now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/** reservePort's ports start here. */
export const RESERVED_PORTS_FROM = 12_000;

/** The abstract socket by which a test process holds a port (reservePort). */
export const portClaimName = (port: number): string => `\0kvs-test/port/${port}`;

/**
 * A port for a server that a test stops and starts again on the same port (a kvs node's client
 * and peer ports: `restart()`), held for this test until `t` ends. A port from freePort() is
 * free only at that moment: while its node is down (after `kill9()`, before `restart()`), any
 * bind(0) on the machine, another test file's server among them, may be given it, and a
 * readiness probe would then be answered by that server (found by a HashKV after a restart that
 * answered another server's revision). So the port comes from 12000-19999: below the kernel's
 * ephemeral range (from 32768 on by default), which bind(0) and outgoing connections never
 * use, and below the Ceph OSD's ports (s3-server.ts: from 20000 on). This process claims it
 * with an abstract unix socket named after it (as shared/data-dir-lock.ts claims a data
 * directory; the kernel releases it when the process dies): every other test process that
 * reserves a port here passes it by until `t` ends.
 */
export async function reservePort(t: Ctx): Promise<number> {
  const low = RESERVED_PORTS_FROM;
  const high = Math.min(20_000, ephemeralLow()) - 1;
  const span = high - low + 1;
  if (span < 1024) return freePort(); // no room below the ephemeral range: the old way
  const first = low + Math.floor(Math.random() * span);
  for (let i = 0; i < span; i++) {
    const port = low + ((first - low + i) % span);
    const claim = await bindAbstract(portClaimName(port));
    if (!claim) continue; // another test process holds it
    claim.unref();
    if (!(await canListen(port))) {
      claim.close(); // something that is not a test (or a test that bound it by number) has it
      continue;
    }
    onCleanup(t, () => new Promise<void>((resolve) => claim.close(() => resolve())));
    return port;
  }
  throw new Error(`no port free in ${low}-${high}`);
}


/** A fresh directory under os.tmpdir(), removed (recursively) when `t` finishes. */
export async function tempDir(t: Ctx, prefix: string): Promise<string> {
  installHooks();
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix.endsWith('-') ? prefix : `${prefix}-`));
  liveDirs.add(dir);
  onCleanup(t, async () => {
    await rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 });
    liveDirs.delete(dir);
  });
  return dir;
}

// ---------------------------------------------------------------- process bookkeeping

/** Keeps the last `limit` bytes written to it. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  constructor(private readonly limit: number) {}
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.chunks.length > 1 && this.size - this.chunks[0]!.length >= this.limit) {
      this.size -= this.chunks.shift()!.length;
    }
  }
  toString(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.limit)).toString('utf8');
  }
}

export interface Proc {
  child: ChildProcess;
  pid: number;
  /** Spawned detached: `pid` is also its process group id. */
  group: boolean;
  exited: Promise<ExitInfo>;
  exitInfo?: ExitInfo;
  /** Resolves when stdout/stderr are closed too (all output captured). */
  closed: Promise<void>;
}

/** pid -> kill the whole group? Entries live until the process (group) is known dead. */
const live = new Map<number, boolean>();
/** Temp dirs not yet removed by their cleanup. */
const liveDirs = new Set<string>();
let hooksInstalled = false;

export function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // ESRCH: already gone
  }
}

function killAllSync(): void {
  for (const [pid, group] of live) killQuietly(group ? -pid : pid, 'SIGKILL');
  live.clear();
  for (const dir of liveDirs) {
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // best effort
    }
  }
  liveDirs.clear();
}

function installHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  process.on('exit', killAllSync);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      killAllSync();
      process.removeListener(sig, handler);
      // Nobody else handles it: re-raise so the default action (termination) happens.
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    };
    process.on(sig, handler);
  }
}

export function cleanEnv(extra: Record<string, string> | undefined, drop: (name: string) => boolean): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== 'NODE_TEST_CONTEXT' && !drop(k)) env[k] = v;
  }
  return { ...env, ...extra };
}

export async function launch(
  cmd: string,
  args: string[],
  opts: { env: Record<string, string>; detached: boolean; out: TailBuffer; stdin?: 'pipe' },
): Promise<Proc> {
  installHooks();
  const child = spawn(cmd, args, {
    cwd: REPO_ROOT,
    env: opts.env,
    detached: opts.detached,
    stdio: [opts.stdin ?? 'ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', () => resolve({ code: null, signal: null })); // spawn failure
  });
  if (child.pid === undefined) {
    const err = await new Promise<Error>((resolve) => child.once('error', resolve));
    throw new Error(`failed to spawn ${cmd}: ${err.message}`);
  }
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const proc: Proc = { child, pid: child.pid, group: opts.detached, exited, closed };
  live.set(proc.pid, proc.group);
  void exited.then((info) => {
    proc.exitInfo = info;
    if (!proc.group) live.delete(proc.pid);
  });
  child.stdout!.on('data', (b: Buffer) => opts.out.push(b));
  child.stderr!.on('data', (b: Buffer) => opts.out.push(b));
  return proc;
}

/** Signal the process, wait up to `graceMs` for it to exit, then SIGKILL (its group). */
export async function terminate(proc: Proc, signal: NodeJS.Signals, graceMs: number): Promise<ExitInfo> {
  if (!proc.exitInfo) {
    killQuietly(proc.pid, signal);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      proc.exited.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs))),
    ]);
    clearTimeout(timer);
    if (timedOut) killQuietly(proc.group ? -proc.pid : proc.pid, 'SIGKILL');
  }
  const info = await proc.exited;
  reapGroup(proc);
  return info;
}

/** The leader is gone; make sure nothing else in its process group survives. */
export function reapGroup(proc: Proc): void {
  if (proc.group) killQuietly(-proc.pid, 'SIGKILL');
  live.delete(proc.pid);
}

/** After exit: give the pipes a moment to deliver the last output (children may hold them open). */
export async function drained(proc: Proc, ms = 1000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([proc.closed, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

export function tail(s: string, max = 16 * 1024): string {
  return s.length > max ? `...${s.slice(-max)}` : s;
}

export function describeExit(info: ExitInfo): string {
  return info.signal ? `signal ${info.signal}` : `code ${info.code}`;
}

// ---------------------------------------------------------------- other servers

export interface ServerProcess {
  pid: number;
  /** Last 64 KiB of its stdout+stderr. */
  output(): string;
  /** Resolves when the process exits. */
  exited: Promise<ExitInfo>;
  /** `signal` (default SIGTERM), wait up to `graceMs` (10 s), then SIGKILL. Idempotent. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<ExitInfo>;
}

/** Start a long-running helper process (in the foreground), stopped when `t` finishes. */
export async function startProcess(t: Ctx, cmd: string, args: string[], opts: { env?: Record<string, string> } = {}): Promise<ServerProcess> {
  const out = new TailBuffer(64 * 1024);
  const proc = await launch(cmd, args, { env: cleanEnv(opts.env, () => false), detached: false, out });
  const stop = (signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000) => terminate(proc, signal, graceMs);
  onCleanup(t, () => stop());
  return { pid: proc.pid, output: () => out.toString(), exited: proc.exited, stop };
}

/** Run a command to completion (no shell); never throws on a non-zero exit. */
export function runCommand(file: string, args: string[], opts: CmdOptions = {}): Promise<CmdResult> {
  return run(file, args, { ...opts, env: cleanEnv(opts.env, () => false) });
}

// ---------------------------------------------------------------- commands

/** Runs `file` to completion (no shell) with exactly `opts.env`; never throws on a non-zero exit. */
export async function run(file: string, args: string[], opts: CmdOptions & { env: Record<string, string> }): Promise<CmdResult> {
  const r = await execa(file, args, {
    reject: false,
    cwd: REPO_ROOT,
    env: opts.env,
    extendEnv: false,
    timeout: opts.timeoutMs ?? 15_000,
    forceKillAfterDelay: 2_000,
    stripFinalNewline: false,
    ...(opts.input !== undefined ? { input: opts.input } : { stdin: 'ignore' as const }),
  });
  let exitCode = r.exitCode;
  if (exitCode === undefined) {
    const signo = r.signal ? os.constants.signals[r.signal] : undefined;
    exitCode = signo !== undefined ? 128 + signo : 1; // 1: spawn failure etc.
  }
  const stderr = r.failed && r.exitCode === undefined && !r.signal ? `${r.stderr}${r.message}` : r.stderr;
  return { stdout: r.stdout, stderr, exitCode, timedOut: r.timedOut };
}
