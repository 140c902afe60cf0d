// The peer process (cluster mode, docs/cluster.md): the peer agent (agent.ts) with its Agent
// service on <data-dir>/run/peer.sock for this node's storage, gateway and archiver.
import type { Config } from '../../shared/config.js';
import { socketPath } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { bindUnix } from '../../shared/grpc/plumbing.js';
import { UnixStreamChannel } from '../../shared/grpc/stream-channel.js';
import { startStages } from '../../shared/stages.js';
import { installLifecycle, reportState, requestCheckpointRestore, serveMetrics, signalReady } from '../../shared/component.js';
import { openObjectStore, objectStoreOptions } from '../../shared/objectstore/index.js';
import { startPeer } from './agent.js';
import { peerCredentials } from './transport.js';

export async function runPeer(cfg: Config): Promise<void> {
  const log = createLogger('peer', cfg.logLevel, cfg.logFormat);
  startStages('peer', cfg.nodeId);
  serveMetrics('peer');
  const store = await openObjectStore({ ...objectStoreOptions(cfg), log });
  const creds = peerCredentials(cfg, log);
  const peer = await startPeer(cfg, {
    log,
    store,
    creds,
    toStorage: () => new UnixStreamChannel(socketPath(cfg.dataDir, 'storage')),
    serveAgent: (agent) => bindUnix(agent, socketPath(cfg.dataDir, 'peer')),
    // The supervisor shows the state, and restores the checkpoint (it restarts storage).
    host: { reportState, tooFarBehind: requestCheckpointRestore },
  });
  installLifecycle(log, {
    async stop() {
      await peer.close();
      store.close();
    },
  });
  signalReady({ peerListen: cfg.peerListen });
}
