// The gateway process: the client port (gateway.ts) on the node's LMDB, opened read-only,
// with its writes and feed on storage's Unix socket and, in cluster mode, the peer agent's.
import type { Config } from '../../shared/config.js';
import { clusterMode, socketPath } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { openMvcc } from '../../shared/mvcc/schema.js';
import { UnixStreamChannel } from '../../shared/grpc/stream-channel.js';
import { storageLink } from '../../shared/batch-link/link.js';
import { startStages } from '../../shared/stages.js';
import { startTracing } from '../../shared/tracing.js';
import { installLifecycle, nodeMetrics, serveMetrics, signalReady } from '../../shared/component.js';
import { feedOverChannel } from './watch/feed-link.js';
import { startGateway, type Gateway } from './gateway.js';

export async function runGateway(cfg: Config): Promise<void> {
  const log = createLogger('gateway', cfg.logLevel, cfg.logFormat);
  const stages = startStages('gateway', cfg.nodeId);
  const tracing = await startTracing(log);
  const db = openMvcc(cfg.dataDir, { readOnly: true });
  // One connection to storage for the write links and the feed: storage sends a batch's feed
  // message and its answers in one write, read here in one wake-up.
  const toStorage = new UnixStreamChannel(socketPath(cfg.dataDir, 'storage'));
  const writes = storageLink(toStorage, log, 'Write');
  const leases = storageLink(toStorage, log, 'Lease');
  const agent = clusterMode(cfg) ? new UnixStreamChannel(socketPath(cfg.dataDir, 'peer')) : undefined;
  let gateway: Gateway | undefined;
  serveMetrics('gateway', () => gateway?.refreshMetrics());
  gateway = await startGateway(cfg, { log, db, writes, leases, feed: feedOverChannel(toStorage), agent, tracing, stages, metrics: () => nodeMetrics('gateway') });
  installLifecycle(log, {
    async stop() {
      await gateway!.close();
      writes.close();
      leases.close();
      toStorage.close();
      agent?.close();
      await db.env.close();
    },
  });
  signalReady({ listen: cfg.listen });
}
