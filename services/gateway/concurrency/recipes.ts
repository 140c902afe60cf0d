// The lock and election recipes of etcd 3.4's clientv3/concurrency (mutex.go, election.go,
// key.go), on a Backend, so that kvs's Lock and Election services write the same keys at the
// same revisions and fail with the same errors as etcd's v3lock and v3election.
//
// A lock or an election `name` owns the keys under `name + "/"`; each contender writes
// `name/<lease id in hex>` attached to its lease. The contender whose key has the lowest
// create revision holds the lock (is the leader); the others wait until every key created
// before theirs is deleted (released, resigned, or its lease ended).
import { num } from '../../../shared/proto/index.js';
import type { Header } from '../../../shared/mvcc/responses.js';
import { SortOrder, SortTarget } from '../../../shared/mvcc/range.js';
import type { Backend, KeyValueMessage, RangeRequest, WatchBatch } from './backend.js';
import { prefixEnd as keyRangePrefixEnd } from '../watch/key-range.js';

export class RecipeError extends Error {}

/** etcd's concurrency errors (sent to clients with gRPC code Unknown, as etcd does). */
export const RecipeErrors = {
  notLeader: () => new RecipeError('election: not leader'),
  noLeader: () => new RecipeError('election: no leader'),
  missingLeaderKey: () => new RecipeError('"leader" field must be provided'),
  lostWatcher: () => new RecipeError('lost watcher waiting for delete'),
};

/** Thrown when the caller went away (its gRPC call was cancelled or timed out). */
export class Cancelled extends Error {}

/** concurrency.NewSession's default TTL, used when a request names no lease. */
export const DEFAULT_SESSION_TTL = 60;

const CREATE = 1; // etcdserverpb.Compare.CompareTarget.CREATE
const EQUAL = 0; // etcdserverpb.Compare.CompareResult.EQUAL

/** etcd's GetPrefixRangeEnd: the range_end of every key starting with `prefix`. */
export function prefixEnd(prefix: Buffer): Buffer {
  return keyRangePrefixEnd(prefix) ?? Buffer.from([0]);
}

/** `name/`: the prefix a lock or an election keeps its contenders under. */
export function contendersPrefix(name: Uint8Array): Buffer {
  return Buffer.concat([Buffer.from(name), Buffer.from('/')]);
}

/** `prefix<lease in hex>` (Go's %x of the int64 lease id). */
export function contenderKey(prefix: Buffer, lease: bigint): Buffer {
  return Buffer.concat([prefix, Buffer.from(lease.toString(16))]);
}

/** v3.WithFirstCreate(): the oldest key under the prefix. */
function firstCreate(prefix: Buffer): RangeRequest {
  return { key: prefix, rangeEnd: prefixEnd(prefix), sortTarget: SortTarget.CREATE, sortOrder: SortOrder.ASCEND, limit: 1 };
}

function createdAt(key: Buffer, rev: number): object {
  return { result: EQUAL, target: CREATE, key, createRevision: rev };
}

function throwIfCancelled(signal: AbortSignal): void {
  if (signal.aborted) throw new Cancelled('cancelled');
}

/** Waits for the next batch of a watch, or for `signal`. */
async function nextBatch(next: Promise<WatchBatch>, signal: AbortSignal): Promise<WatchBatch> {
  throwIfCancelled(signal);
  let onAbort: (() => void) | undefined;
  try {
    return await Promise.race([
      next,
      new Promise<never>((_, reject) => {
        onAbort = () => reject(new Cancelled('cancelled'));
        signal.addEventListener('abort', onAbort, { once: true });
      }),
    ]);
  } finally {
    if (onAbort) signal.removeEventListener('abort', onAbort);
  }
}

/** key.go waitDelete: until `key` is deleted, watching from `rev`. */
async function waitDelete(b: Backend, key: Buffer, rev: number, signal: AbortSignal): Promise<void> {
  const w = b.watch(key, undefined, rev);
  try {
    for (;;) {
      const batch = await nextBatch(w.next(), signal);
      if (batch.events.some((e) => e.type === 'DELETE')) return;
    }
  } finally {
    w.cancel();
  }
}

/** key.go waitDeletes: until no key under `prefix` was created at or before `maxCreateRev`. */
export async function waitDeletes(b: Backend, prefix: Buffer, maxCreateRev: number, signal: AbortSignal): Promise<Header> {
  for (;;) {
    throwIfCancelled(signal);
    const r = await b.get({ key: prefix, rangeEnd: prefixEnd(prefix), sortTarget: SortTarget.CREATE, sortOrder: SortOrder.DESCEND, limit: 1, maxCreateRevision: maxCreateRev });
    if (r.kvs.length === 0) return r.header;
    await waitDelete(b, Buffer.from(r.kvs[0]!.key), r.header.revision, signal);
  }
}

// ---- mutex.go ----------------------------------------------------------------------------

/** Mutex.Lock: blocks until `name` is held under `lease`; returns the header and the key. */
export async function lock(b: Backend, name: Uint8Array, lease: bigint, signal: AbortSignal): Promise<{ header: Header; key: Buffer }> {
  const prefix = contendersPrefix(name);
  const key = contenderKey(prefix, lease);
  const r = await b.txn({
    compare: [createdAt(key, 0)],
    // Put self in the queue; the oldest key holds the lock. Or reuse the key this lease has.
    success: [{ requestPut: { key, value: Buffer.alloc(0), lease: lease.toString() } }, { requestRange: firstCreate(prefix) }],
    failure: [{ requestRange: { key } }, { requestRange: firstCreate(prefix) }],
  });
  const myRev = r.succeeded ? r.header.revision : num(r.ranges[0]![0]!.createRevision as number);
  const owner = r.ranges[1]!;
  if (owner.length === 0 || num(owner[0]!.createRevision as number) === myRev) return { header: r.header, key };
  try {
    return { header: await waitDeletes(b, prefix, myRev - 1, signal), key };
  } catch (err) {
    // As Mutex.Lock: a waiter that gives up leaves the queue. etcd deletes with its embedded
    // client's own context, which carries no token, so with auth enabled etcd's delete is refused
    // and the key stays until its lease ends; kvs deletes it (the key this call wrote, or found
    // under its lease, with the caller's write permission checked by the Txn above).
    await b.cleanup.deleteKey(key).catch(() => {});
    throw err;
  }
}

// ---- election.go -------------------------------------------------------------------------

export interface LeaderKey {
  name: Buffer;
  key: Buffer;
  rev: number;
  lease: bigint;
}

/** Election.Proclaim: sets the leader's value, if `leader` still is the leader's key. */
export async function proclaim(b: Backend, leader: { key: Buffer; rev: number }, sessionLease: bigint, value: Uint8Array): Promise<Header> {
  const r = await b.txn({
    compare: [createdAt(leader.key, leader.rev)],
    success: [{ requestPut: { key: leader.key, value, lease: sessionLease.toString() } }],
    failure: [],
  });
  if (!r.succeeded) throw RecipeErrors.notLeader();
  return r.header;
}

/** Election.Resign: deletes the leader key if it is still the one campaigned with. */
export async function resign(b: Backend, leader: { key: Buffer; rev: number }): Promise<Header> {
  const r = await b.txn({ compare: [createdAt(leader.key, leader.rev)], success: [{ requestDeleteRange: { key: leader.key } }], failure: [] });
  return r.header;
}

/** Election.Campaign: blocks until elected; returns the header of the campaign's write. */
export async function campaign(b: Backend, name: Uint8Array, lease: bigint, value: Uint8Array, signal: AbortSignal): Promise<{ header: Header; leader: LeaderKey }> {
  const prefix = contendersPrefix(name);
  const key = contenderKey(prefix, lease);
  const r = await b.txn({
    compare: [createdAt(key, 0)],
    success: [{ requestPut: { key, value, lease: lease.toString() } }],
    failure: [{ requestRange: { key } }],
  });
  let rev = r.header.revision;
  if (!r.succeeded) {
    const kv = r.ranges[0]![0]!;
    rev = num(kv.createRevision as number);
    if (!Buffer.from(kv.value).equals(Buffer.from(value))) {
      try {
        await proclaim(b, { key, rev }, lease, value);
      } catch (err) {
        await resign(b, { key, rev }).catch(() => {});
        throw err;
      }
    }
  }
  try {
    await waitDeletes(b, prefix, rev - 1, signal);
  } catch (err) {
    // A campaign given up by its caller is withdrawn (Campaign resigns on a cancelled context;
    // like Mutex.Lock's clean-up, etcd's resign carries no token, and kvs's is not checked).
    if (err instanceof Cancelled) await resign(b.cleanup, { key, rev }).catch(() => {});
    throw err;
  }
  return { header: r.header, leader: { name: Buffer.from(name), key, rev, lease } };
}

/** Election.Leader: the current leader's key-value. */
export async function leader(b: Backend, name: Uint8Array): Promise<{ header: Header; kv: KeyValueMessage }> {
  const r = await b.get(firstCreate(contendersPrefix(name)));
  if (r.kvs.length === 0) throw RecipeErrors.noLeader();
  return { header: r.header, kv: r.kvs[0]! };
}

/**
 * Election.Observe: calls `send` with the leader, then with every change of the leader's
 * value, and again with each new leader, until `signal` ends it. Awaits `send` (backpressure).
 */
export async function observe(b: Backend, name: Uint8Array, signal: AbortSignal, send: (header: Header, kv: KeyValueMessage) => Promise<void>): Promise<void> {
  const prefix = contendersPrefix(name);
  for (;;) {
    throwIfCancelled(signal);
    const r = await b.get(firstCreate(prefix));
    let header = r.header;
    let kv = r.kvs[0];
    if (!kv) {
      // No leader yet: wait for the first put under the prefix.
      const w = b.watch(prefix, prefixEnd(prefix), r.header.revision);
      try {
        while (!kv) {
          const batch = await nextBatch(w.next(), signal);
          const put = batch.events.find((e) => e.type === 'PUT');
          if (put) {
            kv = put.kv;
            header = { ...header, revision: num(kv.modRevision as number) };
          }
        }
      } finally {
        w.cancel();
      }
    }
    await send(header, kv);
    // Follow the leader's key until it is deleted, then look for the next leader.
    const w = b.watch(Buffer.from(kv.key), undefined, header.revision + 1);
    try {
      let deleted = false;
      while (!deleted) {
        const batch = await nextBatch(w.next(), signal);
        for (const e of batch.events) {
          if (e.type === 'DELETE') {
            deleted = true;
            break;
          }
          await send({ ...header, revision: batch.revision }, e.kv);
        }
      }
    } finally {
      w.cancel();
    }
  }
}
