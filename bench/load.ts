// The main process's side of the load generator: forks the worker processes, hands each its
// share of a workload's clients, and gathers their samples.
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BENCH_PASSWORD, BENCH_USER } from './auth.js';
import { GoWorkerProcess } from './go-client.js';
import type { FromWorker, GoRunRequest, RunRequest, RunResult, ToWorker } from './protocol.js';
import type { ClientKind } from '../testkit/kv-client.js';
import { workload as workloadNamed } from './workloads/index.js';
import type { WorkloadOptions } from './workload.js';

/** The load generator's client: a Node channel (bench/worker.ts) or etcd's Go client (bench/go-client.ts). */
export type LoadClient = ClientKind | 'go';

const WORKER = fileURLToPath(new URL('./worker.js', import.meta.url));

class WorkerProcess {
  private waiting: { resolve(m: FromWorker): void; reject(e: Error): void } | undefined;
  private exited = false;

  private constructor(readonly child: ChildProcess) {
    child.on('message', (m: FromWorker) => {
      const w = this.waiting;
      this.waiting = undefined;
      if (m.type === 'failed') w?.reject(new Error(`load generator ${child.pid}: ${m.message}`));
      else w?.resolve(m);
    });
    child.on('exit', (code, signal) => {
      this.exited = true;
      this.waiting?.reject(new Error(`load generator ${child.pid} exited (${signal ?? code})`));
      this.waiting = undefined;
    });
  }

  static async start(): Promise<WorkerProcess> {
    const child = fork(WORKER, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const w = new WorkerProcess(child);
    await w.next();
    return w;
  }

  get pid(): number {
    return this.child.pid!;
  }

  next(): Promise<FromWorker> {
    if (this.exited) return Promise.reject(new Error(`load generator ${this.pid} is gone`));
    return new Promise((resolve, reject) => (this.waiting = { resolve, reject }));
  }

  ask(msg: ToWorker): Promise<FromWorker> {
    const reply = this.next();
    this.child.send(msg);
    return reply;
  }

  close(): void {
    if (!this.exited) this.child.disconnect();
  }
}

export interface Timing {
  warmupMs: number;
  durationMs: number;
  /** Time for the clients to connect (and log in) before the warm-up; default 300 ms. */
  leadMs?: number;
}

export interface RunOutcome {
  results: RunResult[];
  /** Epoch ms of the measured window. */
  measureAt: number;
  endAt: number;
}

export class LoadGenerator {
  private constructor(
    private readonly procs: (WorkerProcess | GoWorkerProcess)[],
    readonly client: LoadClient,
  ) {}

  /** `goBin`: the built Go load generator, for client 'go' (bench/go-client.ts). */
  static async start(processes: number, client: LoadClient, goBin?: string): Promise<LoadGenerator> {
    const one = (): Promise<WorkerProcess | GoWorkerProcess> => {
      if (client !== 'go') return WorkerProcess.start();
      if (!goBin) throw new Error('--client go: the Go load generator is not built');
      return GoWorkerProcess.start(goBin);
    };
    const procs = await Promise.allSettled(Array.from({ length: processes }, one));
    const failed = procs.find((p): p is PromiseRejectedResult => p.status === 'rejected');
    if (failed) {
      for (const p of procs) if (p.status === 'fulfilled') p.value.close();
      throw failed.reason;
    }
    return new LoadGenerator(procs.map((p) => (p as PromiseFulfilledResult<WorkerProcess | GoWorkerProcess>).value), client);
  }

  pids(): number[] {
    return this.procs.map((p) => p.pid);
  }

  /** Loads keys [0, count) of the data set with `clients` concurrent clients in all. */
  async preload(endpoint: string, count: number, clients: number, valueBytes: number): Promise<void> {
    const per = Math.ceil(count / this.procs.length);
    await Promise.all(
      this.procs.map((p, i) => {
        const from = Math.min(count, i * per);
        const to = Math.min(count, from + per);
        return p.ask({
          type: 'preload',
          client: this.client === 'go' ? 'h2' : this.client, // ignored by the Go process
          endpoint,
          from,
          to,
          clients: Math.max(1, Math.round(clients / this.procs.length)),
          batch: 100,
          valueBytes,
        });
      }),
    );
  }

  /**
   * Runs `clients` clients of `workload` (client i in process i % processes): warm-up, then
   * the measured window. `atBoundary` is called at the start and at the end of the window
   * (for CPU samples); the window's boundaries are awaited when it returns a promise.
   */
  async run(
    workload: string,
    endpoints: string[],
    clients: number,
    opts: WorkloadOptions,
    timing: Timing,
    atBoundary: (which: 'start' | 'end') => void | Promise<void>,
  ): Promise<RunOutcome> {
    const startAt = Date.now() + (timing.leadMs ?? 300); // time to connect
    const measureAt = startAt + timing.warmupMs;
    const endAt = measureAt + timing.durationMs;
    const at = (when: number, which: 'start' | 'end') =>
      new Promise<void>((resolve) => setTimeout(() => resolve(atBoundary(which)), when - Date.now()));
    // Both samples are always taken, even if the last replies beat the 'end' timer.
    const boundaries = Promise.all([at(measureAt, 'start'), at(endAt, 'end')]);
    const replies = await Promise.all(
      this.procs.map((p, i) => {
        const clientIds: number[] = [];
        for (let c = i; c < clients; c += this.procs.length) clientIds.push(c);
        if (clientIds.length === 0) return undefined;
        const common = { type: 'run' as const, workload, endpoints, clientIds, totalClients: clients, opts, startAt, measureAt, endAt };
        if (p instanceof GoWorkerProcess) return p.ask(goRequest(common));
        const req: RunRequest = { ...common, client: this.client as ClientKind };
        return p.ask(req);
      }),
    );
    await boundaries;
    return { results: replies.filter((r): r is RunResult => r?.type === 'result'), measureAt, endAt };
  }

  close(): void {
    for (const p of this.procs) p.close();
  }
}

/** The Go process's run request: the workload's op by name, and the login of the -auth workloads. */
function goRequest(req: Omit<RunRequest, 'client'>): GoRunRequest {
  const w = workloadNamed(req.workload);
  if (!w.go) throw new Error(`--client go does not run ${w.name}`);
  return { ...req, op: w.go, ...(w.auth ? { auth: { user: BENCH_USER, password: BENCH_PASSWORD } } : {}) };
}
