// node.watch(): changes of a key or a prefix as an async iterator. Live changes come from the
// engine's commit feed (published synchronously after each batch is applied, decoded once for
// every watcher of the node); a watcher that starts in the past, falls behind (its consumer is
// slower than the writes: its queue is bounded) or sees a gap catches up from LMDB's history,
// in slices, then goes live again, as the gateway's watch hub does for `kvs run`'s clients.
import type { MvccDb } from '../shared/mvcc/schema.js';
import { changeOf, compactRevision, currentRevision, readHistory, EventType, type Change } from '../shared/mvcc/history.js';
import { decodeWalEntry } from '../shared/wal/entry.js';
import type { CommitFeed, FeedBatch } from '../services/storage/feed.js';
import { ErrCompacted } from './errors.js';
import { keyValueOf } from './codec.js';
import type { WatchEvent } from './types.js';

/** Events a watcher queues before it stops taking live changes and catches up from history. */
const MAX_QUEUED = 10_000;
/** Changes read from history per catch-up step. */
const HISTORY_SLICE = 1_000;

interface Revision {
  revision: number;
  changes: Change[];
}

/** The node's watchers, on one subscription to the feed while there are any. */
export class Watches {
  private readonly watchers = new Set<Watcher>();
  private unsubscribe: (() => void) | undefined;
  /** Watchers waiting in next(), and the timer that keeps the process alive while there are any. */
  private waiting = 0;
  private keepAlive: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: MvccDb,
    private readonly feed: CommitFeed,
  ) {}

  open(key: Buffer, prefix: boolean, startRevision: number | undefined): Watcher {
    const w = new Watcher(this.db, key, prefix, startRevision, () => this.remove(w), (on) => this.wait(on));
    this.watchers.add(w);
    this.unsubscribe ??= this.feed.subscribe((batch) => this.onFeed(batch));
    return w;
  }

  /** Ends every watcher (close()). */
  endAll(): void {
    for (const w of [...this.watchers]) w.end();
  }

  /**
   * A program whose only work is a `for await` over a watch must not exit while it waits, as it
   * would not while reading a socket: the engine's own timers do not hold the event loop.
   */
  private wait(on: boolean): void {
    this.waiting += on ? 1 : -1;
    if (this.waiting > 0) this.keepAlive ??= setInterval(() => {}, 2 ** 30);
    else if (this.keepAlive) {
      clearInterval(this.keepAlive);
      this.keepAlive = undefined;
    }
  }

  private remove(w: Watcher): void {
    this.watchers.delete(w);
    if (this.watchers.size === 0 && this.unsubscribe) {
      this.unsubscribe();
      this.unsubscribe = undefined;
    }
  }

  private onFeed(batch: FeedBatch): void {
    const revisions: Revision[] = [];
    for (const bytes of batch.entries) {
      const entry = decodeWalEntry(bytes);
      // Entries without changes of keys (lease grants, auth, compactions) are nothing to watchers.
      if (entry.mutations.length === 0) continue;
      revisions.push({ revision: entry.revision, changes: entry.mutations.map((m) => changeOf(m.kv, entry.revision)) });
    }
    for (const w of this.watchers) w.onLive(revisions, batch.revision);
  }
}

export class Watcher implements AsyncIterableIterator<WatchEvent> {
  /** The last revision whose changes are queued (or delivered). */
  private seen: number;
  /** Taking live changes from the feed; false while catching up from history. */
  private live: boolean;
  private readonly queue: WatchEvent[] = [];
  private ended = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly db: MvccDb,
    private readonly key: Buffer,
    private readonly prefix: boolean,
    startRevision: number | undefined,
    private readonly onEnd: () => void,
    private readonly onWait: (waiting: boolean) => void,
  ) {
    db.env.resetReadTxn();
    if (startRevision && startRevision > 0) {
      this.seen = startRevision - 1;
      this.live = false;
    } else {
      this.seen = currentRevision(db);
      this.live = true;
    }
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<WatchEvent> {
    return this;
  }

  async next(): Promise<IteratorResult<WatchEvent>> {
    for (;;) {
      const event = this.queue.shift();
      if (event) return { value: event, done: false };
      if (this.failure) {
        const err = this.failure;
        this.finish();
        throw err;
      }
      if (this.ended) return { value: undefined, done: true };
      if (!this.live) {
        this.catchUp();
        continue;
      }
      this.onWait(true);
      try {
        await new Promise<void>((resolve) => (this.wake = resolve));
      } finally {
        this.wake = undefined;
        this.onWait(false);
      }
    }
  }

  /** Stops watching (a `break` out of for-await calls this). */
  async return(): Promise<IteratorResult<WatchEvent>> {
    this.finish();
    return { value: undefined, done: true };
  }

  /** Stops watching: queued events are dropped, a waiting next() resolves done. */
  close(): void {
    this.end();
  }

  /** Ends the iteration: queued events are dropped, a waiting next() resolves done. */
  end(): void {
    this.finish();
    this.queue.length = 0;
  }

  /** The revisions of one committed batch; `revision` is the store's after it. */
  onLive(revisions: readonly Revision[], revision: number): void {
    if (!this.live || this.ended) return;
    for (const r of revisions) {
      if (r.revision <= this.seen) continue;
      if (r.revision > this.seen + 1) return this.fallBehind(); // a gap: history has it
      this.seen = r.revision;
      this.take(r.changes, r.revision);
    }
    if (revision > this.seen) return this.fallBehind();
    if (this.queue.length > MAX_QUEUED) this.live = false; // history serves what follows, once the consumer drained this
    this.wake?.();
  }

  private fallBehind(): void {
    this.live = false;
    this.wake?.();
  }

  /** One step from LMDB's history; live again once it reaches the current revision. */
  private catchUp(): void {
    this.db.env.resetReadTxn();
    // Before any compaction etcd's compact revision is -1: only a start below that is "compacted".
    const compacted = compactRevision(this.db) || -1;
    if (this.seen + 1 < compacted) {
      this.failure = new ErrCompacted(this.seen + 1, compacted);
      return;
    }
    const to = currentRevision(this.db);
    if (this.seen >= to) {
      // Synchronously with the read of `to`: the feed's next batch is the revision after it.
      this.live = true;
      return;
    }
    const slice = readHistory(this.db, this.seen + 1, to, HISTORY_SLICE);
    let last = -1;
    let changes: Change[] = [];
    for (const c of slice.changes) {
      if (c.revision !== last && changes.length) {
        this.take(changes, last);
        changes = [];
      }
      last = c.revision;
      changes.push(c);
    }
    if (changes.length) this.take(changes, last);
    this.seen = slice.through;
  }

  private take(changes: readonly Change[], revision: number): void {
    for (const c of changes) {
      if (!this.matches(c.key)) continue;
      this.queue.push({ type: c.type === EventType.DELETE ? 'delete' : 'put', kv: keyValueOf(c.kv), revision });
    }
  }

  private matches(key: Buffer): boolean {
    if (!this.prefix) return key.equals(this.key);
    return key.length >= this.key.length && key.subarray(0, this.key.length).equals(this.key);
  }

  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    this.onEnd();
    this.wake?.();
  }
}
