// The peer agent as a library (cluster mode, docs/cluster.md): wiring only. The node's role and
// term, the election and where writes go are in peer-node.ts; this file serves the peer port
// (--peer-listen) to the other nodes, and the Agent service for its own node's storage,
// gateway and archiver, and stops them in order. Two hosts: the peer process (main.ts: Agent on
// <data-dir>/run/peer.sock) and an embedded node (embed/cluster.ts: Agent on in-process pipes).
import fs from 'node:fs';
import { status } from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { clientUrl } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { service } from '../../shared/proto/index.js';
import { GrpcServer, type ServerCall, type UnaryCallback } from '../../shared/grpc/server.js';
import type { StreamChannel } from '../../shared/grpc/stream-channel.js';
import { serveBatchStream } from '../../shared/batch-link/serve.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import { Errors, type EtcdError } from '../../shared/errors.js';
import { memberIdOf } from '../../shared/membership.js';
import type { Member } from './state.js';
import { PeerNode, type PeerHost } from './peer-node.js';
import { listenPeer, type PeerCredentials } from './transport.js';

/**
 * This machine's boot id: the same for every process (and container) running on its kernel,
 * so members that report the same one share its CPUs. '' where the kernel does not tell.
 */
function hostId(): string {
  try {
    return fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

export interface PeerDeps {
  log: Logger;
  /** The prefix's object store: the leader lock, term starts, catch-up. The host closes it. */
  store: ObjectStore;
  creds: PeerCredentials;
  /** A connection to this node's storage: the leader's side of forwarded writes. */
  toStorage(): StreamChannel;
  /**
   * Exposes the Agent service before the peer port opens and the election starts (the peer
   * process binds run/peer.sock; an embedded node injects in-process pipes, and needs nothing).
   */
  serveAgent?(agent: GrpcServer): Promise<void>;
  /** Reports to the host (the peer process: its supervisor). */
  host: PeerHost;
  /** The client URL the other members show for this node; default --advertise-client or --listen's. '' for none (an embedded node without a client port). */
  clientUrl?: string;
}

export interface PeerAgent {
  /** kvs.peer.Agent, for this node's storage (Attach), gateway (State, Forward, ReadIndex) and archiver. */
  readonly agent: GrpcServer;
  readonly node: PeerNode;
  /** The peer port (the one asked for, or the one the system gave for port 0). */
  readonly peerPort: number;
  /** A leader hands over, a follower just stops; then the peer port and the Agent service close. */
  close(): Promise<void>;
}

/** Starts the Agent service (`serveAgent`), the peer port and the election loop. */
export async function startPeer(cfg: Config, deps: PeerDeps): Promise<PeerAgent> {
  const { log, store, creds } = deps;
  const self: Member = { nodeId: cfg.nodeId, memberId: memberIdOf(cfg.nodeId), peerUrl: cfg.advertisePeer!, clientUrl: deps.clientUrl ?? clientUrl(cfg), hostId: hostId() };
  const node = new PeerNode(cfg, self, store, creds, log, deps.toStorage, deps.host);
  // This node's storage, gateway and archiver call in on our own gRPC server, as storage's
  // (shared/grpc/server.ts): a cluster put crosses Attach four times (twice on the
  // leader, twice on each follower), and a follower's forwarded write crosses Forward twice.
  const agent = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  agent.addService(service('kvs.peer.Agent'), {
    Attach: (call: ServerCall<any, unknown>) => node.storage.serve(call),
    State: (call: ServerCall<unknown, unknown>) => node.board.subscribe(call),
    Forward: (call: ServerCall<any, unknown>) => serveBatchStream(call, node.forwardHandler('Write')),
    ForwardLease: (call: ServerCall<any, unknown>) => serveBatchStream(call, node.forwardHandler('Lease')),
    ReadIndex: (_call: unknown, cb: UnaryCallback<unknown>) => node.readIndex().then((r) => cb(null, r), (err: EtcdError) => cb({ code: err.code, details: err.message })),
  });
  await deps.serveAgent?.(agent);

  // The peer port on the same server (the client port's): see transport.ts.
  const peer = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  peer.addService(service('kvs.peer.Peer'), {
    // Each call names the leadership its caller found in the lock (its epoch): any other is
    // refused, as from a node that is not, or no longer, that leader (lock.ts: epoch).
    Follow: (call: ServerCall<any, unknown>) => {
      if (!node.leads(call)) {
        call.emit('error', { code: status.FAILED_PRECONDITION, details: `kvs: ${cfg.nodeId} is not the leader this node found in the lock` });
        return;
      }
      node.leadership!.serve(call);
    },
    Forward: (call: ServerCall<any, unknown>) => (node.leads(call) ? serveBatchStream(call, node.leaderHandler('Write')) : call.emit('error', Errors.leaderChanged)),
    ForwardLease: (call: ServerCall<any, unknown>) => (node.leads(call) ? serveBatchStream(call, node.leaderHandler('Lease')) : call.emit('error', Errors.leaderChanged)),
    GetRevision: (call: ServerCall<unknown, unknown>, cb: UnaryCallback<unknown>) => {
      try {
        if (!node.leads(call)) throw Errors.noLeader;
        cb(null, node.leadership!.readIndex(true));
      } catch (err) {
        cb({ code: (err as EtcdError).code ?? status.UNAVAILABLE, details: (err as Error).message });
      }
    },
  });
  // Our own listener in front of the server: TLS 1.3-only mutual TLS, refused peers logged (transport.ts).
  const peerPort = await listenPeer(peer, cfg.peerListen!, creds, cfg.nodeId, log);

  const stopping = new AbortController();
  const elections = node.run(stopping.signal);
  log.info({ peerListen: cfg.peerListen, advertise: cfg.advertisePeer, tls: creds.tls, node: cfg.nodeId }, 'peer agent ready');
  return {
    agent,
    node,
    peerPort: peerPort.port,
    async close() {
      // A leader hands over (lead() answers the abort so), a follower just stops.
      stopping.abort();
      await elections;
      node.close();
      peerPort.close();
      await peer.shutdown(1000);
      await agent.shutdown(1000);
    },
  };
}
