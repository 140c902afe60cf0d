// The storage process's lessor (etcd's lease/lessor.go): grants and revocations run inside the
// engine's write transaction and go into the WAL; keep-alives and queries are answered from
// the live deadlines kept here, and never touch the WAL. Expiry is a revocation like a
// client's: storage submits it to its own write queue, so it is in the WAL, and a replica that
// replays the WAL deletes the same keys in the same revision.
import { status } from '@grpc/grpc-js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { MAX_LEASE_TTL, MIN_LEASE_TTL, allLeases, leaseExists, leaseKeys } from '../../../shared/mvcc/leases.js';
import { EtcdError, Errors, decodeRequest } from '../../../shared/errors.js';
import { decode, encode, bigint, num, int64, type Long } from '../../../shared/proto/index.js';
import type { Executor } from '../mvcc/execute.js';
import type { WalEntry } from '../../../shared/wal/entry.js';
import { applyGrant, applyRevoke } from './apply.js';
import { ExpiryQueue } from './expiry.js';
import { Op } from '../../../shared/storage/ops.js';

type Int64 = number | Long;
export interface LeaseGrantRequest { TTL: Int64; ID: Int64 }
export interface LeaseIdRequest { ID: Int64 }
export interface LeaseTimeToLiveRequest { ID: Int64; keys: boolean }

/** Queues a write on the engine (for revocations on expiry). */
export type Submit = (op: number, body: Uint8Array, done: (r: { code: number; message: string }) => void) => void;
export type Answer = (r: { body?: Buffer; code: number; message: string }) => void;

/** etcd revokes at most leaseRevokeRate (1000) expired leases per second, checked every 500 ms. */
const TICK_MS = 500;
const REVOKE_PER_TICK = 500;
/** etcd's expiredLeaseRetryInterval: a revocation that failed is tried again after this. */
const RETRY_MS = 3000;

interface Live {
  ttl: number;
  /** A revocation on expiry is queued; keep-alives wait for it (as etcd's Renew does). */
  revoking: boolean;
  waiters: (() => void)[];
}

export class Lessor {
  private live = new Map<bigint, Live>();
  private deadlines = new ExpiryQueue();
  private idPrefix: bigint;
  private idSuffix: bigint;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: MvccDb,
    private readonly executor: Executor,
    memberId: string,
    private readonly submit: Submit,
    private readonly now: () => number = Date.now,
  ) {
    // etcd's idutil.Generator: 2 bytes of the member id, 5 bytes of the start time in ms, a
    // 1-byte counter; ids stay positive.
    this.idPrefix = (BigInt(memberId) & 0xffffn) << 48n;
    this.idSuffix = (BigInt(this.now()) & (2n ** 40n - 1n)) << 8n;
    this.reload();
  }

  /**
   * Rebuilds the live table from the database, keeping the deadlines of leases already known.
   * At startup every lease gets now + its TTL: etcd refreshes every lease to its full TTL when a
   * leader is elected (lease checkpointing is off by default in 3.4), so this is the bound.
   * Also called when a write batch aborted, to drop what it had granted or revoked.
   */
  reload(): void {
    const now = this.now();
    const seen = new Set<bigint>();
    for (const { id, ttl } of allLeases(this.db)) {
      seen.add(id);
      const l = this.live.get(id);
      if (l) {
        l.ttl = ttl;
        continue;
      }
      this.live.set(id, { ttl, revoking: false, waiters: [] });
      this.deadlines.set(id, now + ttl * 1000);
    }
    for (const id of [...this.live.keys()]) if (!seen.has(id)) this.forget(id);
  }

  get count(): number {
    return this.live.size;
  }

  // ---- writes: inside the engine's transaction -----------------------------------------

  grant(r: LeaseGrantRequest): { response: Buffer; entry: WalEntry } {
    let id = bigint(r.ID);
    if (id === 0n) id = this.nextId();
    let ttl = num(r.TTL);
    if (ttl > MAX_LEASE_TTL) throw Errors.leaseTTLTooLarge;
    if (leaseExists(this.db, id)) throw Errors.leaseExists;
    if (ttl < MIN_LEASE_TTL) ttl = MIN_LEASE_TTL;
    applyGrant(this.db, id, ttl);
    this.live.set(id, { ttl, revoking: false, waiters: [] });
    this.deadlines.set(id, this.now() + ttl * 1000);
    const response = encode('etcdserverpb.LeaseGrantResponse', { header: this.executor.currentHeader(), ID: int64(id), TTL: ttl });
    return { response, entry: { revision: 0, mutations: [], compactRevision: 0, leaseGrant: { id, ttl } } };
  }

  /** Deletes the lease's keys in one revision (sorted, as etcd), then the lease. */
  revoke(r: LeaseIdRequest): { response: Buffer; entry: WalEntry } {
    const id = bigint(r.ID);
    if (!leaseExists(this.db, id)) throw Errors.leaseNotFound;
    const { entry } = this.executor.deleteKeys(leaseKeys(this.db, id));
    applyRevoke(this.db, id);
    this.forget(id);
    const response = encode('etcdserverpb.LeaseRevokeResponse', { header: this.executor.currentHeader() });
    return { response, entry: { ...(entry ?? { revision: 0, mutations: [], compactRevision: 0 }), leaseRevoke: { id } } };
  }

  private forget(id: bigint): void {
    this.live.delete(id);
    this.deadlines.delete(id);
  }

  private nextId(): bigint {
    for (;;) {
      this.idSuffix = (this.idSuffix + 1n) & (2n ** 48n - 1n);
      const id = (this.idPrefix | this.idSuffix) & (2n ** 63n - 1n);
      if (id !== 0n && !leaseExists(this.db, id)) return id;
    }
  }

  // ---- calls that never write (the Lease stream) ----------------------------------------

  /** Answers LEASE_KEEPALIVE, LEASE_TIME_TO_LIVE and LEASE_LEASES. */
  call(op: number, body: Uint8Array, answer: Answer): void {
    const request = <T>(typeName: string): T => decodeRequest((b) => decode<T>(typeName, b), body);
    try {
      switch (op) {
        case Op.LEASE_KEEPALIVE:
          return this.keepAlive(request('etcdserverpb.LeaseKeepAliveRequest'), answer);
        case Op.LEASE_TIME_TO_LIVE:
          return answer({ body: this.timeToLive(request('etcdserverpb.LeaseTimeToLiveRequest')), code: 0, message: '' });
        case Op.LEASE_LEASES:
          request('etcdserverpb.LeaseLeasesRequest'); // an empty message, but it must decode
          return answer({ body: this.leases(), code: 0, message: '' });
        default:
          throw new EtcdError(status.INVALID_ARGUMENT, `kvs: unknown lease operation ${op}`);
      }
    } catch (err) {
      if (!(err instanceof EtcdError)) throw err;
      answer({ code: err.code, message: err.message });
    }
  }

  /**
   * Renews a lease to its full TTL and answers the TTL; an unknown lease answers TTL 0. As
   * etcd, the header is taken before the renewal, and a lease that has expired but is not yet
   * revoked is not renewed: the answer (TTL 0) waits until its revocation is committed.
   */
  private keepAlive(r: LeaseIdRequest, answer: Answer): void {
    const id = bigint(r.ID);
    const header = this.executor.currentHeader();
    const reply = (ttl: number) =>
      answer({ body: encode('etcdserverpb.LeaseKeepAliveResponse', { header, ID: int64(id), TTL: ttl }), code: 0, message: '' });
    const l = this.live.get(id);
    if (!l) return reply(0);
    const now = this.now();
    const deadline = this.deadlines.get(id);
    if (l.revoking || (deadline !== undefined && deadline <= now)) {
      l.waiters.push(() => reply(0));
      if (!l.revoking) this.expire(id, l);
      return;
    }
    this.deadlines.set(id, now + l.ttl * 1000);
    reply(l.ttl);
  }

  /** The remaining TTL (seconds, truncated as etcd's int64(Remaining().Seconds())), -1 if unknown. */
  remaining(id: bigint): number {
    const l = this.live.get(id);
    if (!l) return -1;
    const deadline = this.deadlines.get(id);
    // A lease whose revocation is under way has no deadline any more: it is due now.
    const ms = (deadline ?? this.now()) - this.now();
    return Math.trunc(ms / 1000) || 0;
  }

  private timeToLive(r: LeaseTimeToLiveRequest): Buffer {
    const id = bigint(r.ID);
    const header = this.executor.currentHeader();
    const l = this.live.get(id);
    // etcd answers an unknown lease with TTL -1 and no error.
    if (!l) return encode('etcdserverpb.LeaseTimeToLiveResponse', { header, ID: int64(id), TTL: -1 });
    return encode('etcdserverpb.LeaseTimeToLiveResponse', {
      header,
      ID: int64(id),
      TTL: this.remaining(id),
      grantedTTL: l.ttl,
      keys: r.keys ? leaseKeys(this.db, id) : [],
    });
  }

  /** Every lease, earliest expiry first (etcd sorts Leases() by expiry). */
  private leases(): Buffer {
    const ids = this.deadlines.sorted().map((d) => d.id);
    for (const [id, l] of this.live) if (l.revoking) ids.unshift(id);
    return encode('etcdserverpb.LeaseLeasesResponse', {
      header: this.executor.currentHeader(),
      leases: ids.map((id) => ({ ID: int64(id) })),
    });
  }

  // ---- expiry ------------------------------------------------------------------------------

  /** Starts revoking expired leases (every 500 ms, as etcd's lessor loop). */
  startExpiry(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.revokeExpired(), TICK_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Queues a revocation for every lease past its deadline (at most REVOKE_PER_TICK). */
  revokeExpired(): number {
    const now = this.now();
    let n = 0;
    for (let d = this.deadlines.peek(); d && d.at <= now && n < REVOKE_PER_TICK; d = this.deadlines.peek(), n++) {
      const l = this.live.get(d.id);
      if (!l) {
        this.deadlines.delete(d.id);
        continue;
      }
      this.expire(d.id, l);
    }
    return n;
  }

  private expire(id: bigint, l: Live): void {
    l.revoking = true;
    this.deadlines.delete(id);
    this.submit(Op.LEASE_REVOKE, encode('etcdserverpb.LeaseRevokeRequest', { ID: int64(id) }), () => {
      l.revoking = false;
      // Revoked (by this or by a client's revoke before it), or the write failed: then the
      // lease stays and is tried again later, as etcd does. Either way it is not renewable:
      // the keep-alives that waited answer TTL 0.
      if (this.live.has(id)) this.deadlines.set(id, this.now() + RETRY_MS);
      const waiters = l.waiters;
      l.waiters = [];
      for (const w of waiters) w();
    });
  }
}
