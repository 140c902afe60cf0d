// `perf record` of the system calls that bound a put's stages (bench/syscall-stages.ts), for
// `npm run breakdown -- --syscalls`. The recording is on CLOCK_MONOTONIC, the clock of the
// client's own stamps (shared/stages.ts monotonicMicros), so the two can be joined.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { parsePerfScript, TRACEPOINTS, type SyscallEvent } from './syscall-stages.js';

const PERF = 'perf';

/** Why `--syscalls` cannot run here, or undefined when it can. */
export function perfUnavailable(): string | undefined {
  try {
    execFileSync(PERF, ['list', 'syscalls:sys_enter_fdatasync'], { stdio: 'pipe' });
  } catch (err) {
    return `--syscalls needs perf (Debian: linux-perf) with the syscalls tracepoints: ${(err as Error).message.split('\n')[0]}`;
  }
  return undefined;
}

export class SyscallRecording {
  private readonly perf: ChildProcess;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private stderr = '';

  /** Starts recording `pids` (every thread of each) into `file`. */
  constructor(pids: readonly number[], private readonly file: string) {
    const events = Object.keys(TRACEPOINTS).join(',');
    this.perf = spawn(PERF, ['record', '-q', '-k', 'CLOCK_MONOTONIC', '-e', events, '-p', pids.join(','), '-o', file], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.perf.stderr!.on('data', (b: Buffer) => (this.stderr += b.toString()));
    this.exited = new Promise((resolve, reject) => {
      this.perf.on('error', reject);
      this.perf.on('exit', (code, signal) => resolve({ code, signal }));
    });
  }

  /** Stops the recording (perf writes its file on SIGINT) and returns what it saw. */
  async stop(): Promise<SyscallEvent[]> {
    this.perf.kill('SIGINT');
    // perf writes its file on SIGINT, then ends by that signal.
    const { code, signal } = await this.exited;
    if (code !== 0 && signal !== 'SIGINT') throw new Error(`perf record exited with ${code ?? signal}: ${this.stderr.trim() || 'no message'} (tracing other processes needs root or kernel.perf_event_paranoid <= -1)`);
    const text = execFileSync(PERF, ['script', '-i', this.file, '-F', 'pid,tid,time,event,trace', '--ns'], { encoding: 'utf8', maxBuffer: 1 << 30, stdio: ['ignore', 'pipe', 'pipe'] });
    return parsePerfScript(text);
  }
}
