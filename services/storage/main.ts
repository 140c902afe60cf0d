// The storage process: the only LMDB writer. Owns the WAL, group commit, revisions, MVCC
// apply and compaction. Serves the Storage service on <data-dir>/run/storage.sock.
import type { Config } from '../../shared/config.js';
import { autoCompact, clusterMode, socketPath } from '../../shared/config.js';
import { clusterIdOf, memberIdOf } from '../../shared/membership.js';
import { PeerAttach } from './peer-attach.js';
import { createLogger, type Logger } from '../../shared/log.js';
import { bindUnix, shutdown } from '../../shared/grpc/plumbing.js';
import { startStages } from '../../shared/stages.js';
import { installLifecycle, reportHealth, reportState, serveMetrics, signalReady } from '../../shared/component.js';
import * as M from '../../shared/metrics.js';
import type { Engine, EngineOptions } from './engine.js';
import { openEngine, openWal } from './engine/open.js';
import { storageServer } from './server.js';
import { applyAuthFlag } from './auth/startup.js';
import { ArchiverLink } from './archiver-link.js';
import { archivedEngineOptions, uploadWalTail } from './wal-upload.js';
import type { Archive } from '../../shared/objectstore/archive.js';
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
  const opts = cluster ? await clusterEngineOptions(cfg, link!, log, () => opened) : link ? await archivedEngineOptions(link, cfg, log, reportState) : {};
  if (!link) reportState('replaying the WAL');
  const engine = openEngine(db, cfg.dataDir, log, { ...opts, tracing, tokenTtlMs: cfg.tokenTtl * 1000, writePipeline: cfg.writePipeline });
  opened = engine;
  let attach: PeerAttach | undefined;
  if (cluster) {
    // The role comes from the peer agent; leader-only work (lease expiry, uploads, the
    // --auth-enabled flag) starts when this node leads, and stops when it no longer does.
    attach = new PeerAttach(socketPath(cfg.dataDir, 'peer'), engine, {
      uploadThrough: (through) => uploadWalTail(engine.wal, link!, log, BigInt(through)),
      onLeader: (term, termStart) => {
        link!.leadFrom(term, termStart);
        engine.lessor.startExpiry();
        void uploadAsNewLeader(engine, link!, log).catch((err: Error) => log.warn({ err: err.message }, 'WAL not uploaded; the next segment upload retries'));
        void applyAuthFlag(engine, cfg.authEnabled, log).catch((err: Error) => log.warn({ err: err.message }, 'could not apply --auth-enabled'));
      },
      onNotLeader: () => engine.lessor.stop(),
    }, log, cfg.peerBufferSize);
  } else await applyAuthFlag(engine, cfg.authEnabled, log);
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

/**
 * Cluster mode: uploads are asynchronous and made only while this node leads (at each seal,
 * the WAL through what is committed, and at election what the object store lacks); a
 * follower's WAL is trimmed once LMDB holds it and it is older than the last
 * --peer-buffer-size entries. A sealed segment may end in records not yet committed (appended
 * before the followers' ACKs): those wait for a later upload. Uploaded, they would be history
 * to a node that catches up from the store, though this leader may never acknowledge them.
 */
async function clusterEngineOptions(cfg: Config, link: Archive, log: Logger, engine: () => Engine | undefined): Promise<EngineOptions> {
  reportState('waiting for the archiver');
  await link.ready();
  const leading = () => engine()?.role === 'leader';
  let uploading = Promise.resolve();
  const uploadCommitted = () => {
    uploading = uploading
      .then(() => {
        const e = engine();
        if (e?.role === 'leader') return uploadWalTail(wal, link, log, BigInt(e.appliedIndex));
      })
      .catch((err: Error) => log.warn({ err: err.message }, 'WAL not uploaded; the next seal or election uploads it'));
  };
  const wal = openWal(cfg.dataDir, log, { onSeal: () => leading() && uploadCommitted() });
  return {
    wal,
    // A follower keeps the last --peer-buffer-size entries past what LMDB holds: should it lead,
    // it serves followers catching up from them (its buffer is seeded from its WAL).
    archivedThrough: () => (leading() ? link.archivedThrough : Math.max(0, (engine()?.appliedIndex ?? 0) - cfg.peerBufferSize)),
    cluster: { memberId: memberIdOf(cfg.nodeId), clusterId: clusterIdOf(cfg.s3Bucket!, cfg.s3Prefix) },
  };
}

/**
 * A new leader uploads what the object store lacks of its WAL. As a follower it trimmed its WAL
 * once LMDB held it, while the previous leader may not have uploaded that part yet: if the WAL
 * no longer reaches back to the store's position, a checkpoint covers the gap first (an
 * uploaded WAL with a hole would be refused, and a restore could not cross it).
 */
async function uploadAsNewLeader(engine: Engine, link: Archive, log: Logger): Promise<void> {
  const wal = engine.wal;
  // What the WAL holds now is committed (a new leader applied its staged entries first). Not
  // what it holds after the checkpoint below: this term's batches then in flight may still be
  // refused, and their indices reused.
  const committed = wal.lastIndex;
  const reaches = wal.isEmpty ? BigInt(engine.appliedIndex) <= BigInt(link.uploadedThrough) : wal.firstIndex <= BigInt(link.uploadedThrough) + 1n;
  if (!reaches) {
    log.info({ walFirst: Number(wal.firstIndex), uploadedThrough: link.uploadedThrough }, 'the WAL no longer reaches the object store\'s: checkpointing first');
    const c = await link.checkpoint();
    log.info({ checkpoint: c.key, appliedIndex: c.appliedIndex }, 'checkpoint written');
  }
  await uploadWalTail(wal, link, log, committed);
}
