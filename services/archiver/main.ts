// The archiver process: a thin host of the archiver library (archiver.ts) for a node run by
// `kvs run`. Serves kvs.archiver.Archiver on <data-dir>/run/archiver.sock: storage's WAL
// uploads on one long-lived Upload stream (ArchiverLink is the other end), checkpoints on
// demand (`kvs ctl checkpoint`), and the status `kvs ctl status` shows.
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { clusterMode, socketPath } from '../../shared/config.js';
import { LeaderRole } from './role.js';
import { createLogger } from '../../shared/log.js';
import { parseDuration } from '../../shared/duration.js';
import { service, num } from '../../shared/proto/index.js';
import { bindUnix, shutdown } from '../../shared/grpc/plumbing.js';
import { installLifecycle, reportState, serveMetrics, signalReady } from '../../shared/component.js';
import { openObjectStore, objectStoreOptions } from '../../shared/objectstore/index.js';
import { StartupError, type BranchPoint } from './restore.js';
import { Archiver } from './archiver.js';

interface WalChunk {
  firstIndex: unknown;
  lastIndex: unknown;
  frames: Buffer;
  term: unknown;
}

export async function runArchiver(cfg: Config): Promise<void> {
  const log = createLogger('archiver', cfg.logLevel, cfg.logFormat);
  serveMetrics('archiver');
  const checkpointIntervalMs = parseDuration(cfg.checkpointInterval, 'checkpoint-interval');
  // Its loop waits for each upload anyway: small puts to a local directory skip the thread pool.
  const options = { ...objectStoreOptions(cfg), log, syncSmallPuts: true };
  const store = await openObjectStore(options);
  const openPrefix = (prefix: string) => openObjectStore({ ...options, prefix });
  if ((cfg.branchPrefix !== undefined) !== (cfg.branchCheckpoint !== undefined)) {
    throw new StartupError('--branch-prefix and --branch-checkpoint go together: give both to start a branch');
  }
  const branch: BranchPoint | undefined =
    cfg.branchPrefix !== undefined && cfg.branchCheckpoint
      ? { sourcePrefix: cfg.branchPrefix, source: await openPrefix(cfg.branchPrefix), checkpoint: cfg.branchCheckpoint }
      : undefined;

  // Storage may still run when the archiver alone restarts: then its WAL is not touched.
  const storageRunning = await answers(socketPath(cfg.dataDir, 'storage'));
  const role = clusterMode(cfg) ? new LeaderRole(socketPath(cfg.dataDir, 'peer')) : undefined;
  const archiver = await Archiver.open({
    dataDir: cfg.dataDir,
    log,
    store,
    bucket: options.bucket,
    prefix: options.prefix,
    openPrefix,
    branch,
    checkpointIntervalMs,
    storageRunning,
    role,
    onState: reportState,
  });

  // One storage process at a time: a new Upload stream (storage reconnected) replaces the old one.
  let stream: grpc.ServerDuplexStream<WalChunk, unknown> | undefined;
  archiver.onProgress((p) => {
    if (stream && !stream.destroyed && stream.writable) stream.write(p);
  });
  const server = new grpc.Server({ 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  server.addService(service('kvs.archiver.Archiver'), {
    Upload: (call: grpc.ServerDuplexStream<WalChunk, unknown>) => {
      // Storage opens its upload stream once it has created the database.
      archiver.databaseOpened();
      if (stream && stream !== call) stream.end();
      stream = call;
      archiver.uploader.report();
      call.on('data', (c: WalChunk) => {
        // A chunk not uploaded is logged by the uploader; storage resends it after a reconnect.
        archiver.upload(num(c.firstIndex as number), num(c.lastIndex as number), () => c.frames, num(c.term as number)).catch(() => {});
      });
      call.on('end', () => call.end());
      call.on('error', (err) => log.debug({ err: err.message }, 'upload stream closed'));
      call.on('close', () => {
        if (stream === call) stream = undefined;
      });
    },
    Checkpoint: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => {
      archiver.checkpoint().then(
        (r) => cb(null, { key: r.key, revision: r.latest.revision, appliedIndex: r.latest.appliedIndex, pieces: r.pieces, uploadedPieces: r.uploaded, unchanged: r.unchanged }),
        (err: Error) => cb({ code: grpc.status.UNAVAILABLE, details: `checkpoint failed: ${err.message}` }),
      );
    },
    Status: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, archiver.status()),
  });
  await bindUnix(server, socketPath(cfg.dataDir, 'archiver'));

  installLifecycle(log, {
    async stop() {
      role?.close();
      stream?.end();
      await archiver.close();
      await shutdown(server, 2000);
      store.close();
      branch?.source.close();
    },
  });
  const restored = archiver.restored;
  log.info(
    { store: store.location, restored: restored.restored, walRecordsFetched: restored.walRecords, uploadedThrough: archiver.uploader.uploadedThrough, checkpoint: archiver.latestCheckpoint?.checkpoint },
    'archiver ready',
  );
  reportState(archiver.describe());
  signalReady({ uploadedThrough: archiver.uploader.uploadedThrough });
}

/** Whether a unix socket has a live server behind it (a stale file from a crash does not). */
function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(socket);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
