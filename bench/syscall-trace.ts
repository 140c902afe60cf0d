// `perf record` of the system calls that bound a put's stages (bench/syscall-stages.ts), for
// `npm run breakdown -- --syscalls`. The recording is on CLOCK_MONOTONIC, the clock of the
// client's own stamps (shared/stages.ts monotonicMicros), so the two can be joined.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { parsePerfScript, TRACEPOINTS, type SyscallEvent } from './syscall-stages.js';

const PERF = 'perf';

/** Why perf cannot record syscalls here (not installed, no tracepoints, not allowed), or undefined. */
export function perfUnavailable(): string | undefined {
  const probe = spawnSync(PERF, ['record', '-q', '-e', 'syscalls:sys_enter_fdatasync', '-o', '/dev/null', '--', 'true'], { encoding: 'utf8' });
  if (probe.error) return `--syscalls needs perf (Debian: linux-perf): ${probe.error.message}`;
  if (probe.status !== 0) {
    const why = (probe.stderr || '').trim().split('\n')[0] || `exit ${probe.status}`;
    return `--syscalls: perf cannot record the syscalls tracepoints here (${why}); it needs root or kernel.perf_event_paranoid <= -1`;
  }
  return undefined;
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class SyscallRecording {
  private readonly perf: ChildProcess;
  private readonly closed: Promise<Exit>;
  private stderr = '';

  /** Starts perf on every thread of `pids`, its events off until start() turns them on. */
  constructor(pids: readonly number[], private readonly file: string) {
    const events = Object.keys(TRACEPOINTS).join(',');
    // fd 3: perf's control commands; fd 4: its acknowledgements.
    const args = ['record', '-q', '-D', '-1', '--control', 'fd:3,4', '-k', 'CLOCK_MONOTONIC', '-e', events, '-p', pids.join(','), '-o', file];
    this.perf = spawn(PERF, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
    this.perf.stderr!.on('data', (b: Buffer) => (this.stderr += b.toString()));
    this.closed = new Promise((resolve, reject) => {
      this.perf.on('error', reject);
      this.perf.on('close', (code, signal) => resolve({ code, signal }));
    });
    this.closed.catch(() => undefined); // reported by start() or stop()
  }

  /** Turns the events on; resolves once perf says they are on, on every thread. */
  async start(): Promise<void> {
    const acks = this.perf.stdio[4] as Readable;
    const acked = new Promise<void>((resolve, reject) => {
      let said = '';
      acks.on('data', (b: Buffer) => {
        said += b.toString();
        if (said.includes('ack')) resolve();
      });
      this.closed.then((exit) => reject(this.failure('perf record ended before it started recording', exit)), reject);
    });
    (this.perf.stdio[3] as Writable).write('enable\n');
    await acked;
  }

  /** Stops the recording (perf writes its file on SIGINT) and returns what it saw. */
  async stop(): Promise<SyscallEvent[]> {
    this.perf.kill('SIGINT');
    const exit = await this.closed;
    // perf writes its file on SIGINT, then ends by that signal.
    if (exit.code !== 0 && exit.signal !== 'SIGINT') throw this.failure('perf record failed', exit);
    const text = execFileSync(PERF, ['script', '-i', this.file, '-F', 'pid,tid,time,event,trace', '--ns'], { encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'pipe'] });
    return parsePerfScript(text);
  }

  /** Ends perf without reading what it recorded (the puts failed). */
  async abort(): Promise<void> {
    this.perf.kill('SIGKILL');
    await this.closed.catch(() => undefined);
  }

  private failure(what: string, exit: Exit): Error {
    return new Error(`${what} (${exit.code ?? exit.signal}): ${this.stderr.trim() || 'no message'}`);
  }
}
