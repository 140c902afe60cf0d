// `--client go`: the load generator on etcd's own Go client (clientv3 of etcd 3.4), source in
// bench/go/src/kvsbench. Built on first use with Debian's golang-go in GOPATH mode against the
// Go sources Debian's golang-etcd-server-dev installs under /usr/share/gocode (no network, no
// modules) into .bench/go-bin (git-ignored); later runs re-run `go build`, which finds it up
// to date. The processes speak bench/protocol.ts's messages as JSON lines on stdin/stdout.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type { FromWorker, GoRunRequest, PreloadRequest, RunResult } from './protocol.js';
import { REPO_ROOT } from './servers.js';

export const GO_PATH = path.join(REPO_ROOT, 'bench', 'go');
export const GO_BIN = path.join(REPO_ROOT, '.bench', 'go-bin', 'kvsbench');
const GO_CACHE = path.join(REPO_ROOT, '.bench', 'go-cache');
/** Where Debian's golang-*-dev packages put their Go sources. */
const DEBIAN_GOCODE = '/usr/share/gocode';
const CLIENTV3 = path.join(DEBIAN_GOCODE, 'src', 'go.etcd.io', 'etcd', 'clientv3');

export const GO_NEEDS =
  "--client go needs Debian's golang-go and golang-etcd-server-dev: apt-get install -y --no-install-recommends golang-go golang-etcd-server-dev";

/** `go version`'s output, or undefined when `go` is not installed. */
export function goVersion(): string | undefined {
  try {
    return execFileSync('go', ['version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

/** Whether `--client go` can be built here (go and etcd's Go sources installed). */
export function goClientAvailable(): boolean {
  return goVersion() !== undefined && existsSync(CLIENTV3);
}

/** Builds (or finds up to date) the Go load generator; returns its path. Throws GO_NEEDS without go. */
export function buildGoLoadGenerator(log: (s: string) => void): string {
  const version = goVersion();
  if (!version) throw new Error(`${GO_NEEDS} (no \`go\` on PATH)`);
  if (!existsSync(CLIENTV3)) throw new Error(`${GO_NEEDS} (no ${CLIENTV3})`);
  mkdirSync(path.dirname(GO_BIN), { recursive: true });
  const first = !existsSync(GO_BIN);
  if (first) log(`building the Go load generator with ${version} (the first build takes ~45 s)`);
  const t0 = Date.now();
  try {
    execFileSync('go', ['build', '-o', GO_BIN, 'kvsbench'], {
      cwd: path.join(GO_PATH, 'src', 'kvsbench'),
      env: {
        ...process.env,
        GO111MODULE: 'off',
        GOPATH: `${GO_PATH}:${DEBIAN_GOCODE}`,
        GOCACHE: GO_CACHE,
        GOFLAGS: '',
        GOPROXY: 'off',
        CGO_ENABLED: '0',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
    });
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`building the Go load generator failed: ${e.stderr?.trim() || e.message}`);
  }
  if (first) log(`built ${path.relative(process.cwd(), GO_BIN) || GO_BIN} in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  return GO_BIN;
}

/** One Go load-generator process. */
export class GoWorkerProcess {
  private waiting: { resolve(m: FromWorker): void; reject(e: Error): void } | undefined;
  private exited = false;

  private constructor(readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let m: FromWorker;
      try {
        m = parse(line);
      } catch {
        process.stderr.write(`go load generator ${child.pid}: ${line}\n`);
        return;
      }
      const w = this.waiting;
      this.waiting = undefined;
      if (m.type === 'failed') w?.reject(new Error(`go load generator ${child.pid}: ${m.message}`));
      else w?.resolve(m);
    });
    child.stdin!.on('error', () => {}); // the exit handler reports it
    child.on('exit', (code, signal) => {
      this.exited = true;
      this.waiting?.reject(new Error(`go load generator ${child.pid} exited (${signal ?? code})`));
      this.waiting = undefined;
    });
  }

  static async start(bin: string): Promise<GoWorkerProcess> {
    const child = spawn(bin, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    const w = new GoWorkerProcess(child);
    const spawned = new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    const ready = w.next();
    await spawned;
    await ready;
    return w;
  }

  get pid(): number {
    return this.child.pid!;
  }

  next(): Promise<FromWorker> {
    if (this.exited) return Promise.reject(new Error(`go load generator ${this.pid} is gone`));
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  ask(msg: PreloadRequest | GoRunRequest): Promise<FromWorker> {
    const reply = this.next();
    this.child.stdin!.write(`${JSON.stringify(msg)}\n`);
    return reply;
  }

  close(): void {
    if (!this.exited) this.child.stdin!.end();
  }
}

/** A JSON line from the Go process; `latencies` arrive as base64 of little-endian float64s. */
function parse(line: string): FromWorker {
  const m = JSON.parse(line) as { type: string; latencies?: string };
  if (m.type !== 'result') return m as FromWorker;
  const raw = Buffer.from(m.latencies ?? '', 'base64');
  const lat = new Float64Array(raw.length / 8);
  for (let i = 0; i < lat.length; i++) lat[i] = raw.readDoubleLE(i * 8);
  return { ...m, latencies: lat } as RunResult;
}
