// Executes etcd write requests against the storage process's write transaction with etcd
// 3.4's rules (etcdserver/apply.go, api/v3rpc/key.go), producing the encoded client response
// and the WAL entry that records the physical effect.
import type protobuf from 'protobufjs';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META } from '../../../shared/mvcc/schema.js';
import { decodeKeyValue, encodeKeyValue, type KeyValue } from '../../../shared/mvcc/keyvalue.js';
import { range, liveInRange, type Revisions, type RangeParams } from '../../../shared/mvcc/range.js';
import * as R from '../../../shared/mvcc/responses.js';
import { Errors } from '../../../shared/errors.js';
import { num, bigint } from '../../../shared/proto/index.js';
import { leaseExists } from '../../../shared/mvcc/leases.js';
import { isLive, liveVersion } from '../../../shared/mvcc/keyindex.js';
import { rangeParams, type CompactionRequest, type Compare, type DeleteRangeRequest, type Int64, type PutRequest, type RangeRequest, type RequestOp, type TxnRequest } from '../../../shared/mvcc/requests.js';
import { checkIntervals, checkPutRequest, checkTxnRequest } from '../../../shared/mvcc/request-checks.js';
import { markCompaction } from './compaction.js';
import { applyPut, applyDelete } from './apply.js';
import { MUTATION_PUT, MUTATION_DELETE, type Mutation, type WalEntry } from '../../../shared/wal/entry.js';
import { asBuffer as buf } from '../../../shared/bytes.js';

export interface Identity {
  clusterId: string;
  memberId: string;
  raftTerm: number;
}

// ---- the executor ------------------------------------------------------------------------

/**
 * One instance per storage process. Within a batch each request runs against the write
 * transaction, so it sees the effects of the requests before it.
 */
export class Executor {
  /** The current revision as of the last executed request. */
  revision: number;
  compactRevision: number;
  /** Mutations of the request being executed (one revision). */
  private mutations: Mutation[] = [];
  private beginRev = 0;

  constructor(private readonly db: MvccDb, private readonly id: Identity) {
    this.revision = 0;
    this.compactRevision = 0;
    this.reload();
  }

  /** Re-reads the counters from the database (after an aborted batch). */
  reload(): void {
    this.revision = (this.db.meta.get(META.revision) as number | undefined) ?? 1;
    this.compactRevision = (this.db.meta.get(META.compactRevision) as number | undefined) ?? 0;
  }

  private header(revision: number): R.Header {
    return { clusterId: this.id.clusterId, memberId: this.id.memberId, revision, raftTerm: this.id.raftTerm };
  }

  private revs(): Revisions {
    return { current: this.mutations.length ? this.beginRev + 1 : this.beginRev, compacted: this.compactRevision };
  }

  private begin(): void {
    this.beginRev = this.revision;
    this.mutations = [];
  }

  /** Closes the request: returns its WAL entry if it changed anything. */
  private end(): WalEntry | undefined {
    if (this.mutations.length === 0) return undefined;
    this.revision = this.beginRev + 1;
    this.db.meta.putSync(META.revision, this.revision);
    return { revision: this.revision, mutations: this.mutations, compactRevision: 0 };
  }

  put(r: PutRequest): { response: Buffer; entry?: WalEntry } {
    checkPutRequest(r);
    this.checkLease(r.lease);
    this.begin();
    const prev = liveVersion(this.db, buf(r.key));
    if ((r.ignoreValue || r.ignoreLease) && !prev) throw Errors.keyNotFound;
    const rev = this.doPut(r, prev);
    const response = R.build((w) => R.putResponse(w, this.header(rev), r.prevKv ? prev : undefined));
    return { response, entry: this.end() };
  }

  /** Writes one key version; `prev` is its live version before the write. */
  private doPut(r: PutRequest, prev: Buffer | undefined): number {
    const rev = this.beginRev + 1;
    const old: KeyValue | undefined = prev ? decodeKeyValue(prev) : undefined;
    const key = buf(r.key);
    const kv = encodeKeyValue({
      key,
      createRevision: old ? old.createRevision : rev,
      modRevision: rev,
      version: old ? old.version + 1 : 1,
      value: r.ignoreValue && old ? old.value : r.value,
      lease: r.ignoreLease && old ? old.lease : bigint(r.lease),
    });
    applyPut(this.db, key, kv, rev, this.mutations.length);
    this.mutations.push({ type: MUTATION_PUT, kv });
    return rev;
  }

  deleteRange(r: DeleteRangeRequest): { response: Buffer; entry?: WalEntry } {
    // Only emptiness: a key longer than LMDB allows cannot exist, so it deletes nothing (as etcd).
    if (r.key.length === 0) throw Errors.emptyKey;
    this.begin();
    const { deleted, prevKvs } = this.doDelete(r);
    const rev = this.mutations.length ? this.beginRev + 1 : this.beginRev;
    const response = R.build((w) => R.deleteRangeResponse(w, this.header(rev), deleted, prevKvs));
    return { response, entry: this.end() };
  }

  private doDelete(r: DeleteRangeRequest): { deleted: number; prevKvs: Buffer[] } {
    const live = liveInRange(this.db, r.key, r.rangeEnd);
    const rev = this.beginRev + 1;
    for (const kv of live) {
      const key = buf(decodeKeyValue(kv).key);
      const tombstone = applyDelete(this.db, key, rev, this.mutations.length);
      this.mutations.push({ type: MUTATION_DELETE, kv: tombstone });
    }
    return { deleted: live.length, prevKvs: r.prevKv ? live : [] };
  }

  txn(r: TxnRequest): { response: Buffer; entry?: WalEntry } {
    checkTxnRequest(r);
    checkIntervals(r.success);
    checkIntervals(r.failure);
    this.begin();
    const path: boolean[] = [];
    this.compareToPath(r, path);
    // As etcd: every put on the path is checked before any range, and ranges also in read-only txns.
    if (hasWrites(r)) this.checkRequests(r, path.slice(), (op) => this.checkPut(op));
    this.checkRequests(r, path.slice(), (op) => this.checkRange(op));
    const responses = R.build((w) => this.applyTxn(w, r, path.slice()));
    const rev = this.mutations.length ? this.beginRev + 1 : this.beginRev;
    const head = R.build((w) => {
      R.writeHeader(w, 1, this.header(rev));
      if (path[0]) w.uint32(0x10).bool(true);
    });
    return { response: Buffer.concat([head, responses]), entry: this.end() };
  }

  /** Evaluates every compare on the chosen path against the state before the txn (as etcd). */
  private compareToPath(r: TxnRequest, path: boolean[]): void {
    const ok = r.compare.every((c) => this.applyCompare(c));
    path.push(ok);
    for (const op of ok ? r.success : r.failure) if (op.requestTxn) this.compareToPath(op.requestTxn, path);
  }

  private applyCompare(c: Compare): boolean {
    const kvs = liveInRange(this.db, c.key, c.rangeEnd);
    if (kvs.length === 0) {
      if (c.target === CompareTarget.VALUE) return false; // a missing key has no value to compare
      return compareKV(c, undefined);
    }
    return kvs.every((kv) => compareKV(c, decodeKeyValue(kv)));
  }

  /** etcd's checkRequests: runs `check` on every op on the path, before any change. */
  private checkRequests(r: TxnRequest, path: boolean[], check: (op: RequestOp) => void): void {
    const ok = path.shift()!;
    for (const op of ok ? r.success : r.failure) {
      if (op.requestTxn) this.checkRequests(op.requestTxn, path, check);
      else check(op);
    }
  }

  private checkPut(op: RequestOp): void {
    const p = op.requestPut;
    if (!p) return;
    if ((p.ignoreValue || p.ignoreLease) && !isLive(this.db, buf(p.key))) throw Errors.keyNotFound;
    this.checkLease(p.lease);
  }

  /**
   * A put may name only a granted lease. As etcd, one that has expired but is not revoked yet
   * still counts: its revocation (due at once) deletes the key with the lease's others.
   */
  private checkLease(lease: Int64): void {
    const id = bigint(lease);
    if (id !== 0n && !leaseExists(this.db, id)) throw Errors.leaseNotFound;
  }

  private checkRange(op: RequestOp): void {
    const g = op.requestRange;
    if (!g) return;
    const rev = num(g.revision);
    if (rev === 0) return;
    if (rev > this.beginRev) throw Errors.futureRev;
    // Not resolveRevision: etcd compares even a negative revision with the compact revision.
    if (rev < this.compactMainRev()) throw Errors.compacted;
  }

  /** etcd's compactMainRev: -1 until the first compaction (so a compaction to 0 is taken once). */
  private compactMainRev(): number {
    return this.db.meta.get(META.compactRevision) === undefined ? -1 : this.compactRevision;
  }

  /** Applies the chosen branch, writing ResponseOps (field 3) of a TxnResponse into `w`. */
  private applyTxn(w: protobuf.Writer, r: TxnRequest, path: boolean[]): void {
    const ok = path.shift()!;
    for (const op of ok ? r.success : r.failure) {
      R.embed(w, 3, (w) => {
        if (op.requestRange) {
          const rr = range(this.db, rangeParams(op.requestRange), this.revs());
          R.embed(w, 1, (w) => R.rangeResponse(w, R.innerHeader(rr.revision), rr.kvs, rr.more, rr.count));
        } else if (op.requestPut) {
          const p = op.requestPut;
          const prev = liveVersion(this.db, buf(p.key));
          const rev = this.doPut(p, prev);
          R.embed(w, 2, (w) => R.putResponse(w, R.innerHeader(rev), p.prevKv ? prev : undefined));
        } else if (op.requestDeleteRange) {
          const { deleted, prevKvs } = this.doDelete(op.requestDeleteRange);
          const rev = this.mutations.length ? this.beginRev + 1 : this.beginRev;
          R.embed(w, 3, (w) => R.deleteRangeResponse(w, R.innerHeader(rev), deleted, prevKvs));
        } else if (op.requestTxn) {
          const t = op.requestTxn;
          R.embed(w, 4, (w) => {
            R.writeHeader(w, 1, R.innerHeader(0));
            if (path[0]) w.uint32(0x10).bool(true);
            this.applyTxn(w, t, path);
          });
        }
      });
    }
  }

  /**
   * Deletes `keys` (those live) in ONE new revision, in the given order; a lease revocation
   * uses it. Returns the entry (undefined when nothing was live) and the revision after it.
   */
  deleteKeys(keys: readonly Buffer[]): { entry?: WalEntry; revision: number } {
    this.begin();
    const rev = this.beginRev + 1;
    for (const key of keys) {
      if (!isLive(this.db, key)) continue;
      const tombstone = applyDelete(this.db, key, rev, this.mutations.length);
      this.mutations.push({ type: MUTATION_DELETE, kv: tombstone });
    }
    const entry = this.end();
    return { entry, revision: this.revision };
  }

  /** A response header at the current revision. */
  currentHeader(): R.Header {
    return this.header(this.revision);
  }

  compact(r: CompactionRequest): { response: Buffer; entry?: WalEntry } {
    const rev = num(r.revision);
    if (rev <= this.compactMainRev()) throw Errors.compacted;
    if (rev > this.revision) throw Errors.futureRev;
    markCompaction(this.db, rev); // removal follows in steps, between write batches
    this.compactRevision = rev;
    const response = R.build((w) => R.compactionResponse(w, this.header(this.revision)));
    return { response, entry: { revision: 0, mutations: [], compactRevision: rev } };
  }
}

const CompareTarget = { VERSION: 0, CREATE: 1, MOD: 2, VALUE: 3, LEASE: 4 } as const;
const CompareResult = { EQUAL: 0, GREATER: 1, LESS: 2, NOT_EQUAL: 3 } as const;

function cmp(a: number | bigint, b: number | bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** etcd's compareKV; a missing key compares as a zero KeyValue. */
function compareKV(c: Compare, kv: KeyValue | undefined): boolean {
  const u = c.targetUnion;
  let result: number;
  switch (c.target) {
    case CompareTarget.VALUE:
      result = Buffer.compare(buf(kv ? kv.value : new Uint8Array(0)), buf(u === 'value' ? c.value : new Uint8Array(0)));
      break;
    case CompareTarget.CREATE:
      result = cmp(kv?.createRevision ?? 0, u === 'createRevision' ? num(c.createRevision) : 0);
      break;
    case CompareTarget.MOD:
      result = cmp(kv?.modRevision ?? 0, u === 'modRevision' ? num(c.modRevision) : 0);
      break;
    case CompareTarget.VERSION:
      result = cmp(kv?.version ?? 0, u === 'version' ? num(c.version) : 0);
      break;
    case CompareTarget.LEASE:
      result = cmp(kv?.lease ?? 0n, u === 'lease' ? bigint(c.lease) : 0n);
      break;
    default:
      return true;
  }
  switch (c.result) {
    case CompareResult.EQUAL: return result === 0;
    case CompareResult.NOT_EQUAL: return result !== 0;
    case CompareResult.GREATER: return result > 0;
    case CompareResult.LESS: return result < 0;
  }
  return true;
}

function hasWrites(r: TxnRequest): boolean {
  const ops = (list: RequestOp[]) =>
    list.some((op) => op.requestPut || op.requestDeleteRange || (op.requestTxn && hasWrites(op.requestTxn)));
  return ops(r.success) || ops(r.failure);
}

