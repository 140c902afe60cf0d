// `kvs bench`: the benchmark is a program of its own (bin/kvs-bench.js, compiled from bench/),
// so that `kvs` loads none of the tools' code; this command runs it with the same arguments,
// in the foreground, and exits with its status.
import { spawn } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

/** The benchmark's entry (this file runs from dist/supervisor/commands/). */
export const BENCH_BIN = fileURLToPath(new URL('../../../bin/kvs-bench.js', import.meta.url));

const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** Runs `kvs-bench ...args`; resolves with its exit status (128 + N when a signal N ended it). */
export function runBench(args: readonly string[], bin = BENCH_BIN): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], { stdio: 'inherit' });
    // A signal to kvs is one to the benchmark, which stops the servers it started; kvs waits for it.
    const forward = (sig: NodeJS.Signals): void => void child.kill(sig);
    for (const sig of FORWARDED) process.on(sig, forward);
    const done = (): void => {
      for (const sig of FORWARDED) process.removeListener(sig, forward);
    };
    child.once('error', (err) => {
      done();
      reject(new Error(`kvs bench: cannot run the benchmark ${bin}: ${err.message}`));
    });
    child.once('exit', (code, signal) => {
      done();
      resolve(code ?? 128 + (signal ? (os.constants.signals[signal] ?? 0) : 0));
    });
  });
}
