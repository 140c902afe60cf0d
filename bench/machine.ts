// The machine the numbers come from: cores, memory, the fsync latency of the disk the data
// dirs live on, and the versions of node, etcd and kvs.
import { execFileSync } from 'node:child_process';
import { closeSync, fdatasyncSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { ETCD_BIN, REPO_ROOT } from './servers.js';
import { merge, percentile } from './stats.js';

export interface Machine {
  cores: number;
  cpuModel: string;
  memoryBytes: number;
  kernel: string;
  /** write(4 KiB) + fdatasync, ms, in os.tmpdir() (where the data dirs are). */
  fsync: { samples: number; p50: number; p99: number };
  versions: { node: string; etcd: string | null; kvs: string };
}

/** `samples` × (write 4 KiB at the end of a temp file, fdatasync). */
export function fsyncLatency(dir = os.tmpdir(), samples = 200): Machine['fsync'] {
  const tmp = mkdtempSync(path.join(dir, 'kvs-bench-fsync-'));
  const fd = openSync(path.join(tmp, 'probe'), 'w');
  const block = Buffer.alloc(4096, 0xab);
  const lat = new Float64Array(samples);
  try {
    for (let i = 0; i < samples; i++) {
      const t0 = performance.now();
      writeSync(fd, block);
      fdatasyncSync(fd);
      lat[i] = performance.now() - t0;
    }
  } finally {
    closeSync(fd);
    rmSync(tmp, { recursive: true, force: true });
  }
  const sorted = merge([lat]);
  return { samples, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
}

function sh(cmd: string, args: string[]): string | null {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], cwd: REPO_ROOT }).trim();
  } catch {
    return null;
  }
}

export function etcdVersion(): string | null {
  const out = sh(ETCD_BIN, ['--version']);
  return out ? (/etcd Version:\s*(\S+)/.exec(out)?.[1] ?? out.split('\n')[0]!) : null;
}

export function kvsVersion(): string {
  const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
  const commit = sh('git', ['rev-parse', '--short', 'HEAD']);
  if (!commit) return pkg.version;
  const dirty = sh('git', ['status', '--porcelain', '--untracked-files=no']) ? '+dirty' : '';
  return `${pkg.version} (${commit}${dirty})`;
}

export function describeMachine(opts: { etcd: boolean }): Machine {
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    memoryBytes: os.totalmem(),
    kernel: `${os.type()} ${os.release()}`,
    fsync: fsyncLatency(),
    versions: { node: process.version, etcd: opts.etcd ? etcdVersion() : null, kvs: kvsVersion() },
  };
}
