// The leader lock: one object (layout.ts's LEADER_LOCK) naming the leader, its term and its
// addresses, guarded by the object's ETag. Creating it (If-None-Match: *) or replacing it
// (If-Match: <etag>) is the only way to become leader; a refused replace means someone else
// changed it first. `lastSeenNano` is written as the spec says, but no decision here compares
// it with another machine's clock alone (docs/cluster.md).
import { randomUUID } from 'node:crypto';
import { LEADER_LOCK } from '../../shared/objectstore/layout.js';
import { PreconditionFailedError, type ObjectStore } from '../../shared/objectstore/store.js';

export interface LockRecord {
  nodeId: string;
  memberId: string;
  peerUrl: string;
  clientUrl: string;
  term: number;
  /** Wall-clock nanoseconds of the holder's last write of the lock (a decimal string). */
  lastSeenNano: string;
  /** Set by a leader that stopped and handed over: any follower may take it at once. */
  released?: boolean;
  /**
   * Random, new at every election: names this leadership. Every peer call carries the epoch the
   * caller read from the lock, and a leader answers only its own (transport.ts), so that no node
   * follows or forwards to a leader it did not find in this lock: a stale one after a pause,
   * or another cluster's node that took over the address of a dead one.
   */
  epoch?: string;
}

/** A new leadership's epoch. */
export const newEpoch = (): string => randomUUID();

export interface HeldLock {
  record: LockRecord;
  etag: string;
}

export const nowNano = (): string => (BigInt(Date.now()) * 1_000_000n).toString();

export class LeaderLock {
  constructor(private readonly store: ObjectStore) {}

  async read(): Promise<HeldLock | undefined> {
    const got = await this.store.get(LEADER_LOCK);
    if (!got) return undefined;
    let record: LockRecord;
    try {
      record = JSON.parse(got.body.toString('utf8')) as LockRecord;
    } catch {
      throw new Error(`the leader lock ${this.store.location}/${LEADER_LOCK} is not kvs's (not JSON); remove it if no kvs cluster uses this prefix`);
    }
    if (typeof record.term !== 'number' || typeof record.nodeId !== 'string') {
      throw new Error(`the leader lock ${this.store.location}/${LEADER_LOCK} is not kvs's (no term or node id)`);
    }
    return { record, etag: got.etag };
  }

  /** Creates the lock if there is none. Undefined: another node created it first. */
  create(record: LockRecord): Promise<HeldLock | undefined> {
    return this.write(record, { ifNoneMatch: '*' });
  }

  /** Replaces the lock if it is still `etag`. Undefined: it changed (another node won, or we were deposed). */
  replace(record: LockRecord, etag: string): Promise<HeldLock | undefined> {
    return this.write(record, { ifMatch: etag });
  }

  private async write(record: LockRecord, cond: { ifNoneMatch?: '*'; ifMatch?: string }): Promise<HeldLock | undefined> {
    try {
      const r = await this.store.put(LEADER_LOCK, Buffer.from(JSON.stringify(record)), cond);
      return { record, etag: r.etag };
    } catch (err) {
      if (err instanceof PreconditionFailedError) return undefined;
      throw err;
    }
  }
}
