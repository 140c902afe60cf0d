// node.serve(): the embedded node on an etcd v3 client port (gRPC and etcd's JSON gateway on
// one port), hosted in the caller's process. It is the gateway process's library
// (services/gateway/gateway.ts) on the engine's own database, with the engine's in-process
// links (services/storage/in-process.ts) instead of storage's socket, and, on a cluster member,
// an in-process pipe to its peer agent (embed/cluster.ts) instead of run/peer.sock: what
// etcdctl sees here is what it sees on `kvs run`.
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { resolveConfig } from '../shared/config.js';
import * as M from '../shared/metrics.js';
import type { Tracing } from '../shared/tracing.js';
import { engineFeed, engineLeaseLink, engineWriteLink } from '../services/storage/in-process.js';
import { startGateway } from '../services/gateway/gateway.js';
import type { ServeOptions } from './options.js';
import type { ResolvedOptions } from './check-options.js';
import type { Host } from './host.js';
import type { Served } from './node.js';

/** What serve() stands on: the node open() made. */
export interface ServeContext {
  host: Host;
  options: ResolvedOptions;
  tracing?: Tracing;
}

const isPem = (v: string | Buffer) => Buffer.isBuffer(v) || v.trimStart().startsWith('-----BEGIN');

/**
 * The TLS files the client port reads (and re-reads when they change, as `kvs run`'s): a path
 * as given, PEM written to a directory of its own under run/ (mode 0600), removed on close.
 */
function tlsFiles(dataDir: string, tls: NonNullable<ServeOptions['tls']>): { flags: Record<string, string>; dir?: string } {
  const given = { cert: tls.cert, key: tls.key, ...(tls.ca !== undefined ? { ca: tls.ca } : {}) };
  let dir: string | undefined;
  const flags: Record<string, string> = {};
  for (const [which, v] of Object.entries(given)) {
    if (v === undefined) continue;
    let file: string;
    if (isPem(v)) {
      dir ??= fs.mkdtempSync(path.join(dataDir, 'run', `serve-tls-${randomBytes(3).toString('hex')}-`));
      file = path.join(dir, `${which}.pem`);
      fs.writeFileSync(file, v, { mode: 0o600 });
    } else file = v as string;
    flags[`client-tls-${which}`] = file;
  }
  return { flags, dir };
}

export async function serve(ctx: ServeContext, opts: ServeOptions): Promise<Served> {
  if (!opts || typeof opts.listen !== 'string') throw new TypeError('kvs serve(): listen (host:port) is required, e.g. serve({ listen: "127.0.0.1:2379" })');
  const { dataDir, nodeId, readConsistency } = ctx.options;
  fs.mkdirSync(path.join(dataDir, 'run'), { recursive: true });
  const tls = opts.tls ? tlsFiles(dataDir, opts.tls) : undefined;
  const removeTls = () => tls?.dir && fs.rmSync(tls.dir, { recursive: true, force: true });
  try {
    // The client port's settings as `kvs run` resolves its flags; the environment (KVS_*) is
    // the program's, not the node's.
    let cfg;
    try {
      cfg = resolveConfig({ 'data-dir': dataDir, listen: opts.listen, 'node-id': nodeId, 'read-consistency': readConsistency, 'log-format': 'json', ...tls?.flags }, {});
    } catch (err) {
      throw new TypeError(`kvs serve(): ${(err as Error).message}`);
    }
    const { engine, log } = ctx.host;
    const agent = ctx.host.agent?.();
    // The port's /metrics: the node's and the port's own (its requests, watches), as `kvs run`'s
    // client port shows the node's.
    const registry = M.ownedRegistry(['storage', 'gateway']);
    let refresh = () => {};
    const gateway = await startGateway(cfg, {
      log,
      db: engine.db,
      writes: engineWriteLink(engine),
      leases: engineLeaseLink(engine),
      feed: engineFeed(engine),
      agent,
      tracing: ctx.tracing,
      metrics: () => {
        refresh();
        return registry.metrics();
      },
    }).catch((err) => {
      agent?.close();
      throw err;
    });
    refresh = () => gateway.refreshMetrics();
    let closing: Promise<void> | undefined;
    return {
      port: gateway.port,
      close: () =>
        (closing ??= (async () => {
          await gateway.close();
          agent?.close();
          removeTls();
        })()),
    };
  } catch (err) {
    removeTls();
    throw err;
  }
}
