// The package's main export (`import { open } from 'kvs'`): a kvs node inside a TypeScript
// program. docs/embedding.md is the guide; open.ts is where a node is put together.
export { open } from './open.js';
export { fork, unfork, type ForkOptions } from './branches.js';
export type { Node, Served, Watch } from './node.js';
export type { OpenOptions, ServeOptions, Bytes, ReadConsistency, ObjectStoreLocation, ObjectStoreOption, BranchPoint, PeerTlsOptions } from './options.js';
export type {
  KeyValue, WriteResult, DeleteResult, GetOptions, ListOptions, ListResult, PutOptions, Lease, LeaseStatus,
  Compare, CompareOp, TxnOp, Txn, TxnOpResult, TxnResult, WatchOptions, WatchEvent, Role,
} from './types.js';
export type { ObjectStore } from '../shared/objectstore/store.js';
export type { AutoCompact } from '../shared/config.js';
export {
  KvsError, ErrKeyExists, ErrRevisionMismatch, ErrCompacted, ErrFutureRev, ErrLeaseNotFound, ErrNotLeader, ErrInvalidArgument, ErrUnavailable, ErrClosed,
} from './errors.js';
