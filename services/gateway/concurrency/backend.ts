// What the Lock and Election recipes need from this process, as etcd's v3lock and v3election
// get it from an embedded clientv3: a Txn and a delete through storage, a read of the local
// database, a lease grant, and a watch from the gateway's hub. In-process calls only: nothing
// loops back through the client port.
import type { Header } from '../../../shared/mvcc/responses.js';

/** A decoded mvccpb.KeyValue as protobufjs gives it (int64s as Long or number). */
export type KeyValueMessage = {
  key: Uint8Array;
  createRevision: unknown;
  modRevision: unknown;
  version: unknown;
  value: Uint8Array;
  lease: unknown;
};

/** A Range's answer: the header and the records, decoded. */
export interface GetResult {
  header: Header;
  kvs: KeyValueMessage[];
}

/** A Txn's answer: the header, the branch taken, and the Range answers of that branch in order. */
export interface TxnResult {
  header: Header;
  succeeded: boolean;
  /** For each op of the branch: the records of a Range op, [] for other ops. */
  ranges: KeyValueMessage[][];
}

/** One revision's worth of changes of watched keys. */
export interface WatchBatch {
  /** The store revision the watcher is at after these changes (the watch response header's). */
  revision: number;
  events: { type: 'PUT' | 'DELETE'; kv: KeyValueMessage }[];
}

/** A live watch: batches in revision order. */
export interface WatchStream {
  /** The next batch; rejects with the compacted error if the start revision was compacted. */
  next(): Promise<WatchBatch>;
  cancel(): void;
}

/** The etcdserverpb.TxnRequest this code builds, in protobufjs's camelCase. */
export interface TxnRequest {
  compare: object[];
  success: object[];
  failure: object[];
}

export interface RangeRequest {
  key: Buffer;
  rangeEnd?: Buffer;
  limit?: number;
  sortOrder?: number;
  sortTarget?: number;
  maxCreateRevision?: number;
}

/**
 * The caller's permission checks, made before each operation of a recipe as etcd makes them
 * on the requests of its embedded client, which carries the caller's token (auth/concurrency.ts).
 * Each throws the error etcd's server answers that request with.
 */
export interface OpGuard {
  /**
   * Before a write (an encoded TxnRequest or DeleteRangeRequest): checks it; returns the auth
   * revision it was checked at, which storage holds the write to (a stale one is checked again).
   */
  write(kind: 'txn' | 'deleteRange', body: Buffer): number;
  /** Before granting a session's lease. */
  grantLease(): void;
  /** Before a Range or a watch of [key, rangeEnd) (one key without rangeEnd). */
  read(key: Buffer, rangeEnd: Buffer | undefined): void;
  /**
   * After one of the checks above threw `err`: what to wait on before making it once more (a
   * cluster node catching up with the leader, whose grant may not have reached it yet), or
   * undefined when the refusal stands.
   */
  recheckAfter(err: unknown): Promise<void> | undefined;
}

export interface Backend {
  /**
   * The same backend without the caller's checks, for a recipe's clean-up of the contender key
   * it wrote itself (a waiter that gives up, a campaign cancelled): see recipes.ts.
   */
  readonly cleanup: Backend;
  txn(req: TxnRequest): Promise<TxnResult>;
  /** DeleteRange of one key; the response header. */
  deleteKey(key: Buffer): Promise<Header>;
  /** A linearizable Range, read from this node's database (after it catches up, on a cluster). */
  get(req: RangeRequest): Promise<GetResult>;
  /** Grants a lease of `ttl` seconds with an id chosen by the server. */
  grantLease(ttl: number): Promise<bigint>;
  /** Watches [key, rangeEnd) (one key without rangeEnd) from revision `fromRev`. */
  watch(key: Buffer, rangeEnd: Buffer | undefined, fromRev: number): WatchStream;
}
