// The gateway's watch hub: every watcher of this process (client Watch streams, and in-process
// users such as Lock and Election) is registered here. Committed changes arrive from storage's
// feed one revision at a time and go to the watchers covering the changed keys (the index).
//
// As etcd's watchable store, a watcher is either
//   synced:   caught up; it gets each new revision as it is committed, or
//   unsynced: behind (it started in the past, its consumer could not take events, or the
//             feed had a gap); it is served from LMDB history in slices until it catches up.
// A consumer that cannot take events never makes the hub buffer them: the watcher turns
// unsynced and re-reads them from history once the consumer drains. Its start revision being
// compacted away meanwhile ends it with the compacted revision, as in etcd.
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { changeOf, compactRevision, currentRevision, readHistory, type Change } from '../../../shared/mvcc/history.js';
import { decodeWalEntry } from '../../../shared/wal/entry.js';
import type { Logger } from '../../../shared/log.js';
import { MAX_REQUEST_BYTES } from '../../../shared/errors.js';
import { contains, type KeyRange } from './key-range.js';
import { WatcherIndex, type IndexCounts } from './watcher-index.js';

import * as M from '../../../shared/metrics.js';

export type { Change } from '../../../shared/mvcc/history.js';

/** What a watcher's owner implements. */
export interface Subscriber {
  /**
   * Changes of one revision (live), or of several (catching up), in revision order; `revision`
   * is the store revision they bring the watcher to. Return false when the consumer cannot take
   * them now: the hub then serves them again, from history, after `Hub.resume()`.
   */
  deliver(changes: Change[], revision: number): boolean;
  /** Whether deliver would accept now (checked before history is read for it). */
  ready?(): boolean;
  /** The watcher's next revision was compacted away; the watcher is removed. */
  compacted(compactRevision: number): void;
  /** The watcher caught up: it gets each new revision live from now on. */
  synced?(): void;
}

/** etcd's watchBatchMaxRevs: revisions per catch-up response. */
const MAX_REVISIONS_PER_BATCH = 1000;
/**
 * Event bytes after which a catch-up response takes no further revision. etcd has no such cap;
 * without it a watcher of large values that fell behind gets responses beyond a client's
 * receive limit (4 MiB by default in grpc-js clients such as etcd3). With one revision at most
 * a request's 1.5 MiB, responses stay near 3 MiB, and a fragmenting watcher still sees etcd's
 * fragments.
 */
const MAX_BATCH_BYTES = MAX_REQUEST_BYTES;
/** Changes read from history per sync pass (the event loop stays responsive). */
const MAX_CHANGES_PER_PASS = 10_000;
/** Unsynced watchers served per pass (etcd's maxWatchersPerSync). */
const MAX_WATCHERS_PER_PASS = 512;

export class Watcher {
  synced = false;
  cancelled = false;
  constructor(
    private readonly hub: Hub,
    readonly range: KeyRange,
    /** The next revision this watcher needs. */
    public nextRev: number,
    readonly sub: Subscriber,
  ) {}

  cancel(): void {
    this.hub.remove(this);
  }
}

export interface HubCounts extends IndexCounts {
  watchers: number;
  synced: number;
  unsynced: number;
  /** The revision the hub has delivered through. */
  revision: number;
}

export class Hub {
  /** Every revision up to this one has been delivered to synced watchers. */
  private rev: number;
  private readonly synced = new WatcherIndex<Watcher>();
  private readonly unsynced = new Set<Watcher>();
  private syncScheduled = false;
  private waiters: { rev: number; fn: () => void }[] = [];
  /**
   * Called when the hub starts to need the feed (a watcher, or a wait for a revision): the
   * feed link asks storage for messages again if it had asked for quiet (feed-link.ts).
   */
  onInterest: (() => void) | undefined;

  constructor(private readonly db: MvccDb, private readonly log: Logger) {
    db.env.resetReadTxn();
    this.rev = currentRevision(db);
  }

  /** The revision every synced watcher has been given everything up to. */
  get revision(): number {
    return this.rev;
  }

  /** No watcher and no wait for a revision: nothing here needs the feed's messages. */
  get idle(): boolean {
    return this.synced.size === 0 && this.unsynced.size === 0 && this.waiters.length === 0;
  }

  /** The store's current revision (it may be ahead of the hub by what the feed is carrying). */
  storeRevision(): number {
    this.db.env.resetReadTxn();
    return Math.max(this.rev, currentRevision(this.db));
  }

  counts(): HubCounts {
    return { ...this.synced.counts(), watchers: this.synced.size + this.unsynced.size, synced: this.synced.size, unsynced: this.unsynced.size, revision: this.rev };
  }

  /** Watches `range` from revision `fromRev` (>= 1): changes at or after it are delivered. */
  watch(range: KeyRange, fromRev: number, sub: Subscriber): Watcher {
    const w = new Watcher(this, range, fromRev, sub);
    // Synced only when it starts after what LMDB holds: the feed may still be carrying what
    // LMDB has (a large batch's message comes in window-sized parts after its answer; a quiet
    // feed carries nothing), and a watcher starting before that is served from history in
    // one response, as etcd serves it, not revision by revision as the feed delivers it.
    if (fromRev > this.storeRevision()) this.addSynced(w);
    else this.addUnsynced(w);
    this.onInterest?.();
    return w;
  }

  remove(w: Watcher): void {
    if (w.cancelled) return;
    w.cancelled = true;
    if (w.synced) this.synced.remove(w.range, w);
    else this.unsynced.delete(w);
  }

  /** A consumer that refused changes can take them again: serve its watchers from history. */
  resume(): void {
    if (this.unsynced.size) this.scheduleSync();
  }

  /** Runs `fn` once the hub has delivered everything up to `rev`. */
  afterRevision(rev: number, fn: () => void): void {
    if (this.rev >= rev) fn();
    else {
      this.waiters.push({ rev, fn });
      this.onInterest?.();
    }
  }

  // ---- the feed -----------------------------------------------------------------------------

  /**
   * One message of storage's feed: encoded WAL entries of a commit, and the store revision
   * after it. A revision beyond the next one (a reconnected or skipped feed) is a gap: every
   * watcher then catches up from history.
   */
  onFeed(revision: number, entries: readonly Uint8Array[]): void {
    if (this.synced.size === 0) {
      // Nobody is live: the entries would only move the revision (unsynced watchers read
      // history), so they are not decoded. Most writes on a node without watchers end here.
      if (revision > this.rev) this.rev = revision;
      this.wake();
      return;
    }
    for (const bytes of entries) {
      const entry = decodeWalEntry(bytes);
      // Entries without a revision (compactions) change nothing watchers see; older ones were
      // already served from history after a gap.
      if (entry.revision <= this.rev || entry.mutations.length === 0) continue;
      if (entry.revision > this.rev + 1) this.gap(entry.revision - 1);
      this.publish(entry.revision, entry.mutations.map((m) => changeOf(m.kv, entry.revision)));
    }
    if (revision > this.rev) this.gap(revision);
    this.wake();
  }

  /** Delivers one committed revision to the synced watchers covering its keys. */
  private publish(rev: number, changes: Change[]): void {
    this.rev = rev;
    if (this.synced.size === 0) return;
    let first: Watcher | undefined;
    let firstChanges: Change[] | undefined;
    let more: Map<Watcher, Change[]> | undefined;
    for (const c of changes) {
      this.synced.match(c.key, (w) => {
        if (w.nextRev > rev) return;
        // Most revisions reach one watcher: no map for that case.
        if (first === undefined || first === w) {
          first = w;
          (firstChanges ??= []).push(c);
          return;
        }
        more ??= new Map();
        let list = more.get(w);
        if (!list) more.set(w, (list = []));
        list.push(c);
      });
    }
    if (first) this.send(first, firstChanges!, rev);
    if (more) for (const [w, list] of more) this.send(w, list, rev);
  }

  private send(w: Watcher, changes: Change[], rev: number): void {
    if (w.cancelled) return;
    if (w.sub.deliver(changes, rev)) {
      w.nextRev = rev + 1;
      return;
    }
    // The consumer is full: this revision and later ones come from history once it drains.
    this.synced.remove(w.range, w);
    w.nextRev = rev;
    this.addUnsynced(w);
  }

  /** Revisions up to `to` were not seen on the feed: everyone catches up from history. */
  private gap(to: number): void {
    this.log.debug({ from: this.rev + 1, to }, 'watch feed gap; catching up from history');
    for (const w of [...this.synced.all()]) {
      w.nextRev = Math.max(w.nextRev, this.rev + 1);
      this.addUnsynced(w);
    }
    this.synced.clear();
    this.rev = to;
  }

  private wake(): void {
    if (this.waiters.length === 0) return;
    const due = this.waiters.filter((x) => x.rev <= this.rev);
    if (due.length === 0) return;
    this.waiters = this.waiters.filter((x) => x.rev > this.rev);
    for (const x of due) x.fn();
  }

  // ---- synced / unsynced --------------------------------------------------------------------

  private addSynced(w: Watcher): void {
    w.synced = true;
    this.synced.add(w.range, w);
    w.sub.synced?.();
  }

  private addUnsynced(w: Watcher): void {
    w.synced = false;
    this.unsynced.add(w);
    this.scheduleSync();
  }

  private scheduleSync(): void {
    if (this.syncScheduled) return;
    this.syncScheduled = true;
    setImmediate(() => {
      this.syncScheduled = false;
      try {
        if (this.syncPass()) this.scheduleSync();
      } catch (err) {
        // A read failure leaves the watchers unsynced; retry shortly rather than spin.
        this.log.error({ err }, 'watch catch-up from history failed; retrying');
        setTimeout(() => this.scheduleSync(), 100).unref();
      }
    });
  }

  /** One catch-up pass over unsynced watchers; returns true if another pass is due now. */
  private syncPass(): boolean {
    const batch: Watcher[] = [];
    for (const w of this.unsynced) {
      if (w.sub.ready && !w.sub.ready()) continue;
      batch.push(w);
      if (batch.length >= MAX_WATCHERS_PER_PASS) break;
    }
    if (batch.length === 0) return false;
    this.db.env.resetReadTxn();
    // Before any compaction etcd's compact revision is -1: only a start below that is "compacted".
    const compacted = compactRevision(this.db) || -1;
    // Up to what LMDB holds, which may be ahead of the feed: the feed's copies of those
    // revisions are then skipped (publish only sends a watcher revisions >= its nextRev).
    const to = Math.max(this.rev, currentRevision(this.db));
    const pending: Watcher[] = [];
    let from = Infinity;
    let progressed = false;
    for (const w of batch) {
      progressed ||= w.nextRev < compacted || w.nextRev > to;
      if (w.nextRev < compacted) {
        this.unsynced.delete(w);
        w.cancelled = true;
        w.sub.compacted(compacted);
      } else if (w.nextRev > to) {
        this.unsynced.delete(w);
        this.addSynced(w);
      } else {
        pending.push(w);
        from = Math.min(from, w.nextRev);
      }
    }
    if (pending.length === 0) return this.unsynced.size > 0 && progressed;
    const scanStart = performance.now();
    const slice = readHistory(this.db, from, to, MAX_CHANGES_PER_PASS);
    let matched = 0;
    const lists = new Map<Watcher, { changes: Change[]; revs: number; bytes: number; lastRev: number; more: number }>();
    const index = new WatcherIndex<Watcher>();
    for (const w of pending) index.add(w.range, w);
    for (const c of slice.changes) {
      index.match(c.key, (w) => {
        if (c.revision < w.nextRev || !contains(w.range, c.key)) return;
        let l = lists.get(w);
        if (!l) lists.set(w, (l = { changes: [], revs: 0, bytes: 0, lastRev: 0, more: 0 }));
        if (l.more) return;
        if (c.revision !== l.lastRev) {
          if (l.revs >= MAX_REVISIONS_PER_BATCH || l.bytes >= MAX_BATCH_BYTES) {
            l.more = c.revision;
            return;
          }
          l.revs++;
          l.lastRev = c.revision;
        }
        l.changes.push(c);
        l.bytes += c.kv.length;
        matched++;
      });
    }
    M.watchScanDuration.observe((performance.now() - scanStart) / 1000);
    M.watchScanRevisionSpan.observe(slice.through - from + 1);
    M.watchScanEntriesTotal.inc({ result: 'scanned' }, slice.changes.length);
    M.watchScanEntriesTotal.inc({ result: 'matched' }, matched);
    for (const w of pending) {
      if (w.cancelled) continue;
      const l = lists.get(w);
      // Partial batches carry the revision they reach, so a client resuming from the
      // response's revision misses nothing (etcd reports its current revision even then).
      const reach = l?.more ? l.more - 1 : slice.through;
      if (l && !w.sub.deliver(l.changes, reach)) continue;
      progressed = true;
      w.nextRev = reach + 1;
      if (w.nextRev > to) {
        this.unsynced.delete(w);
        this.addSynced(w);
      }
    }
    return this.unsynced.size > 0 && progressed;
  }
}
