// Fuzz cases for the client port: every method of every etcd service kvs serves (KV, Watch,
// Lease, Auth, Maintenance, Cluster, Lock, Election), plus unknown ones, with well-formed and
// mutated requests (writes only inside the scratch prefix), in the shared framings of cases.ts.
import { methodsOf, requestBody, type MethodInfo } from './bodies.js';
import { sharedCase, type Case, type TargetSpec } from './cases.js';
import type { Pools } from './protobuf-fuzz.js';
import type { Rand } from './random.js';
import { AUTH_SCRATCH, SCRATCH } from './scratch-guard.js';

export const CLIENT_SERVICES = [
  'etcdserverpb.KV',
  'etcdserverpb.Watch',
  'etcdserverpb.Lease',
  'etcdserverpb.Cluster',
  'etcdserverpb.Maintenance',
  'etcdserverpb.Auth',
  'v3lockpb.Lock',
  'v3electionpb.Election',
] as const;

/** The keys the oracle's data set uses: read by the fuzzer, never written. */
export const SEED_PREFIX = 'seed/';

const key = (s: string) => Buffer.from(s);
export const CLIENT_POOLS: Pools = {
  bytes: [
    key(`${SCRATCH}a`), key(`${SCRATCH}b`), key(`${SCRATCH}lock`), key(SCRATCH), key('fuzz0'),
    key(`${SEED_PREFIX}00`), key(`${SEED_PREFIX}07`), key(SEED_PREFIX), key('seed0'),
    Buffer.from([0]), Buffer.alloc(0), key('a'), Buffer.from([0xff, 0xff]),
    key(`${SCRATCH}${'x'.repeat(3000)}`),
  ],
  strings: [`${AUTH_SCRATCH}-user`, `${AUTH_SCRATCH}-role`, 'root', '', 'seed/00', 'a password', `${AUTH_SCRATCH}\u0000x`],
};

function clientSpec(): TargetSpec {
  const methods = methodsOf(CLIENT_SERVICES);
  const range = methods.find((m) => m.path === '/etcdserverpb.KV/Range')!;
  // Paths no service has: gRPC's own answers (UNIMPLEMENTED, a malformed name).
  const unknown: MethodInfo[] = ['/etcdserverpb.KV/NoSuchMethod', '/no.such.Service/Call', '/garbage', '/'].map((path) => ({ ...range, path }));
  return {
    methods: [...methods, ...unknown],
    blocking: new Set([
      '/etcdserverpb.Watch/Watch',
      '/etcdserverpb.Lease/LeaseKeepAlive',
      '/v3lockpb.Lock/Lock',
      '/v3electionpb.Election/Campaign',
      '/v3electionpb.Election/Observe',
    ]),
    messages(rand: Rand, method: MethodInfo): Buffer[] {
      // A unary call gets one message, now and then none or two (both wrong); a stream up to four.
      const count = method.requestStream ? rand.range(0, 4) : rand.weighted([[18, 1], [1, 0], [1, 2]] as const);
      return Array.from({ length: count }, () => requestBody(rand, method, CLIENT_POOLS));
    },
  };
}

let spec: TargetSpec | undefined;

/** Case `rand` draws for the client port. */
export function clientCase(rand: Rand): Case {
  return sharedCase(rand, (spec ??= clientSpec()));
}
