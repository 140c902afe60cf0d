// An embedded node as a member of a cluster with `kvs run` nodes (docs/embedding.md#in-a-cluster):
// the peer agent (services/peer/agent.ts) runs in the caller's process, with its peer port for
// the other nodes, and the node's storage attaches to it as `kvs run`'s storage process does
// (services/storage/cluster-member.ts), over an in-process pipe instead of run/peer.sock. The
// node's own writes and linearizable reads take the gateway's cluster routes
// (services/gateway/cluster-view.ts): to the engine while this node leads, else forwarded to the
// leader, and a read waits until this node has applied what the leader had committed.
import type { Config } from '../shared/config.js';
import { resolveConfig } from '../shared/config.js';
import { EtcdError } from '../shared/errors.js';
import type { Logger } from '../shared/log.js';
import type { ObjectStore } from '../shared/objectstore/store.js';
import { inProcessChannel } from '../shared/grpc/memory-pipe.js';
import type { StreamChannel } from '../shared/grpc/stream-channel.js';
import type { Engine, EngineOptions } from '../services/storage/engine.js';
import { storageServer } from '../services/storage/server.js';
import { engineFeed, engineLeaseLink, engineWriteLink } from '../services/storage/in-process.js';
import { attachToPeer, clusterEngineOptions } from '../services/storage/cluster-member.js';
import type { PeerAttach } from '../services/storage/peer-attach.js';
import type { Archive } from '../shared/objectstore/archive.js';
import { startPeer, type PeerAgent } from '../services/peer/agent.js';
import { peerCredentials } from '../services/peer/transport.js';
import { ClusterView, RoutedLink } from '../services/gateway/cluster-view.js';
import { FeedLink } from '../services/gateway/watch/feed-link.js';
import { Hub } from '../services/gateway/watch/hub.js';
import type { Attachment } from './attachment.js';
import type { ResolvedOptions } from './check-options.js';
import type { Host } from './host.js';
import type { ObjectStoreLocation, ObjectStoreOption } from './options.js';
import { fromEtcd } from './errors.js';
import { peerTlsFlags } from './peer-tls.js';
import type { PeerTlsFlags } from '../shared/tls/peer-port.js';

/** This node's leadership as the embedded archiver follows it (checkpoints on the leader only, under its term). */
export interface LeaderState {
  leading: boolean;
  term: number;
}

/** What the cluster role needs of the object store's attachment (embed/object-store.ts), once it is prepared. */
export interface ClusterStore {
  /** Storage's side of the archiver: the leader uploads through it. */
  readonly archive: Archive | undefined;
  /** The prefix's store, opened: the leader lock, term starts, catch-up. */
  readonly store: ObjectStore | undefined;
}


const isLocation = (o: ObjectStoreOption): o is ObjectStoreLocation => typeof (o as ObjectStore).get !== 'function';

/**
 * The cluster settings of `kvs run` (its flags resolved as the CLI resolves them), from open()'s
 * options: the same checks, the same defaults (liveness TTL, retries), the same cluster id of
 * the bucket and prefix as the `kvs run` nodes of the cluster compute.
 */
function clusterConfig(o: ResolvedOptions, tlsFlags: Record<string, string>): Config {
  const store = o.objectStore!;
  const flags: Record<string, unknown> = {
    'data-dir': o.dataDir,
    'node-id': o.nodeId,
    'peer-listen': o.peerListen,
    'advertise-peer': o.advertisePeer,
    's3-bucket': isLocation(store) ? store.bucket : store.location,
    's3-prefix': isLocation(store) ? (store.prefix ?? '') : '',
    'peer-buffer-size': o.peerBufferSize,
    'read-consistency': o.readConsistency,
    'auth-enabled': o.authEnabled,
    'log-format': 'json',
    ...tlsFlags,
  };
  try {
    // The program's environment (KVS_*) is not the node's settings.
    return resolveConfig(flags, {});
  } catch (err) {
    throw new TypeError(`kvs open(): ${(err as Error).message.replace(/--([a-z-]+)/g, (_m, f: string) => f.replace(/-([a-z])/g, (_n, c: string) => c.toUpperCase()))}`);
  }
}

/** An etcd error of the cluster routes as the embedding API's error class. */
function mapped<T>(p: Promise<T>): Promise<T> {
  return p.catch((err: unknown) => {
    throw err instanceof EtcdError ? fromEtcd(err.code, err.message) : err;
  });
}

/**
 * What open() attaches for `peerListen`, after the object store's (`objectStore`: its archive
 * and opened store). `role` is kept as this node's leadership (the embedded archiver, given the
 * same object, checkpoints while it leads). Once started, host.agent connects to the peer agent
 * (node.serve()'s gateway follows it). Stopping hands leadership over first, as `kvs run`'s
 * supervisor stops the peer agent before storage.
 */
export function clusterAttachment(objectStore: ClusterStore, role: LeaderState): Attachment {
  let cfg: Config | undefined;
  let log: Logger | undefined;
  let engine: Engine | undefined;
  let removeTls: (() => void) | undefined;
  let peerClient: PeerTlsFlags | undefined;
  let storage: ReturnType<typeof storageServer> | undefined;
  let peer: PeerAgent | undefined;
  let attach: PeerAttach | undefined;
  let toAgent: StreamChannel | undefined;
  let feed: FeedLink | undefined;
  let view: ClusterView | undefined;
  const closers: { close(): void }[] = [];
  return {
    async prepare({ options, log: l }): Promise<EngineOptions> {
      log = l;
      const tls = peerTlsFlags(options);
      removeTls = tls.remove;
      peerClient = tls.client;
      try {
        cfg = clusterConfig(options, tls.flags);
        const archive = objectStore.archive;
        if (!archive) throw new Error('kvs: cluster mode needs the object store attached first');
        return await clusterEngineOptions(cfg, archive, l, () => engine);
      } catch (err) {
        tls.remove(); // stop() runs only for what started
        throw err;
      }
    },
    async start(host: Host) {
      engine = host.engine;
      const c = cfg!;
      const l = log!;
      // The leader's side of a follower's forwarded write reaches the engine as on `kvs run`:
      // the Storage service, here on in-process pipes.
      storage = storageServer(engine, l);
      // No client URL to show: the node has a client port only once serve() opens one.
      peer = await startPeer(c, {
        log: l,
        store: objectStore.store!,
        creds: peerCredentials(c, l, peerClient),
        toStorage: () => inProcessChannel(storage!.server),
        clientUrl: '',
        host: {
          reportState: (detail) => l.debug({ detail }, 'peer agent'),
          // `kvs run`'s supervisor restores the checkpoint in place; an embedded node restores at open().
          tooFarBehind: (why) =>
            l.error({ why }, 'this node is too far behind the object store to catch up (gc removed the WAL it needs): close() it, remove its data directory, and open() it again to restore the latest checkpoint'),
        },
      });
      attach = attachToPeer(inProcessChannel(peer.agent), engine, objectStore.archive!, c, l, (leading, term) => {
        role.leading = leading;
        role.term = term;
      });
      const agent = peer.agent;
      host.agent = () => inProcessChannel(agent);
      // The node's own routes: the gateway's, on the engine's in-process links.
      toAgent = inProcessChannel(peer.agent);
      feed = new FeedLink(engineFeed(engine), new Hub(engine.db, l), l);
      view = new ClusterView(toAgent, feed, l);
      const fw = view.forwardLink('Forward', l);
      const fl = view.forwardLink('ForwardLease', l);
      closers.push(fw, fl);
      const writes = new RoutedLink(view, engineWriteLink(engine), fw, feed);
      const leases = new RoutedLink(view, engineLeaseLink(engine), fl, feed);
      const local = host.routes;
      host.routes = {
        write: (op, body, traceParent) => mapped(writes.call(op, body, 0, traceParent)),
        lease: (op, body) => mapped(leases.call(op, body)),
        linearize: () => mapped(view!.linearize()),
        role: local.role,
      };
    },
    async stop() {
      // A leader hands over while its storage still runs; a follower just stops.
      await peer?.close();
      attach?.close();
      for (const c of closers) c.close();
      view?.close();
      feed?.close();
      toAgent?.close();
      storage?.endStreams();
      await storage?.server.shutdown(1000);
      removeTls?.();
    },
  };
}
