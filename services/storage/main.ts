// The storage process: the only LMDB writer. Owns the WAL, group commit, revisions, MVCC
// apply and compaction. Serves the Storage service on <data-dir>/run/storage.sock.
import type { Config } from '../../shared/config.js';
import { autoCompact, clusterMode, socketPath } from '../../shared/config.js';
import type { PeerAttach } from './peer-attach.js';
import { attachToPeer, clusterEngineOptions } from './cluster-member.js';
import { UnixStreamChannel } from '../../shared/grpc/stream-channel.js';
import { createLogger } from '../../shared/log.js';
import { bindUnix, shutdown } from '../../shared/grpc/plumbing.js';
import { startStages } from '../../shared/stages.js';
import { installLifecycle, reportHealth, reportState, serveMetrics, signalReady } from '../../shared/component.js';
import * as M from '../../shared/metrics.js';
import type { Engine } from './engine.js';
import { openEngine } from './engine/open.js';
import { storageServer } from './server.js';
import { applyAuthFlag } from './auth/startup.js';
import { ArchiverLink } from './archiver-link.js';
import { archivedEngineOptions } from './wal-upload.js';
import { openStorageDb, startHousekeeping } from './host.js';
import { startTracing } from '../../shared/tracing.js';

export async function runStorage(cfg: Config): Promise<void> {
  const log = createLogger('storage', cfg.logLevel, cfg.logFormat);
  startStages('storage', cfg.nodeId);
  let opened: Engine | undefined;
  serveMetrics('storage', () => {
    if (!opened) return;
    M.currentRevision.set(opened.revision);
    M.compactRevision.set(opened.executor.compactRevision);
  });
  const tracing = await startTracing(log);
  const db = openStorageDb(cfg.dataDir);
  const link = cfg.s3Bucket ? new ArchiverLink(socketPath(cfg.dataDir, 'archiver'), log) : undefined;
  const cluster = clusterMode(cfg);
  const opts = cluster ? await clusterEngineOptions(cfg, link!, log, () => opened, reportState) : link ? await archivedEngineOptions(link, cfg, log, reportState) : {};
  if (!link) reportState('replaying the WAL');
  const engine = openEngine(db, cfg.dataDir, log, { ...opts, tracing, tokenTtlMs: cfg.tokenTtl * 1000, writePipeline: cfg.writePipeline });
  opened = engine;
  let attach: PeerAttach | undefined;
  if (cluster) attach = attachToPeer(new UnixStreamChannel(socketPath(cfg.dataDir, 'peer')), engine, link!, cfg, log);
  else await applyAuthFlag(engine, cfg.authEnabled, log);
  const { server, endStreams } = storageServer(engine, log);
  const socket = socketPath(cfg.dataDir, 'storage');
  await bindUnix(server, socket);
  // The supervisor's /readyz also says whether writes are refused for lack of disk space.
  const housekeeping = startHousekeeping(engine, log, {
    autoCompact: autoCompact(cfg),
    cluster,
    onWritesRefused: (reason) => reportHealth({ writesRefused: reason ?? '' }),
  });
  installLifecycle(log, {
    async stop() {
      housekeeping.stop();
      attach?.close();
      // Cancels a stalled upload: its batch fails with an unknown outcome (it is in the WAL).
      link?.close();
      // Finish what is queued, answer it, then end the write streams so the shutdown does not
      // wait for callers that would keep them open forever.
      await engine.close();
      endStreams();
      await shutdown(server, 3000);
    },
  });
  log.info({ socket, revision: engine.executor.revision }, 'storage ready');
  reportState('');
  signalReady({ revision: engine.executor.revision });
}
