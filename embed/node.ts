// The Node of the embedding API: what open() resolves with (its implementation is
// embedded-node.ts). Keys and values are string (UTF-8) or bytes; reads return Buffers.
// Writes are acknowledged once durable (in the WAL, fsynced; with an object store and
// walSyncUpload, also uploaded), as `kvs run` acknowledges them.
import type { Registry } from 'prom-client';
import type { Bytes, ServeOptions } from './options.js';
import type {
  DeleteResult, GetOptions, KeyValue, Lease, LeaseStatus, ListOptions, ListResult, PutOptions, Role, Txn, TxnResult, WatchEvent, WatchOptions, WriteResult,
} from './types.js';

/** A client port opened by node.serve(). */
export interface Served {
  /** The port it listens on (the one asked for, or the one the system gave for port 0). */
  readonly port: number;
  /** Ends its calls (watches and keep-alives at once, with UNAVAILABLE; unary calls within 5 s) and stops listening. */
  close(): Promise<void>;
}

/** A watch: iterate it with for-await; `close()` (or a `break`) ends it. */
export interface Watch extends AsyncIterableIterator<WatchEvent> {
  close(): void;
}

export interface Node {
  // ---- writes ---------------------------------------------------------------------------------

  /** Writes `value` under `key` (creating or replacing it). Span kvs.put. */
  put(key: Bytes, value: Bytes, opts?: PutOptions): Promise<WriteResult>;
  /** Writes `key` only if it does not exist; rejects with ErrKeyExists if it does. Span kvs.create. */
  create(key: Bytes, value: Bytes, opts?: PutOptions): Promise<WriteResult>;
  /**
   * Compare-and-swap: writes `value` only if the key's mod revision is `expectedModRevision`
   * (from a read; 0: the key must not exist); rejects with ErrRevisionMismatch, carrying the
   * actual mod revision, otherwise. Span kvs.update.
   */
  update(key: Bytes, value: Bytes, expectedModRevision: number, opts?: PutOptions): Promise<WriteResult>;
  /** Deletes `key`; `deleted` is 0 if it did not exist. Span kvs.delete. */
  delete(key: Bytes): Promise<DeleteResult>;
  /** Deletes `key` only if its mod revision is `revision`; rejects with ErrRevisionMismatch otherwise. Span kvs.delete_if_revision. */
  deleteIfRevision(key: Bytes, revision: number): Promise<DeleteResult>;
  /**
   * etcd's Txn: if every condition of `if` holds, the operations of `then` run, else those of
   * `else`, all at one revision (docs/embedding.md#transactions). Span kvs.txn, or the name
   * of the shape it has (kvs.create, kvs.update, kvs.delete_if_revision), as for `kvs run`.
   */
  txn(t: Txn): Promise<TxnResult>;
  /**
   * Compacts the history below `revision`: reads and watches below it fail with ErrCompacted.
   * `physical`: resolves only once the compacted history is removed from disk. Span kvs.compact.
   */
  compact(revision: number, opts?: { physical?: boolean }): Promise<WriteResult>;

  // ---- reads ----------------------------------------------------------------------------------

  /** The key's value and revisions, or undefined; linearizable or serializable as open()'s readConsistency says. */
  get(key: Bytes, opts?: GetOptions): Promise<KeyValue | undefined>;
  exists(key: Bytes): Promise<boolean>;
  /** The keys that start with `prefix` ('' for every key), in key order. */
  list(prefix: Bytes, opts?: ListOptions): Promise<ListResult>;
  /** How many keys start with `prefix` ('' for every key). */
  count(prefix: Bytes): Promise<number>;
  /** get(), once this node holds everything committed when it was called (a follower: the leader's revision). Span kvs.get. */
  linearizableGet(key: Bytes, opts?: GetOptions): Promise<KeyValue | undefined>;
  /** Span kvs.exists. */
  linearizableExists(key: Bytes): Promise<boolean>;
  /** Span kvs.list. */
  linearizableList(prefix: Bytes, opts?: ListOptions): Promise<ListResult>;
  /** Span kvs.count. */
  linearizableCount(prefix: Bytes): Promise<number>;
  /** The store's current revision (of the last write this node has applied). */
  currentRevision(): number;
  /** The compaction watermark: reads below it fail with ErrCompacted (0 before any compaction). */
  compactRevision(): number;
  /**
   * Changes of `keyOrPrefix` (with `prefix`, of every key starting with it) from
   * `startRevision` (default: the next revision), in revision order. It ends when the node
   * closes or the watch is closed, and throws ErrCompacted when it needs history that was
   * compacted (a start below the compact revision).
   */
  watch(keyOrPrefix: Bytes, opts?: WatchOptions): Watch;

  // ---- leases ---------------------------------------------------------------------------------

  /** A lease of `ttl` seconds (at least 2, as etcd): keys put with it are deleted when it expires or is revoked. */
  grantLease(ttl: number): Promise<Lease>;
  /** Renews the lease to its full TTL and resolves with it; ErrLeaseNotFound once it is gone. Renew every TTL/3 or so. */
  keepAlive(lease: bigint | Lease): Promise<number>;
  /** Revokes the lease and deletes its keys (in one revision). */
  revokeLease(lease: bigint | Lease): Promise<WriteResult>;
  /** The lease's remaining TTL and keys; ErrLeaseNotFound for a lease that is gone. */
  leaseTimeToLive(lease: bigint | Lease): Promise<LeaseStatus>;

  // ---- the node -------------------------------------------------------------------------------

  /** single: no cluster; leader or follower: this node's role in its cluster now. */
  role(): Role;
  /** The node's metrics (the kvs_* of docs/observability.md), to merge into the program's registry. */
  metrics(): Registry;
  /**
   * Serves this node to etcd clients (etcdctl, the etcd3 package, curl on the JSON gateway, ...)
   * on `listen`, as `kvs run`'s client port. close() (or the node's) stops the port.
   */
  serve(opts: ServeOptions): Promise<Served>;
  /** Ends every watch, finishes the queued writes, and closes the data directory. Idempotent. */
  close(): Promise<void>;
  /** Whether close() was called. */
  readonly closed: boolean;
}
