// `kvs run`: starts the components in order (storage before the gateway serves), restarts
// them when they fail, stops them in reverse order, and answers `kvs ctl` on run/ctl.sock.
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../shared/config.js';
import { clusterMode, configArgs, socketPath } from '../shared/config.js';
import { createLogger, type Logger } from '../shared/log.js';
import { service } from '../shared/proto/index.js';
import { bindUnix, shutdown } from '../shared/grpc/plumbing.js';
import { Component } from './component.js';
import { serveHttp, type ObservabilityServer, type Probe } from './http.js';
import { ConsoleApi } from './console/api.js';
import { claimDataDir, releaseDataDir } from '../shared/data-dir-lock.js';
import { dbPath } from '../shared/mvcc/schema.js';
import * as M from '../shared/metrics.js';

/** How long /metrics waits for a component's registry (a busy one is left out of that scrape). */
const METRICS_TIMEOUT_MS = 2000;

/**
 * Start order; stop order is the reverse. The archiver (only with an object store) comes
 * first: it restores the data directory before storage opens it, and storage uploads through it.
 * The peer agent (cluster mode only) comes before storage, which takes its role from it.
 */
export const COMPONENTS = ['archiver', 'peer', 'storage', 'gateway'] as const;

export interface SupervisorOptions {
  /** Absolute path of util-linux taskset, for --cpu-affinity (cli.ts checkTaskset). */
  taskset?: string;
}

export class Supervisor {
  readonly components: Component[];
  private readonly log: Logger;
  private control: grpc.Server | undefined;
  private stopping: Promise<void> | undefined;
  private http: ObservabilityServer | undefined;
  private console: ConsoleApi | undefined;
  private readonly registry: ReturnType<typeof M.processRegistry>;
  /** Every component has been ready once: the node has started. */
  private started = false;

  constructor(
    private readonly cfg: Config,
    opts: SupervisorOptions = {},
  ) {
    this.log = createLogger('supervisor', cfg.logLevel, cfg.logFormat);
    const args = configArgs(cfg);
    const cluster = clusterMode(cfg);
    // --cpu-affinity: every start and restart of a component goes through `taskset -c LIST`,
    // which sets the affinity and execs node (same pid; its threads inherit the mask).
    if (cfg.cpuAffinity && !opts.taskset) throw new Error('--cpu-affinity needs the path of taskset');
    const launcher = cfg.cpuAffinity ? [opts.taskset!, '-c', cfg.cpuAffinity] : [];
    this.components = COMPONENTS.filter((name) => (name !== 'archiver' || cfg.s3Bucket) && (name !== 'peer' || cluster)).map(
      (name) => new Component(name, args, this.log, undefined, launcher),
    );
    // Owners without a process on this node are exported by the supervisor (at zero, or `single`).
    this.registry = M.processRegistry('supervisor', [...(cfg.s3Bucket ? [] : ['archiver' as const]), ...(cluster ? [] : ['peer' as const])]);
    if (!cluster) M.role.set({ role: 'single' }, 1);
    const peer = this.get('peer');
    if (peer) peer.onRestoreRequest = (why) => void this.restoreFromCheckpoint(why);
    const gateway = this.get('gateway');
    if (gateway) gateway.nodeMetrics = () => this.metrics();
  }

  /**
   * A follower so far behind that the object store's WAL no longer reaches back to it (gc
   * removed what it lacks) starts over from the latest checkpoint, as an empty node would: its
   * database holds only committed history, all of it in that checkpoint or the WAL after it,
   * and what it staged past that is dropped when it follows anyway. The peer agent keeps
   * running (the node keeps its place in the cluster); the others stop, the WAL then the
   * database are removed (a crash between the two leaves a database and no WAL: still a
   * follower's consistent state), and they start again: the archiver restores the checkpoint
   * into the empty directory, the peer agent catches up from the WAL after it.
   */
  private restoring: Promise<void> | undefined;
  private restoreFromCheckpoint(why: string): Promise<void> {
    if (this.stopping || !this.started) return Promise.resolve();
    this.restoring ??= (async () => {
      this.log.warn({ why }, 'too far behind to catch up: restoring this node from the latest checkpoint (its database and WAL are replaced)');
      const others = this.components.filter((c) => c.name !== 'peer');
      for (const c of [...others].reverse()) await c.stop();
      fs.rmSync(path.join(this.cfg.dataDir, 'wal'), { recursive: true, force: true });
      fs.rmSync(dbPath(this.cfg.dataDir), { recursive: true, force: true });
      for (const c of others) await c.start();
      this.log.info('restored from the latest checkpoint; following the leader again');
    })()
      .catch(async (err: Error) => {
        this.log.fatal({ err: err.message }, 'restoring from the latest checkpoint failed');
        await this.stop('restore from the latest checkpoint failed', 1);
      })
      .finally(() => (this.restoring = undefined));
    return this.restoring;
  }

  get(name: string): Component | undefined {
    return this.components.find((c) => c.name === name);
  }

  async run(): Promise<void> {
    fs.mkdirSync(path.join(this.cfg.dataDir, 'run'), { recursive: true });
    await claimDataDir(this.cfg.dataDir);
    process.on('SIGTERM', () => void this.stop('SIGTERM'));
    process.on('SIGINT', () => void this.stop('SIGINT'));
    // Up before the components, so /readyz tells "not ready" during a restore or WAL replay.
    if (this.cfg.metricsAddr) await this.serveObservability(this.cfg.metricsAddr);
    await this.serveControl();
    if (this.cfg.cpuAffinity) this.log.info({ cpuAffinity: this.cfg.cpuAffinity }, `components run on CPUs ${this.cfg.cpuAffinity} (taskset)`);
    try {
      for (const c of this.components) await c.start();
    } catch (err) {
      this.log.fatal({ err: (err as Error).message }, 'kvs failed to start');
      await this.stop('startup failure', 1);
      return;
    }
    this.started = true;
    this.log.info({ listen: this.cfg.listen, dataDir: this.cfg.dataDir }, `kvs ready: etcd v3 clients on ${this.cfg.listen}, data in ${this.cfg.dataDir}`);
  }

  stop(why: string, exitCode = 0): Promise<void> {
    this.stopping ??= (async () => {
      this.log.info({ why }, 'stopping kvs');
      for (const c of this.components) c.release();
      // A leader hands over first (its followers catch up, one takes the lock at once) while its
      // storage still runs; then the rest in reverse start order.
      const order = [...this.components].reverse().sort((a, b) => Number(b.name === 'peer') - Number(a.name === 'peer'));
      for (const c of order) await c.stop();
      if (this.control) await shutdown(this.control, 1000);
      this.console?.close();
      this.http?.close();
      releaseDataDir(this.cfg.dataDir);
      this.log.info('kvs stopped');
      process.exit(exitCode);
    })();
    return this.stopping;
  }

  /**
   * /readyz: the node serves reads, and takes writes. Not while a component is starting
   * (restore, WAL replay), restarting or stopping, nor while storage refuses writes for lack
   * of disk space. The reason names the first component that is not ready.
   */
  readiness(): Probe {
    if (this.stopping) return { ok: false, reason: 'kvs is stopping' };
    for (const c of this.components) {
      if (c.state !== 'ready') return { ok: false, reason: `${c.name} is ${describeState(c)}` };
      if (c.writesRefused) return { ok: false, reason: c.writesRefused };
    }
    return { ok: true, reason: '' };
  }

  /** /healthz: the node has started and no component is crash-looping. */
  health(): Probe {
    if (this.stopping) return { ok: false, reason: 'kvs is stopping' };
    if (!this.started) return { ok: false, reason: 'kvs is starting' };
    const looping = this.components.find((c) => c.state === 'crash-loop');
    if (looping) return { ok: false, reason: `${looping.name} is crash-looping (last exit: ${looping.lastExit})` };
    return { ok: true, reason: '' };
  }

  /** The node's metrics: the supervisor's own and every running component's, merged. */
  async metrics(): Promise<string> {
    return M.mergeMetrics(await this.metricsParts());
  }

  private async metricsParts(): Promise<M.MetricsJson[]> {
    const parts = await Promise.all([this.registry.getMetricsAsJSON(), ...this.components.map((c) => c.metrics(METRICS_TIMEOUT_MS))]);
    return parts.filter((p): p is M.MetricsJson => p !== undefined);
  }

  private async serveObservability(addr: string): Promise<void> {
    const consoleApi = new ConsoleApi(this.cfg, {
      metricsJson: async () => M.mergedJson(await this.metricsParts()),
      components: () => this.components.map((c) => ({ name: c.name, state: c.state, pid: c.pid ?? 0, restarts: c.restarts, lastExit: c.lastExit ?? '', detail: c.detail ?? '' })),
      restart: (name) => this.get(name)!.restart(),
      logAction: (what, fields) => this.log.info(fields, what),
    });
    try {
      this.http = await serveHttp(
        addr,
        { metrics: () => this.metrics(), health: () => this.health(), ready: () => this.readiness(), console: (req, res, url) => consoleApi.handle(req, res, url) },
        (err) => this.log.error({ err: err.message }, 'metrics endpoint error'),
        { tls: this.cfg.clientTlsCert ? { cert: this.cfg.clientTlsCert, key: this.cfg.clientTlsKey! } : undefined },
      );
      this.console = consoleApi;
    } catch (err) {
      releaseDataDir(this.cfg.dataDir);
      process.stderr.write(`kvs: --metrics-addr ${addr}: ${(err as NodeJS.ErrnoException).code === 'EADDRINUSE' ? 'address already in use' : (err as Error).message}\n`);
      process.exit(2);
    }
    this.log.info(
      { metricsAddr: addr },
      `metrics and health probes on http://${addr}/metrics, /healthz, /readyz; the console on ${this.cfg.clientTlsCert ? 'https' : 'http'}://${addr}/`,
    );
  }

  private async serveControl(): Promise<void> {
    const server = new grpc.Server();
    const state = (c: Component) => ({ name: c.name, state: c.state, pid: c.pid, restarts: c.restarts, startedAtMs: c.startedAt, lastExit: c.lastExit, detail: c.detail });
    server.addService(service('kvs.control.Control'), {
      Status: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => {
        const ready = this.readiness();
        cb(null, { components: this.components.map(state), ready: ready.ok, notReadyReason: ready.reason, listen: this.cfg.listen, supervisorPid: process.pid });
      },
      Restart: (call: grpc.ServerUnaryCall<{ component: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        const c = this.get(call.request.component);
        if (!c) return cb({ code: grpc.status.NOT_FOUND, details: `no component "${call.request.component}"; components: ${this.components.map((x) => x.name).join(', ')}` });
        this.log.info({ child: c.name }, 'restart requested');
        c.restart().then(
          () => cb(null, { component: state(c) }),
          (err: Error) => cb({ code: grpc.status.INTERNAL, details: err.message }),
        );
      },
    });
    await bindUnix(server, socketPath(this.cfg.dataDir, 'ctl'));
    this.control = server;
  }
}

function describeState(c: Component): string {
  const what = { starting: 'starting', stopping: 'stopping', stopped: 'stopped', backoff: 'restarting', 'crash-loop': 'crash-looping', ready: 'ready' }[c.state];
  return `${what}${c.detail ? `: ${c.detail}` : c.lastExit && c.state !== 'starting' ? ` (last exit: ${c.lastExit})` : ''}`;
}
