// open(): a kvs node in the caller's process, on a data directory. It builds the same host of
// the storage engine that `kvs run`'s storage process is (services/storage/host.ts: LMDB, the
// engine and its WAL replay, WAL rotation and trim, lease expiry, automatic compaction; plus
// auth startup), claims the data directory as `kvs run` does (one node per directory), and
// hands the engine to a Node (node.ts) whose routes (host.ts) reach it without a socket.
//
// Where the rest attaches (an Attachment each, attachment.ts; attachments() below lists them in
// order):
// - the object store (embed/object-store.ts): `prepare` restores the data directory at open and
//   returns the engine options of an archived node (the WAL opened to upload its tail first,
//   `upload` for walSyncUpload, `archivedThrough` for the WAL's trim); `start` runs uploads and
//   checkpoints; `stop` ends them before the engine closes;
// - the cluster role (embed/cluster.ts): `prepare` adds EngineOptions.cluster; `start` runs the
//   peer agent in-process, drives engine.becomeLeader/becomeFollower, and replaces
//   host.routes (a follower forwards writes to the leader and linearizes reads through it).
// node.serve() attaches in embed/serve.ts: the gateway hosted in-process on the same engine.
import fs from 'node:fs';
import { trace } from '@opentelemetry/api';
import { createLogger } from '../shared/log.js';
import { tracingOver } from '../shared/tracing.js';
import { claimDataDir, releaseDataDir } from '../shared/data-dir-lock.js';
import type { Engine, EngineOptions } from '../services/storage/engine.js';
import { openStorageEngine, startHousekeeping } from '../services/storage/host.js';
import { applyAuthFlag } from '../services/storage/auth/startup.js';
import { checkOptions, type ResolvedOptions } from './check-options.js';
import type { OpenOptions } from './options.js';
import { localRoutes, type Host } from './host.js';
import type { Attachment } from './attachment.js';
import { objectStoreAttachment } from './object-store.js';
import { Spans } from './spans.js';
import { EmbeddedNode } from './embedded-node.js';
import type { Node } from './node.js';
import { KvsError } from './errors.js';
import { serve } from './serve.js';
import { clusterAttachment, type LeaderState } from './cluster.js';

/** The attachments `options` ask for. */
function attachments(options: ResolvedOptions): Attachment[] {
  if (!options.objectStore) return [];
  if (!options.peerListen) return [objectStoreAttachment()];
  // A cluster member: the archiver checkpoints while this node leads, under its term.
  const role: LeaderState = { leading: false, term: 0 };
  const store = objectStoreAttachment({ role });
  return [store, clusterAttachment(store, role)];
}

/**
 * Data directories open in this process (by their real path). The directory lock refuses
 * another process; a second open() here would put two engines on one LMDB and WAL.
 */
const openHere = new Set<string>();

/** Opens a node on `options.dataDir` (created if absent). close() it to release the directory. */
export async function open(options: OpenOptions): Promise<Node> {
  const opts = checkOptions(options);
  const log = createLogger('embed', opts.logLevel, 'json');
  if (fs.existsSync(opts.dataDir) && !fs.statSync(opts.dataDir).isDirectory()) throw new KvsError(`data directory ${opts.dataDir} is not a directory`);
  try {
    fs.mkdirSync(opts.dataDir, { recursive: true });
  } catch (err) {
    throw new KvsError(`data directory ${opts.dataDir} cannot be created: ${(err as Error).message}`);
  }
  const real = fs.realpathSync(opts.dataDir);
  if (openHere.has(real)) throw new KvsError(`data directory ${opts.dataDir} is open already in this process: close() that node first, or use it`);
  openHere.add(real);
  try {
    await claimDataDir(opts.dataDir);
  } catch (err) {
    openHere.delete(real);
    throw err;
  }
  const started: Attachment[] = [];
  let engine: Engine | undefined;
  let housekeeping: ReturnType<typeof startHousekeeping> | undefined;
  const stop = async () => {
    try {
      housekeeping?.stop();
      for (const a of started.reverse()) await a.stop?.();
      started.length = 0;
      await engine?.close();
    } finally {
      releaseDataDir(opts.dataDir);
      openHere.delete(real);
    }
  };
  try {
    const provider = opts.tracerProvider ?? trace.getTracerProvider();
    const tracing = await tracingOver(provider.getTracer('kvs'));
    const parts = attachments(opts);
    let engineOptions: EngineOptions = { tracing };
    for (const a of parts) {
      engineOptions = { ...engineOptions, ...((await a.prepare?.({ options: opts, log, tracing })) ?? {}) };
      // Prepared is started: what it opened (the object store, the archiver) is stopped if the rest fails.
      started.push(a);
    }
    engine = openStorageEngine(opts.dataDir, log, engineOptions);
    const host: Host = { engine, log, routes: localRoutes(engine) };
    for (const a of parts) await a.start?.(host);
    housekeeping = startHousekeeping(engine, log, {
      autoCompact: opts.autoCompact,
      cluster: engineOptions.cluster !== undefined,
      onWritesRefused: (reason) => (reason ? log.warn({ reason }, 'writes are refused') : log.info('writes are taken again')),
    });
    if (!engineOptions.cluster) await applyAuthFlag(engine, opts.authEnabled, log);
    return new EmbeddedNode({
      host,
      spans: new Spans(tracing),
      readConsistency: opts.readConsistency,
      close: stop,
      serve: (o) => serve({ host, options: opts, tracing }, o),
    });
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}

