// The storage process: the only LMDB writer. Owns the WAL, group commit, revisions, MVCC
// apply and compaction. Serves the Storage service on <data-dir>/run/storage.sock.
import type { Config } from '../../shared/config.js';
import { socketPath } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { openMvcc } from '../../shared/mvcc/schema.js';
import { bindUnix, shutdown } from '../../shared/grpc/server.js';
import { installLifecycle, signalReady } from '../../shared/component.js';
import { Engine } from './engine.js';
import { storageServer } from './server.js';

export async function runStorage(cfg: Config): Promise<void> {
  const log = createLogger('storage', cfg.logLevel);
  const db = openMvcc(cfg.dataDir, { readOnly: false });
  const engine = Engine.open(db, cfg.dataDir, log);
  const { server, endStreams } = storageServer(engine, cfg.dataDir, log);
  const socket = socketPath(cfg.dataDir, 'storage');
  await bindUnix(server, socket);
  // An idle segment is sealed after SegmentMaxAge so it can be archived.
  // Sealed segments are trimmed once LMDB is synced past them (no object store yet).
  const rotation = setInterval(() => {
    engine.rotateIfDue();
    engine.trimWal();
  }, 1000);
  rotation.unref();
  engine.lessor.startExpiry();
  installLifecycle(log, {
    async stop() {
      clearInterval(rotation);
      // Finish what is queued, answer it, then end the write streams so the shutdown does not
      // wait for callers that would keep them open forever.
      await engine.close();
      endStreams();
      await shutdown(server, 3000);
    },
  });
  log.info({ socket, revision: engine.executor.revision }, 'storage ready');
  signalReady({ revision: engine.executor.revision });
}
