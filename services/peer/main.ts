// The peer process (cluster mode, docs/cluster.md): wiring only. The node's role and term, the
// election and where writes go are in peer-node.ts; this file serves the peer port
// (--peer-listen) to the other nodes and its own node's storage, gateway and archiver on
// <data-dir>/run/peer.sock, and stops them in order.
import fs from 'node:fs';
import { status } from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { clientUrl, socketPath } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { service } from '../../shared/proto/index.js';
import { bindUnix, shutdown } from '../../shared/grpc/plumbing.js';
import { GrpcServer, type ServerCall, type UnaryCallback } from '../../shared/grpc/server.js';
import { serveBatchStream } from '../../shared/batch-link/serve.js';
import { startStages } from '../../shared/stages.js';
import { installLifecycle, serveMetrics, signalReady } from '../../shared/component.js';
import { openObjectStore, objectStoreOptions } from '../../shared/objectstore/index.js';
import { Errors, type EtcdError } from '../../shared/errors.js';
import { memberIdOf } from '../../shared/membership.js';
import type { Member } from './state.js';
import { PeerNode } from './peer-node.js';
import { listenPeer, peerCredentials } from './transport.js';

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

export async function runPeer(cfg: Config): Promise<void> {
  const log = createLogger('peer', cfg.logLevel, cfg.logFormat);
  startStages('peer', cfg.nodeId);
  serveMetrics('peer');
  const store = await openObjectStore({ ...objectStoreOptions(cfg), log });
  const creds = peerCredentials(cfg, log);
  const self: Member = { nodeId: cfg.nodeId, memberId: memberIdOf(cfg.nodeId), peerUrl: cfg.advertisePeer!, clientUrl: clientUrl(cfg), hostId: hostId() };
  const node = new PeerNode(cfg, self, store, creds, log);

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
  await bindUnix(agent, socketPath(cfg.dataDir, 'peer'));

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
  installLifecycle(log, {
    async stop() {
      // A leader hands over (lead() answers the abort so), a follower just stops.
      stopping.abort();
      await elections;
      node.close();
      peerPort.close();
      await peer.shutdown(1000);
      await shutdown(agent, 1000);
      store.close();
    },
  });
  log.info({ peerListen: cfg.peerListen, advertise: cfg.advertisePeer, tls: creds.tls, node: cfg.nodeId }, 'peer agent ready');
  signalReady({ peerListen: cfg.peerListen });
}

