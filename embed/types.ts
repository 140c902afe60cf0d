// What the Node's operations take and return. Keys and values go in as string (UTF-8) or
// bytes, and come back as Buffer (a Uint8Array: `kv.value.toString()` is its UTF-8 text). The
// txn shape mirrors etcd's Txn (compare, success, failure) with names a program reads.
import type { Bytes } from './options.js';

/** One version of a key, as a read returns it (etcd's mvccpb.KeyValue). */
export interface KeyValue {
  key: Buffer;
  value: Buffer;
  /** The revision of the key's creation (of this life of it: a deleted key is created anew). */
  createRevision: number;
  /** The revision of this version: the compare-and-swap token of update() and deleteIfRevision(). */
  modRevision: number;
  /** Versions of the key since its creation (1 for a new key). */
  version: number;
  /** The lease the key is attached to; 0n for none. */
  lease: bigint;
}

/** The revision a write produced (the store's revision after it). */
export interface WriteResult {
  revision: number;
}

export interface DeleteResult extends WriteResult {
  /** Keys deleted (0 or 1 for delete(key); a prefix may delete more). */
  deleted: number;
}

export interface ListOptions {
  /** At most this many keys; 0 or absent: all. `more` says whether there were more. */
  limit?: number;
  /** Read at this revision (0 or absent: the current one); below the compact revision: ErrCompacted. */
  revision?: number;
  /** Only keys (values come back empty), as etcd's keys_only. */
  keysOnly?: boolean;
}

export interface ListResult {
  kvs: KeyValue[];
  /** Keys in range beyond `limit`. */
  more: boolean;
  /** Keys in range in all (not only those returned). */
  count: number;
  /** The store's revision when it was read: watch from revision + 1 to follow the range from here. */
  revision: number;
}

export interface GetOptions {
  /** Read at this revision (0 or absent: the current one). */
  revision?: number;
}

export interface PutOptions {
  /** Attach the key to a lease (grantLease()); it is deleted when the lease expires or is revoked. */
  lease?: bigint | Lease;
}

export interface Lease {
  id: bigint;
  /** Seconds: the TTL granted (at least 2, as etcd). */
  ttl: number;
}

export interface LeaseStatus {
  id: bigint;
  /** Seconds left; -1 once the lease expired or was revoked. */
  ttl: number;
  /** The TTL it was granted with. */
  grantedTtl: number;
  keys: Buffer[];
}

// ---- txn ------------------------------------------------------------------------------------

export type CompareOp = '==' | '!=' | '<' | '>';

/**
 * A condition on one key: its `modRevision`, `createRevision` or `version` (0 for a key that
 * does not exist), its `value`, or its `lease`, compared with `value` by `op`.
 */
export type Compare =
  | { key: Bytes; target: 'modRevision' | 'createRevision' | 'version'; op: CompareOp; value: number }
  | { key: Bytes; target: 'value'; op: CompareOp; value: Bytes }
  | { key: Bytes; target: 'lease'; op: CompareOp; value: bigint };

/** One operation of a txn branch: a put, a delete (a key or a prefix), or a read (a key or a prefix). */
export type TxnOp =
  | { put: Bytes; value: Bytes; lease?: bigint | Lease }
  | { delete: Bytes; prefix?: boolean }
  | { get: Bytes; prefix?: boolean; limit?: number };

export interface Txn {
  /** Every condition must hold for `then` to run; none: `then` runs. */
  if?: Compare[];
  then?: TxnOp[];
  else?: TxnOp[];
}

/** The result of one TxnOp, in the order of the branch that ran. */
export type TxnOpResult =
  | { type: 'put'; revision: number }
  | { type: 'delete'; deleted: number }
  | { type: 'get'; kvs: KeyValue[]; more: boolean; count: number };

export interface TxnResult {
  /** Whether the conditions held (`then` ran) or not (`else` ran). */
  succeeded: boolean;
  revision: number;
  results: TxnOpResult[];
}

// ---- watch ----------------------------------------------------------------------------------

export interface WatchOptions {
  /** Deliver changes from this revision on (it may be in the past, down to the compact revision); default: the next one. */
  startRevision?: number;
  /** Watch every key that starts with keyOrPrefix, not only that key. */
  prefix?: boolean;
}

export interface WatchEvent {
  type: 'put' | 'delete';
  /** The key's new version; for a delete, the key with mod revision = the deletion's, empty value, version 0. */
  kv: KeyValue;
  /** The revision of the change (several events may share one: a txn). */
  revision: number;
}

/** single: no cluster; leader or follower: a member of one. */
export type Role = 'single' | 'leader' | 'follower';
