// A cluster follower's side of the WAL: it takes no client writes; it appends the entries the
// leader sends (staged: in the WAL, not yet in LMDB) and applies them once the leader says
// they are committed. A new leader applies what it holds staged the same way (applyThrough).
import type { WalRecord } from '../../../shared/wal/frame.js';
import { decodeWalEntry } from '../../../shared/wal/entry.js';
import { applyEntry } from '../mvcc/apply.js';
import { Stage, stages } from '../../../shared/stages.js';
import type { EngineCore } from './core.js';

export class FollowerReplica {
  /**
   * The records appended since the last apply, in order, so that applying them does not read
   * the WAL file back (empty after a restart: then the WAL is read).
   */
  private staged: WalRecord[] = [];

  constructor(private readonly core: EngineCore) {}

  /** Forgets the staged records (the caller truncates the WAL). */
  clear(): void {
    this.staged = [];
  }

  /**
   * Follower: appends entries the leader sent (one write, one fdatasync), then, given
   * `commitThrough`, applies what is committed (apply). Entries already held are
   * skipped; a gap throws (the peer agent resyncs). Below the free-space floor it throws
   * FreeSpaceError before touching the WAL or LMDB (an apply through the memory map on a full
   * disk would SIGBUS the process): nothing is taken, so nothing is ACKed
   * (services/storage/peer-attach.ts).
   */
  append(records: WalRecord[], commitThrough?: number): void {
    const c = this.core;
    this.checkFollowerSpace();
    let fresh = records;
    const last = c.wal.lastIndex;
    if (records.length && records[0].index <= last) {
      // Entries this node already holds. Applied ones are the same history; staged ones must
      // match, else the sender's win (a newer leader's, or the object store's) and ours from
      // the mismatch on are dropped.
      const staged = new Map<bigint, Uint8Array>();
      for (const rec of c.wal.readFrom(records[0].index > BigInt(c.index) ? records[0].index : BigInt(c.index) + 1n)) staged.set(rec.index, rec.payload);
      let i = 0;
      for (; i < records.length && records[i].index <= last; i++) {
        const mine = staged.get(records[i].index);
        if (mine && !Buffer.from(mine).equals(Buffer.from(records[i].payload))) {
          const dropped = c.wal.truncateAfter(records[i].index - 1n);
          this.staged = this.staged.filter((r) => r.index < records[i].index);
          c.log.warn({ from: Number(records[i].index), dropped }, 'staged WAL entries differ from the committed history; dropped');
          break;
        }
      }
      fresh = records.slice(i);
    }
    if (fresh.length && fresh[0].index !== c.wal.lastIndex + 1n) {
      throw new Error(`replication gap: the WAL ends at ${c.wal.lastIndex} but the leader sent ${fresh[0].index}`);
    }
    if (fresh.length) {
      c.wal.appendSync(fresh);
      stages?.stamp(Stage.FOLLOWER_FSYNCED, Number(c.wal.lastIndex));
      for (const r of fresh) this.staged.push(r);
    }
    if (commitThrough !== undefined) this.applyThrough(Math.min(commitThrough, c.lastIndex));
  }

  /** Follower: applies the entries it holds through `commitThrough` (what the leader committed). */
  apply(commitThrough: number): void {
    const c = this.core;
    this.checkFollowerSpace();
    this.applyThrough(Math.min(commitThrough, c.lastIndex));
  }

  private checkFollowerSpace(): void {
    const c = this.core;
    if (c.role === 'leader' || c.role === 'single') throw new Error(`replicated entries refused: this node is ${c.role}`);
    const refused = c.space.check();
    if (refused) throw refused;
  }

  /** Applies staged WAL entries through `through` in one LMDB transaction, and publishes them. */
  applyThrough(through: number): void {
    const c = this.core;
    if (through <= c.index) return;
    const next = BigInt(c.index) + 1n;
    let records: WalRecord[] = [];
    const k = this.staged.findIndex((r) => r.index === next);
    if (k >= 0 && this.staged[this.staged.length - 1].index >= BigInt(through)) {
      const end = k + Number(BigInt(through) - next) + 1;
      records = this.staged.slice(k, end);
      this.staged = this.staged.slice(end);
    } else {
      for (const rec of c.wal.readFrom(next)) {
        if (rec.index > BigInt(through)) break;
        records.push(rec);
      }
      this.staged = this.staged.filter((r) => r.index > BigInt(through));
    }
    try {
      c.db.env.transactionSync(() => {
        for (const rec of records) applyEntry(c.db, decodeWalEntry(rec.payload), Number(rec.index));
        c.executor.reload(); // in the transaction, not after it: see CompactionSteps.kick
      });
    } catch (err) {
      c.executor.reload(); // the counters LMDB still holds, not the failed transaction's
      throw err;
    }
    c.index = through;
    c.feed.publish(records, c.executor.revision, through);
  }
}
