// This node's replication state from its peer agent (Agent.State on run/peer.sock, the stream
// the gateway follows): role, term, whether a follower is in sync with its leader, why writes
// cannot be served, and whether the leader is degraded and why (on a follower, as the leader
// tells its followers). Read once per Cluster view: the first message of the stream, then the
// call is cancelled.
import * as grpc from '@grpc/grpc-js';
import { socketPath, type Config } from '../../shared/config.js';
import { service, num } from '../../shared/proto/index.js';

export interface PeerState {
  role: 'leader' | 'follower' | 'unknown';
  term: number;
  leader: string;
  inSync: boolean;
  reason: string;
  degraded: boolean;
  /** Why the leader's replication is degraded ('' when it is not): this node's, or its leader's. */
  leaderDegraded: string;
}

const ROLES = ['unknown', 'leader', 'follower'] as const;

export function readPeerState(cfg: Config, ms = 1500): Promise<PeerState> {
  const Ctor = grpc.makeGenericClientConstructor(service('kvs.peer.Agent'), 'Agent');
  const client = new Ctor(`unix:${socketPath(cfg.dataDir, 'peer')}`, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
  return new Promise((resolve, reject) => {
    const call = client.State({}, { deadline: Date.now() + ms }) as grpc.ClientReadableStream<any>;
    let done = false;
    const finish = (err: Error | undefined, s?: PeerState) => {
      if (done) return;
      done = true;
      call.cancel();
      client.close();
      if (err) reject(err);
      else resolve(s!);
    };
    call.on('data', (s: any) =>
      finish(undefined, { role: ROLES[s.role as number] ?? 'unknown', term: num(s.term), leader: s.leader?.nodeId ?? '', inSync: !!s.inSync, reason: s.reason ?? '', degraded: !!s.degraded, leaderDegraded: s.leaderDegraded ?? '' }),
    );
    call.on('error', (err: grpc.ServiceError) => finish(new Error(`peer agent: ${err.details || err.message}`)));
    call.on('end', () => finish(new Error('peer agent: the State stream ended without a message')));
  });
}
