// CPU time and resident memory of process trees, from /proc (Linux).
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

let clockTicks: number | undefined;
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

function read(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined; // the process is gone
  }
}

/** The names in a /proc directory; none when it is gone (the process exited). */
export function procEntries(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function children(pid: number): number[] {
  const out: number[] = [];
  for (const tid of procEntries(`/proc/${pid}/task`)) {
    for (const c of (read(`/proc/${pid}/task/${tid}/children`) ?? '').split(' ')) if (c) out.push(Number(c));
  }
  return out;
}

export function processTree(pid: number): number[] {
  const all: number[] = [];
  const todo = [pid];
  while (todo.length) {
    const p = todo.pop()!;
    if (read(`/proc/${p}/stat`) === undefined) continue;
    all.push(p);
    todo.push(...children(p));
  }
  return all;
}

/** User + system CPU seconds used so far by one process (0 when it is gone). */
export function cpuSecondsOf(pid: number): number {
  const stat = read(`/proc/${pid}/stat`);
  if (!stat) return 0;
  // Fields after "(comm)": state is field 3, utime 14, stime 15.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / ticksPerSecond();
}

/** User + system CPU seconds used so far by the given processes (gone ones count 0). */
export function cpuSeconds(pids: readonly number[]): number {
  return pids.reduce((sum, pid) => sum + cpuSecondsOf(pid), 0);
}

/** A process's command line (empty when it is gone). */
function argvOf(pid: number): string[] {
  return (read(`/proc/${pid}/cmdline`) ?? '').split('\0');
}

/** A short name for a process: a kvs component ('storage', 'gateway'), 'supervisor', or its comm. */
export function processName(pid: number): string {
  const argv = argvOf(pid);
  const i = argv.indexOf('component');
  if (i >= 0 && argv[i + 1]) return argv[i + 1]!;
  if (argv.some((a) => a.endsWith('kvs.js')) && argv.includes('run')) return 'supervisor';
  return (read(`/proc/${pid}/comm`) ?? `pid ${pid}`).trim();
}

/** The value of a kvs process's --node-id (as given on its command line), if any. */
export function nodeIdOf(pid: number): string | undefined {
  const argv = argvOf(pid);
  const i = argv.indexOf('--node-id');
  return i >= 0 ? argv[i + 1] : argv.find((a) => a.startsWith('--node-id='))?.slice('--node-id='.length);
}

/**
 * Times the process's main thread gave up its CPU to wait (voluntary context switches: each
 * an event-loop wake-up after it slept, or a wait in a blocking call such as fdatasync); 0
 * when it is gone.
 */
export function wakeupsOf(pid: number): number {
  const m = /^voluntary_ctxt_switches:\s+(\d+)/m.exec(read(`/proc/${pid}/status`) ?? '');
  return m ? Number(m[1]) : 0;
}

/** One process's counters at a moment: see processCosts(). */
export interface ProcessSample {
  pid: number;
  name: string;
  cpuSeconds: number;
  wakeups: number;
}

export function sampleProcesses(pids: readonly number[]): ProcessSample[] {
  return pids.map((pid) => {
    // A node named by default (a single node) names no node.
    const node = nodeIdOf(pid);
    const name = node && node !== 'default' ? `${node} ${processName(pid)}` : processName(pid);
    return { pid, name, cpuSeconds: cpuSecondsOf(pid), wakeups: wakeupsOf(pid) };
  });
}

/** A process's CPU (user + system, every thread) and its main thread's wake-ups, per operation. */
export interface ProcessCost {
  name: string;
  cpuMicrosPerOp: number;
  wakeupsPerOp: number;
}

/**
 * What each process spent per operation between two samples (processes in both, by pid, in
 * the order of `before`). CPU comes in clock ticks (10 ms): measure over seconds, not a few ops.
 */
export function processCosts(before: readonly ProcessSample[], after: readonly ProcessSample[], ops: number): ProcessCost[] {
  const later = new Map(after.map((a) => [a.pid, a]));
  const out: ProcessCost[] = [];
  for (const b of before) {
    const a = later.get(b.pid);
    if (!a || ops <= 0) continue;
    out.push({ name: b.name, cpuMicrosPerOp: ((a.cpuSeconds - b.cpuSeconds) * 1e6) / ops, wakeupsPerOp: (a.wakeups - b.wakeups) / ops });
  }
  return out;
}

/** Sum over `pids` of the kB figure `re` finds in /proc/<pid>/`file`, in bytes. */
function sumKb(pids: readonly number[], file: string, re: RegExp): number {
  let kb = 0;
  for (const pid of pids) {
    const m = re.exec(read(`/proc/${pid}/${file}`) ?? '');
    if (m) kb += Number(m[1]);
  }
  return kb * 1024;
}

/**
 * Sum of the proportional set sizes (Pss: each shared page divided among the processes that
 * map it, so LMDB's file pages mapped by two kvs processes count once), in bytes.
 */
export function pssBytes(pids: readonly number[]): number {
  return sumKb(pids, 'smaps_rollup', /^Pss:\s+(\d+) kB/m);
}

/** Sum of VmRSS of the given processes, in bytes. */
export function rssBytes(pids: readonly number[]): number {
  return sumKb(pids, 'status', /^VmRSS:\s+(\d+) kB/m);
}
