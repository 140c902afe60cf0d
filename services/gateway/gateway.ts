// The client port as a library: the etcd v3 services (gRPC and etcd's JSON gateway on one
// port) on a database it reads and the links it writes through. Two hosts: the gateway
// process (main.ts: LMDB opened read-only, the links on storage's and the peer agent's Unix
// sockets) and an embedded node's serve() (embed/serve.ts: the engine's own database and
// in-process links). Everything process-wide (metrics to the supervisor, signals, readiness)
// is the host's.
import type { Config } from '../../shared/config.js';
import { OpenStreams } from '../../shared/grpc/plumbing.js';
import { GrpcServer } from '../../shared/grpc/server.js';
import { clientTlsFiles } from '../../shared/tls/client-port.js';
import { VERSION } from '../../shared/version.js';
import { JsonGateway } from './json/gateway.js';
import { http1Server, Http2Exchange } from './json/exchanges.js';
import * as M from '../../shared/metrics.js';
import { MAX_REQUEST_BYTES, GRPC_OVERHEAD_BYTES } from '../../shared/errors.js';
import { ClusterView, RoutedLink } from './cluster-view.js';
import { NodeInfo } from './node-info.js';
import { kvService } from './kv.js';
import { maintenanceService, clusterService } from './maintenance.js';
import { HashWorker } from './hash-worker.js';
import { removeStaleSnapshots, stopSnapshotThreads } from './snapshot.js';
import { leaseService } from './lease.js';
import { parseDuration } from '../../shared/duration.js';
import { Hub } from './watch/hub.js';
import { watchService } from './watch/service.js';
import { gatewayBackend } from './concurrency/gateway-backend.js';
import { hubWatch } from './concurrency/hub-watch.js';
import { lockService, electionService } from './concurrency/services.js';
import { GatewaySpans } from './spans.js';
import { AuthGate } from './auth/gate.js';
import { TokenRenewer } from './auth/renewer.js';
import { authService } from './auth/service.js';
import { checkAll, watchAuthorizer } from './auth/wrap.js';
import { maintenanceChecks, recipeGuard } from './auth/concurrency.js';
import { jwtTokens, verifiedFirst } from './auth/jwt.js';

import { clientUrl } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import type { WriteLink } from '../../shared/batch-link/link.js';
import type { StreamChannel } from '../../shared/grpc/stream-channel.js';
import type { StageTrace } from '../../shared/stages.js';
import type { Tracing } from '../../shared/tracing.js';
import { FeedLink, type FeedSource } from './watch/feed-link.js';

/** What the client port stands on; the host makes it (main.ts over sockets, embed/ in process). */
export interface GatewayDeps {
  log: Logger;
  /** The node's database, read here (the gateway process opens it read-only). */
  db: MvccDb;
  /** Storage's Write and Lease streams, and its feed of committed batches. */
  writes: WriteLink;
  leases: WriteLink;
  feed: FeedSource;
  /** Cluster mode: the peer agent (Agent.State, ReadIndex, Forward). */
  agent?: StreamChannel;
  tracing?: Tracing;
  stages?: StageTrace;
  /** The node's metrics in Prometheus's text format, for the JSON gateway's /metrics. */
  metrics(): Promise<string>;
}

export interface Gateway {
  /** The port it listens on (the one asked for, or the one the system gave for port 0). */
  readonly port: number;
  readonly node: NodeInfo;
  /** Sets the gauges read off the gateway's state (before a scrape). */
  refreshMetrics(): void;
  /** Ends long-lived calls, drains unary ones (5 s grace), closes the links; not the database. */
  close(): Promise<void>;
}

export async function startGateway(cfg: Config, deps: GatewayDeps): Promise<Gateway> {
  const { log, db, tracing, stages } = deps;
  const tls = clientTlsFiles(cfg);
  const node = new NodeInfo(db, cfg.nodeId, [clientUrl(cfg)]);
  node.linearizableReads = cfg.readConsistency === 'linearizable';
  if (cfg.peerTlsCa) node.peerScheme = 'https';
  removeStaleSnapshots(cfg.dataDir);
  const hub = new Hub(db, log);
  const feed = new FeedLink(deps.feed, hub, log);
  // Cluster mode: writes and lease calls go to storage while this node leads, else to the
  // leader through the peer agent (services/gateway/cluster-view.ts).
  let link: WriteLink = deps.writes;
  let leaseLink: WriteLink = deps.leases;
  let view: ClusterView | undefined;
  const hashes = new HashWorker(cfg.dataDir, log);
  const closers: { close(): void }[] = [hashes];
  if (deps.agent) {
    view = new ClusterView(deps.agent, feed, log);
    node.cluster = view;
    const fw = view.forwardLink('Forward', log);
    const fl = view.forwardLink('ForwardLease', log);
    link = new RoutedLink(view, deps.writes, fw, feed);
    leaseLink = new RoutedLink(view, deps.leases, fl, feed);
    closers.push(fw, fl, view);
  }
  const renewer = new TokenRenewer(link, log);
  const jwt = jwtTokens(cfg.authToken, log);
  // A refusal on a cluster node is checked again once it has what the leader had committed.
  const catchUp = view ? () => view!.linearize() : undefined;
  const gate = new AuthGate(db, { renew: renewer.renew, tokenTtlMs: cfg.tokenTtl * 1000, jwt, catchUp });
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
    metrics: deps.metrics,
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
  const port = await server.listen(cfg.listen);
  log.info({ listen: cfg.listen, tls: tls ? (tls.ca ? 'mutual' : 'server') : 'off' }, `serving etcd v3 clients on ${node.clientUrls[0]}`);
  return {
    port,
    node,
    refreshMetrics() {
      const c = hub.counts();
      M.watchActive.set(c.watchers);
      M.watchActivePrefixes.set(c.prefixes);
      M.watchFeedQuiet.set(feed.quiet ? 1 : 0);
    },
    async close() {
      watch.shutdown();
      streams.endAll('kvs: gateway is shutting down');
      stopping.abort();
      http1.closeAll();
      await server.shutdown(5000);
      feed.close();
      renewer.close();
      for (const c of closers) c.close();
      await stopSnapshotThreads(cfg.dataDir);
    },
  };
}
