// Reads straight from LMDB in the caller's process, as the gateway of `kvs run` reads: a fresh
// read snapshot per read (so a read issued after a write was acknowledged sees it), with etcd's
// Range rules (shared/mvcc/range.ts).
import type { MvccDb } from '../shared/mvcc/schema.js';
import { range, readRevisions, resolveRevision, walkRange, type RangeParams, type Revisions } from '../shared/mvcc/range.js';
import { EtcdError, Errors } from '../shared/errors.js';
import { ErrCompacted, ErrFutureRev, fromEtcd } from './errors.js';
import { keyValueOf } from './codec.js';
import type { KeyValue, ListResult } from './types.js';

function params(key: Buffer, rangeEnd: Buffer, p: Partial<RangeParams>): RangeParams {
  return {
    key,
    rangeEnd,
    limit: 0,
    revision: 0,
    sortOrder: 0,
    sortTarget: 0,
    keysOnly: false,
    countOnly: false,
    minModRevision: 0,
    maxModRevision: 0,
    minCreateRevision: 0,
    maxCreateRevision: 0,
    ...p,
  };
}

/** A fresh snapshot's revision counters. */
export function snapshot(db: MvccDb): Revisions {
  db.env.resetReadTxn();
  return readRevisions(db);
}

/** etcd's revision errors, with the revisions a caller needs to act on them. */
function readError(err: unknown, requested: number, revs: Revisions): Error {
  if (!(err instanceof EtcdError)) return err as Error;
  if (err === Errors.compacted) return new ErrCompacted(requested, revs.compacted);
  if (err === Errors.futureRev) return new ErrFutureRev(requested, revs.current);
  return fromEtcd(err.code, err.message);
}

/** The key's version at `revision` (0: now), or undefined. */
export function getKey(db: MvccDb, key: Buffer, revision = 0): KeyValue | undefined {
  const revs = snapshot(db);
  let found: KeyValue | undefined;
  try {
    if (key.length === 0) throw Errors.emptyKey;
    const rev = resolveRevision(revision, revs);
    walkRange(db, key, Buffer.alloc(0), rev, revs.current, 0, false, (record) => (found = keyValueOf(record)));
  } catch (err) {
    throw readError(err, revision, revs);
  }
  return found;
}

export function listRange(db: MvccDb, key: Buffer, rangeEnd: Buffer, opts: { limit?: number; revision?: number; keysOnly?: boolean }): ListResult {
  const revs = snapshot(db);
  try {
    const r = range(db, params(key, rangeEnd, { limit: opts.limit ?? 0, revision: opts.revision ?? 0, keysOnly: opts.keysOnly === true }), revs);
    return { kvs: r.kvs.map(keyValueOf), more: r.more, count: r.count, revision: r.revision };
  } catch (err) {
    throw readError(err, opts.revision ?? 0, revs);
  }
}

export function countRange(db: MvccDb, key: Buffer, rangeEnd: Buffer, revision = 0): number {
  const revs = snapshot(db);
  try {
    return range(db, params(key, rangeEnd, { countOnly: true, revision }), revs).count;
  } catch (err) {
    throw readError(err, revision, revs);
  }
}
