// etcd's client-visible errors: the same gRPC status code and message text as etcd 3.4
// (etcdserver/api/v3rpc/rpctypes), because clients match on them.
import { status } from '@grpc/grpc-js';

export class EtcdError extends Error {
  constructor(readonly code: status, message: string) {
    super(message);
  }
}

const e = (code: status, message: string) => new EtcdError(code, message);

export const Errors = {
  emptyKey: e(status.INVALID_ARGUMENT, 'etcdserver: key is not provided'),
  keyNotFound: e(status.INVALID_ARGUMENT, 'etcdserver: key not found'),
  valueProvided: e(status.INVALID_ARGUMENT, 'etcdserver: value is provided'),
  leaseProvided: e(status.INVALID_ARGUMENT, 'etcdserver: lease is provided'),
  tooManyOps: e(status.INVALID_ARGUMENT, 'etcdserver: too many operations in txn request'),
  duplicateKey: e(status.INVALID_ARGUMENT, 'etcdserver: duplicate key given in txn request'),
  compacted: e(status.OUT_OF_RANGE, 'etcdserver: mvcc: required revision has been compacted'),
  futureRev: e(status.OUT_OF_RANGE, 'etcdserver: mvcc: required revision is a future revision'),
  requestTooLarge: e(status.INVALID_ARGUMENT, 'etcdserver: request is too large'),
  leaseNotFound: e(status.NOT_FOUND, 'etcdserver: requested lease not found'),
  leaseExists: e(status.FAILED_PRECONDITION, 'etcdserver: lease already exists'),
  leaseTTLTooLarge: e(status.OUT_OF_RANGE, 'etcdserver: too large lease TTL'),
  memberNotLearner: e(status.FAILED_PRECONDITION, 'etcdserver: can only promote a learner member'),
  notCapable: e(status.UNAVAILABLE, 'etcdserver: not capable'),
  // Cluster mode: no leader is reachable (electing, partitioned). Clients retry on UNAVAILABLE.
  noLeader: e(status.UNAVAILABLE, 'etcdserver: no leader'),
  // Cluster mode: the leader a request was sent to is no longer the leader.
  leaderChanged: e(status.UNAVAILABLE, 'etcdserver: leader changed'),
  // kvs's own, where etcd has no equivalent
  keyTooLong: (max: number) =>
    e(status.INVALID_ARGUMENT, `kvs: key is longer than ${max} bytes (the embedded database's key size limit)`),
  storageUnavailable: e(status.UNAVAILABLE, 'kvs: storage process unavailable, retry'),
} as const;

/** etcd's default --max-request-bytes; grpc's own limit is this plus 512 KiB of overhead. */
export const MAX_REQUEST_BYTES = 1.5 * 1024 * 1024;
export const GRPC_OVERHEAD_BYTES = 512 * 1024;
/** etcd's default --max-txn-ops. */
export const MAX_TXN_OPS = 128;

/**
 * Decodes a client's request bytes (forwarded undecoded by the gateway). Bytes that do not
 * decode fail with gRPC's unmarshalling error, INTERNAL, as etcd's do.
 */
export function decodeRequest<T>(decode: (body: Uint8Array) => T, body: Uint8Array): T {
  try {
    return decode(body);
  } catch (err) {
    throw new EtcdError(status.INTERNAL, `grpc: error unmarshalling request: ${(err as Error).message}`);
  }
}
