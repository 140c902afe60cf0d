// Fuzz cases for the peer port (kvs.peer.Peer): Follow streams whose Hellos and ACKs come with
// any term, index and member, in any order (ACKs for entries never sent, a second Hello, an ACK
// before the Hello), forwarded write batches (valid ones only inside the scratch prefix, any op
// number), GetRevision with odd bodies; in the shared framings of cases.ts.
import { methodsOf, requestBody, type MethodInfo } from './bodies.js';
import { sharedCase, type Case, type TargetSpec } from './cases.js';
import { CLIENT_POOLS } from './client-cases.js';
import type { Pools } from './protobuf-fuzz.js';
import type { Rand } from './random.js';
import { EPOCH_HEADER } from '../../services/peer/transport.js';

/** The etcd request each kvs.storage.Op carries (services/storage), by op number. */
const OP_METHOD: Record<number, string> = {
  1: '/etcdserverpb.KV/Put',
  2: '/etcdserverpb.KV/DeleteRange',
  3: '/etcdserverpb.KV/Txn',
  4: '/etcdserverpb.KV/Compact',
  5: '/etcdserverpb.Lease/LeaseGrant',
  6: '/etcdserverpb.Lease/LeaseRevoke',
  7: '/etcdserverpb.Lease/LeaseKeepAlive',
  8: '/etcdserverpb.Lease/LeaseTimeToLive',
  9: '/etcdserverpb.Lease/LeaseLeases',
};

export const PEER_POOLS: Pools = {
  bytes: CLIENT_POOLS.bytes,
  // Mostly made-up node ids; now and then a real one of the test cluster (startCluster's n1..n3).
  strings: ['fuzz-n9', 'fuzz-x', '', 'http://127.0.0.1:1', 'n3', '\u0000', 'fuzz-y'.repeat(200)],
};

function peerSpec(): TargetSpec {
  const methods = methodsOf(['kvs.peer.Peer']);
  const etcd = new Map(methodsOf(['etcdserverpb.KV', 'etcdserverpb.Lease']).map((m) => [m.path, m]));
  const unknown: MethodInfo[] = ['/kvs.peer.Peer/NoSuch', '/kvs.peer.Agent/Attach', '/kvs.storage.Storage/Write'].map((path) => ({ ...methods[0]!, path }));
  /** A forwarded request's body: the etcd request its op names (well-formed or mutated). */
  const fillBatch = (rand: Rand) => (o: Record<string, unknown>) => {
    for (const req of (o.requests as Record<string, unknown>[] | undefined) ?? []) {
      const m = etcd.get(OP_METHOD[Number(req.op)] ?? '');
      if (m && rand.chance(0.8)) req.body = requestBody(rand, m, PEER_POOLS, 0.3);
    }
  };
  return {
    methods: [...methods, ...unknown],
    blocking: new Set(['/kvs.peer.Peer/Follow', '/kvs.peer.Peer/Forward', '/kvs.peer.Peer/ForwardLease']),
    messages(rand: Rand, method: MethodInfo): Buffer[] {
      const count = method.requestStream ? rand.range(0, 6) : rand.weighted([[18, 1], [1, 0], [1, 2]] as const);
      const fill = method.path.startsWith('/kvs.peer.Peer/Forward') ? fillBatch(rand) : undefined;
      return Array.from({ length: count }, () => requestBody(rand, method, PEER_POOLS, 0.3, fill));
    },
  };
}

let spec: TargetSpec | undefined;

/** Case `rand` draws for the peer port, whose leader is the leadership of `epoch` (its lock's). */
export function peerCase(rand: Rand, epoch: string): Case {
  spec ??= peerSpec();
  return sharedCase(rand, { ...spec, headers: { [EPOCH_HEADER]: epoch } });
}
