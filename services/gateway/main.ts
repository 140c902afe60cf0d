// The gateway process: the client port. Serves the etcd v3 services, reads LMDB directly
// (read-only) and sends writes to the storage process.
import type { Config } from '../../shared/config.js';
import { clientUrl, clusterMode, socketPath } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { openMvcc } from '../../shared/mvcc/schema.js';
import { OpenStreams } from '../../shared/grpc/plumbing.js';
import { GrpcServer } from '../../shared/grpc/server.js';
import { clientTlsFiles } from '../../shared/tls/client-port.js';
import { startStages } from '../../shared/stages.js';
import { installLifecycle, nodeMetrics, serveMetrics, signalReady } from '../../shared/component.js';
import { VERSION } from '../../shared/version.js';
import { JsonGateway } from './json/gateway.js';
import { http1Server, Http2Exchange } from './json/exchanges.js';
import * as M from '../../shared/metrics.js';
import { MAX_REQUEST_BYTES, GRPC_OVERHEAD_BYTES } from '../../shared/errors.js';
import { storageLink, type WriteLink } from '../../shared/batch-link/link.js';
import { UnixStreamChannel } from '../../shared/grpc/stream-channel.js';
import { ClusterView, RoutedLink } from './cluster-view.js';
import { NodeInfo } from './node-info.js';
import { kvService } from './kv.js';
import { maintenanceService, clusterService } from './maintenance.js';
import { HashWorker } from './hash-worker.js';
import { removeStaleSnapshots, stopSnapshotThreads } from './snapshot.js';
import { leaseService } from './lease.js';
import { parseDuration } from '../../shared/duration.js';
import { Hub } from './watch/hub.js';
import { FeedLink } from './watch/feed-link.js';
import { watchService } from './watch/service.js';
import { gatewayBackend } from './concurrency/gateway-backend.js';
import { hubWatch } from './concurrency/hub-watch.js';
import { lockService, electionService } from './concurrency/services.js';
import { startTracing } from '../../shared/tracing.js';
import { GatewaySpans } from './spans.js';
import { AuthGate } from './auth/gate.js';
import { TokenRenewer } from './auth/renewer.js';
import { authService } from './auth/service.js';
import { checkAll, watchAuthorizer } from './auth/wrap.js';
import { maintenanceChecks, recipeGuard } from './auth/concurrency.js';
import { jwtTokens, verifiedFirst } from './auth/jwt.js';

export async function runGateway(cfg: Config): Promise<void> {
  const log = createLogger('gateway', cfg.logLevel, cfg.logFormat);
  const stages = startStages('gateway', cfg.nodeId);
  const tracing = await startTracing(log);
  const db = openMvcc(cfg.dataDir, { readOnly: true });
  const tls = clientTlsFiles(cfg);
  const node = new NodeInfo(db, cfg.nodeId, [clientUrl(cfg)]);
  node.linearizableReads = cfg.readConsistency === 'linearizable';
  if (cfg.peerTlsCa) node.peerScheme = 'https';
  removeStaleSnapshots(cfg.dataDir);
  // One connection to storage for the write links and the feed: storage sends a batch's feed
  // message and its answers in one write, read here in one wake-up.
  const toStorage = new UnixStreamChannel(socketPath(cfg.dataDir, 'storage'));
  const storageWrites = storageLink(toStorage, log, 'Write');
  const storageLeases = storageLink(toStorage, log, 'Lease');
  const hub = new Hub(db, log);
  const feed = new FeedLink(toStorage, hub, log);
  // Cluster mode: writes and lease calls go to storage while this node leads, else to the
  // leader through the peer agent (services/gateway/cluster-view.ts).
  let link: WriteLink = storageWrites;
  let leaseLink: WriteLink = storageLeases;
  let view: ClusterView | undefined;
  const hashes = new HashWorker(cfg.dataDir, log);
  const closers: { close(): void }[] = [storageWrites, storageLeases, toStorage, hashes];
  if (clusterMode(cfg)) {
    view = new ClusterView(socketPath(cfg.dataDir, 'peer'), feed, log);
    node.cluster = view;
    const fw = view.forwardLink('Forward', log);
    const fl = view.forwardLink('ForwardLease', log);
    link = new RoutedLink(view, storageWrites, fw, feed);
    leaseLink = new RoutedLink(view, storageLeases, fl, feed);
    closers.push(fw, fl, view);
  }
  const renewer = new TokenRenewer(link, log);
  const jwt = jwtTokens(cfg.authToken, log);
  // A refusal on a cluster node is checked again once it has what the leader had committed.
  const catchUp = view ? () => view!.linearize() : undefined;
  const gate = new AuthGate(db, { renew: renewer.renew, tokenTtlMs: cfg.tokenTtl * 1000, jwt, catchUp });
  serveMetrics('gateway', () => {
    const c = hub.counts();
    M.watchActive.set(c.watchers);
    M.watchActivePrefixes.set(c.prefixes);
    M.watchFeedQuiet.set(feed.quiet ? 1 : 0);
  });
  const streams = new OpenStreams();
  const stopping = new AbortController();
  const watch = watchService(hub, db, node, { progressIntervalMs: parseDuration(cfg.watchProgressNotifyInterval, 'watch-progress-notify-interval'), authorize: watchAuthorizer(gate) }, log);
  // Lock and Election run etcd's recipes on in-process calls: storage link, LMDB, watch hub;
  // each call's operations are checked for its caller as they are made.
  const concurrency = gatewayBackend(db, node, link, hubWatch(hub));
  const recipeBackend = (call: Parameters<typeof recipeGuard>[1]) => concurrency(recipeGuard(gate, call));
  // etcd: --max-request-bytes plus gRPC overhead; larger messages are refused by gRPC itself.
  // etcd's JSON gateway on the same port: HTTP/1.x connections, and HTTP/2 requests that are
  // not gRPC, are read as JSON and served by the same handlers (services/gateway/json).
  let json: JsonGateway | undefined;
  const http1 = http1Server({
    handle: (ex) => json!.handle(ex),
    acceptsWebSocket: (method, url, cn) => json!.acceptsWebSocket(method, url, cn),
    maxMessageBytes: MAX_REQUEST_BYTES + GRPC_OVERHEAD_BYTES,
  });
  const server = new GrpcServer({
    maxReceiveMessageLength: MAX_REQUEST_BYTES + GRPC_OVERHEAD_BYTES,
    tls,
    log,
    otherHttp: {
      connection: (socket) => http1.connection(socket),
      stream: (stream, headers) => json!.handle(new Http2Exchange(stream, headers)),
    },
  });
  json = new JsonGateway({
    server,
    maxMessageBytes: MAX_REQUEST_BYTES + GRPC_OVERHEAD_BYTES,
    version: { etcdserver: VERSION.etcdCompat, etcdcluster: '3.4.0' },
    metrics: () => nodeMetrics('gateway'),
    authEnabled: () => gate.freshMeta().enabled,
    clientCertAuth: !!tls?.ca,
    // A linearizable read is possible: on a cluster, this node has what the leader committed.
    readable: () => (node.mustLinearize(false) ? node.cluster!.linearize() : Promise.resolve()),
    log,
  });
  // With auth enabled every service checks its caller (services/gateway/auth).
  const guarded = ({ def, impl }: { def: unknown; impl: object }, checks: Parameters<typeof checkAll>[2]) => ({ def, impl: checkAll(gate, impl as Record<string, unknown>, checks) });
  for (const { def, impl } of [
    kvService(db, link, node, gate, tracing && new GatewaySpans(tracing), stages),
    guarded(maintenanceService(db, cfg.dataDir, node, log, hashes), maintenanceChecks),
    clusterService(db, node),
    leaseService(link, leaseLink, streams, gate),
    watch,
    lockService(recipeBackend, log, stopping.signal),
    electionService(recipeBackend, log, stopping.signal),
    authService(db, link, gate, node, log, { bcryptCost: cfg.bcryptCost, jwt }),
  ]) {
    server.addService(def as never, (jwt ? verifiedFirst(jwt, impl) : impl) as Record<string, unknown>);
  }
  await server.listen(cfg.listen);
  installLifecycle(log, {
    async stop() {
      watch.shutdown();
      streams.endAll('kvs: gateway is shutting down');
      stopping.abort();
      http1.closeAll();
      await server.shutdown(5000);
      feed.close();
      renewer.close();
      for (const c of closers) c.close();
      await stopSnapshotThreads(cfg.dataDir);
      await db.env.close();
    },
  });
  log.info({ listen: cfg.listen, tls: tls ? (tls.ca ? 'mutual' : 'server') : 'off' }, `serving etcd v3 clients on ${node.clientUrls[0]}`);
  signalReady({ listen: cfg.listen });
}
