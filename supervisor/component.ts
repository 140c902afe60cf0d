// One supervised component process: start it, learn when it is ready, restart it when it
// dies unexpectedly (exponential backoff), and report a crash loop.
import { execa, type ResultPromise } from 'execa';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../shared/log.js';
import type { MetricsJson } from '../shared/metrics.js';
import { STOP_MESSAGE } from '../shared/component.js';

export const KVS_BIN = fileURLToPath(new URL('../../bin/kvs.js', import.meta.url));

export type State = 'stopped' | 'starting' | 'ready' | 'stopping' | 'backoff' | 'crash-loop';

/** A component asked to stop is killed if it has not exited after this long. */
const STOP_GRACE_MS = 15_000;
const BACKOFF_START_MS = 100;
const BACKOFF_MAX_MS = 10_000;
/** A run this long counts as healthy: the backoff starts over. */
const HEALTHY_AFTER_MS = 30_000;
/** This many unexpected exits within CRASH_LOOP_WINDOW_MS is a crash loop. */
const CRASH_LOOP_EXITS = 5;
const CRASH_LOOP_WINDOW_MS = 60_000;

export class Component {
  state: State = 'stopped';
  pid = 0;
  restarts = 0;
  startedAt = 0;
  lastExit = '';
  /** What the component last said it is doing (reportState), cleared when it exits. */
  detail = '';
  /** Why the component refuses writes now (reportHealth), cleared when it exits. */
  writesRefused = '';
  private child: ResultPromise | undefined;
  private exits: number[] = [];
  private backoffMs = BACKOFF_START_MS;
  private restartTimer: NodeJS.Timeout | undefined;
  private readyWaiters: { resolve(): void; reject(e: Error): void }[] = [];
  private wanted = false;
  private metricsRequests = new Map<number, (m: MetricsJson | undefined) => void>();
  private nextMetricsId = 1;

  constructor(
    readonly name: string,
    private readonly args: string[],
    private readonly log: Logger,
    private readonly onReady: (c: Component) => void = () => {},
    /**
     * A command that runs the component's command line (its own arguments first), such as
     * `taskset -c 0`: it must exec the component in place, so that the pid, the signals sent to
     * it and the IPC channel (an inherited fd) are the component's own.
     */
    private readonly launcher: string[] = [],
  ) {}

  /** The component asked for its node's data to be restored from the latest checkpoint. */
  onRestoreRequest: ((why: string) => void) | undefined;
  /** The node's merged metrics, for a component that serves them itself (the client port's /metrics). */
  nodeMetrics: (() => Promise<string>) | undefined;

  /** Starts the process and resolves once it reports ready; rejects if it exits first. */
  start(): Promise<void> {
    this.wanted = true;
    const ready = new Promise<void>((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
    this.spawn();
    return ready;
  }

  private spawn(): void {
    this.state = 'starting';
    this.startedAt = Date.now();
    // KVS_CPU_PROF=<dir>: every component writes a V8 CPU profile there when it exits (Node
    // refuses --cpu-prof in NODE_OPTIONS), for finding where a component's time goes.
    const prof = process.env.KVS_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.KVS_CPU_PROF}`] : [];
    const [file, ...args] = [...this.launcher, process.execPath, ...prof, KVS_BIN, 'component', this.name, ...this.args];
    // The component stays in the supervisor's process group (not `detached`), and stops only
    // when told so over its IPC channel (stop() below), or when that channel closes: it ignores
    // SIGTERM and SIGINT while the channel is open (shared/component.ts guardSignals). A group of
    // its own would not do instead: systemd's default KillMode=control-group signals every
    // process of the service's cgroup, whatever its group or session. Nor as well: it would
    // only keep from the components what must reach them, a SIGKILL of the node's group (they
    // would outlive it, each stopping on its own), a SIGSTOP and SIGCONT (a pause of the node
    // would pause its supervisor alone), a terminal's job control. A supervisor that dies, even
    // by SIGKILL, closes the channel: the components stop by themselves.
    const child = execa(file!, args, {
      ipc: true,
      serialization: 'json',
      stdin: 'ignore',
      stdout: 'inherit',
      stderr: 'inherit',
      reject: false,
      cleanup: true,
      // A component sent SIGTERM (its IPC channel already closed) is killed after this long.
      forceKillAfterDelay: STOP_GRACE_MS,
    });
    this.child = child;
    this.pid = child.pid ?? 0;
    child.on('message', (msg: unknown) => {
      if (this.child !== child) return;
      const m = msg as { type?: string; detail?: string; writesRefused?: string; id?: number; metrics?: MetricsJson };
      if (m?.type === 'detail') this.detail = String(m.detail ?? '');
      if (m?.type === 'health') this.writesRefused = String(m.writesRefused ?? '');
      if (m?.type === 'metrics') this.metricsRequests.get(m.id ?? 0)?.(m.metrics);
      if (m?.type === 'restore-checkpoint') this.onRestoreRequest?.(String((m as { why?: string }).why ?? ''));
      if (m?.type === 'node-metrics' && this.nodeMetrics) {
        const id = m.id;
        this.nodeMetrics().then(
          (text) => child.connected && child.send({ type: 'node-metrics', id, text }),
          (err: Error) => child.connected && child.send({ type: 'node-metrics', id, error: err.message }),
        );
      }
      if (m?.type !== 'ready') return;
      this.state = 'ready';
      this.log.info({ child: this.name, childPid: this.pid }, `${this.name} ready`);
      for (const w of this.readyWaiters.splice(0)) w.resolve();
      this.onReady(this);
    });
    void child.then((result) => this.exited(child, result.exitCode, result.signal));
  }

  private exited(child: ResultPromise, code: number | undefined, signal: string | undefined): void {
    if (this.child !== child) return;
    this.child = undefined;
    this.pid = 0;
    this.detail = '';
    this.writesRefused = '';
    for (const answer of this.metricsRequests.values()) answer(undefined);
    this.lastExit = signal ? `signal ${signal}` : `code ${code ?? '?'}`;
    const wasReady = this.state === 'ready';
    if (!this.wanted || this.state === 'stopping') {
      this.state = 'stopped';
      return;
    }
    if (!wasReady && this.readyWaiters.length) {
      // Failed before ever becoming ready: that is a startup error, not a crash to retry.
      this.state = 'stopped';
      this.wanted = false;
      const err = new Error(`${this.name} exited during startup (${this.lastExit}); see its log above`);
      for (const w of this.readyWaiters.splice(0)) w.reject(err);
      return;
    }
    const now = Date.now();
    if (now - this.startedAt > HEALTHY_AFTER_MS) this.backoffMs = BACKOFF_START_MS;
    this.exits = this.exits.filter((t) => now - t < CRASH_LOOP_WINDOW_MS);
    this.exits.push(now);
    const looping = this.exits.length >= CRASH_LOOP_EXITS;
    this.state = looping ? 'crash-loop' : 'backoff';
    const delay = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MAX_MS);
    if (looping) {
      this.log.error({ child: this.name, exits: this.exits.length, windowSec: CRASH_LOOP_WINDOW_MS / 1000, lastExit: this.lastExit, retryInMs: delay }, `${this.name} is crash-looping`);
    } else {
      this.log.warn({ child: this.name, lastExit: this.lastExit, retryInMs: delay }, `${this.name} exited unexpectedly; restarting`);
    }
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (!this.wanted) return;
      this.restarts++;
      this.spawn();
    }, delay);
  }

  /**
   * The process's metrics registry as JSON (over the IPC channel), or undefined when it is not
   * running or does not answer within `timeoutMs` (busy replaying a WAL, say).
   */
  metrics(timeoutMs: number): Promise<MetricsJson | undefined> {
    const child = this.child;
    if (!child?.connected) return Promise.resolve(undefined);
    const id = this.nextMetricsId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => answer(undefined), timeoutMs);
      const answer = (m: MetricsJson | undefined) => {
        clearTimeout(timer);
        this.metricsRequests.delete(id);
        resolve(m);
      };
      this.metricsRequests.set(id, answer);
      child.send({ type: 'metrics', id }, (err: Error | null) => err && answer(undefined));
    });
  }

  /** The node is stopping: an exit from now on is expected, never restarted. */
  release(): void {
    this.wanted = false;
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
  }

  /**
   * Stops the process (the stop message over its IPC channel, SIGKILL if it has not exited
   * after the grace period) and waits for it. SIGTERM only if the channel is closed: the
   * component then stops on it (it is stopping already, having seen the channel close).
   */
  async stop(): Promise<void> {
    this.release();
    const child = this.child;
    if (!child) {
      this.state = 'stopped';
      return;
    }
    this.state = 'stopping';
    const kill = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
    if (child.connected) child.send({ type: STOP_MESSAGE }, (err: Error | null) => err && child.kill('SIGTERM'));
    else child.kill('SIGTERM');
    await child;
    clearTimeout(kill);
  }

  /** Stop, then start again (kvs ctl restart). */
  async restart(): Promise<void> {
    await this.stop();
    this.restarts++;
    await this.start();
  }
}
