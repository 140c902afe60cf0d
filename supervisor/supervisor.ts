// `kvs run`: starts the components in order (storage before the gateway serves), restarts
// them when they fail, stops them in reverse order, and answers `kvs ctl` on run/ctl.sock.
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../shared/config.js';
import { configArgs, socketPath } from '../shared/config.js';
import { createLogger, type Logger } from '../shared/log.js';
import { service } from '../shared/proto/index.js';
import { bindUnix, shutdown } from '../shared/grpc/server.js';
import { Component } from './component.js';

/**
 * Start order; stop order is the reverse. The archiver (only with an object store) comes
 * first: it restores the data directory before storage opens it, and storage uploads through it.
 */
export const COMPONENTS = ['archiver', 'storage', 'gateway'] as const;

export class Supervisor {
  readonly components: Component[];
  private readonly log: Logger;
  private control: grpc.Server | undefined;
  private stopping: Promise<void> | undefined;
  ready = false;

  constructor(private readonly cfg: Config) {
    this.log = createLogger('supervisor', cfg.logLevel, cfg.logFormat);
    const args = configArgs(cfg);
    this.components = COMPONENTS.filter((name) => name !== 'archiver' || cfg.s3Bucket).map((name) => new Component(name, args, this.log));
  }

  get(name: string): Component | undefined {
    return this.components.find((c) => c.name === name);
  }

  async run(): Promise<void> {
    fs.mkdirSync(path.join(this.cfg.dataDir, 'run'), { recursive: true });
    claimDataDir(this.cfg.dataDir);
    process.on('SIGTERM', () => void this.stop('SIGTERM'));
    process.on('SIGINT', () => void this.stop('SIGINT'));
    await this.serveControl();
    try {
      for (const c of this.components) await c.start();
    } catch (err) {
      this.log.fatal({ err: (err as Error).message }, 'kvs failed to start');
      await this.stop('startup failure', 1);
      return;
    }
    this.ready = true;
    this.log.info({ listen: this.cfg.listen, dataDir: this.cfg.dataDir }, `kvs ready: etcd v3 clients on ${this.cfg.listen}, data in ${this.cfg.dataDir}`);
  }

  stop(why: string, exitCode = 0): Promise<void> {
    this.stopping ??= (async () => {
      this.log.info({ why }, 'stopping kvs');
      this.ready = false;
      for (const c of [...this.components].reverse()) await c.stop();
      if (this.control) await shutdown(this.control, 1000);
      releaseDataDir(this.cfg.dataDir);
      this.log.info('kvs stopped');
      process.exit(exitCode);
    })();
    return this.stopping;
  }

  private async serveControl(): Promise<void> {
    const server = new grpc.Server();
    const state = (c: Component) => ({ name: c.name, state: c.state, pid: c.pid, restarts: c.restarts, startedAtMs: c.startedAt, lastExit: c.lastExit, detail: c.detail });
    server.addService(service('kvs.control.Control'), {
      Status: (_call: unknown, cb: grpc.sendUnaryData<unknown>) =>
        cb(null, { components: this.components.map(state), ready: this.ready, listen: this.cfg.listen, supervisorPid: process.pid }),
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

/** One node per data directory: a pid file, taken over only from a process that is gone. */
function claimDataDir(dataDir: string): void {
  const file = path.join(dataDir, 'run', 'kvs.pid');
  try {
    const pid = Number(fs.readFileSync(file, 'utf8'));
    if (pid && pid !== process.pid && alive(pid)) {
      throw new Error(`another kvs (pid ${pid}) is running on data directory ${dataDir}`);
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  fs.writeFileSync(file, String(process.pid));
}

function releaseDataDir(dataDir: string): void {
  const file = path.join(dataDir, 'run', 'kvs.pid');
  try {
    if (Number(fs.readFileSync(file, 'utf8')) === process.pid) fs.rmSync(file);
  } catch {}
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
