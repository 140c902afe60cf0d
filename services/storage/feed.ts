// Committed-entry feed: after each group commit the engine publishes the batch's WAL records
// (encoded kvs.storage.WalEntry) to every subscriber (the gateways' watch hubs, through the
// Storage.Feed rpc). Publishing never blocks the write path: a subscriber that cannot keep up
// is skipped, and learns of the gap from the next batch's revision.
import type { WalRecord } from '../../shared/wal/frame.js';

export interface FeedBatch {
  /** The store's revision once the batch is applied. */
  revision: number;
  /** Encoded WalEntry payloads, in commit order. */
  entries: Uint8Array[];
  /** The applied WAL index once the batch is applied. */
  index: number;
  /** `CommitFeed.refused` as of this batch (on its own, with no entries, when it changes). */
  refused?: string;
}

export type FeedSubscriber = (batch: FeedBatch) => void;

export class CommitFeed {
  private readonly subscribers = new Set<FeedSubscriber>();
  /**
   * Why this node applies nothing now ('' while it applies): a follower detached for lack of
   * disk space. Gateways then refuse what would wait for it (forwarded writes, linearizable
   * reads) instead of letting it wait until the client's deadline.
   */
  refused = '';

  /** Tells every subscriber that this node stopped (a reason) or resumed ('') applying. */
  setRefused(reason: string, revision: number, index: number): void {
    if (reason === this.refused) return;
    this.refused = reason;
    const batch: FeedBatch = { revision, entries: [], index, refused: reason };
    for (const fn of this.subscribers) fn(batch);
  }

  subscribe(fn: FeedSubscriber): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  /** Called by the engine once per committed batch, before callers are answered. */
  publish(records: readonly WalRecord[], revision: number, index: number): void {
    if (this.subscribers.size === 0 || records.length === 0) return;
    const batch: FeedBatch = { revision, entries: records.map((r) => r.payload), index, refused: this.refused };
    for (const fn of this.subscribers) fn(batch);
  }
}

/** What a subscription reads of the engine: where the store is, and its feed. */
export interface FeedOrigin {
  readonly revision: number;
  readonly appliedIndex: number;
  readonly feed: CommitFeed;
}

/** One subscriber's end: the Storage.Feed stream, or an in-process FeedLink (in-process.ts). */
export interface FeedSink {
  /** False: the subscriber fell behind; nothing more is sent until `drained()`. */
  write(batch: FeedBatch): boolean;
  readonly destroyed: boolean;
}

/** The subscriber's side of a subscription: its requests for quiet, its drain, its end. */
export interface FeedSubscription {
  setQuiet(quiet: boolean): void;
  drained(): void;
  close(): void;
}

/**
 * Subscribes `sink` to the engine's feed with Storage.Feed's rules, on either path. The first
 * message tells where the stream starts; a subscriber that fell behind is skipped until its
 * buffer drains, then told the current revision (it fills the gap from LMDB history), so a
 * slow gateway never holds memory or the write path here. A subscriber that asked for quiet
 * gets no batches (a refusal's change still goes), and where the store is once it asks for
 * messages again.
 */
export function subscribeFeed(origin: FeedOrigin, sink: FeedSink): FeedSubscription {
  const here = (): FeedBatch => ({ revision: origin.revision, entries: [], index: origin.appliedIndex, refused: origin.feed.refused });
  let lagging = !sink.write(here());
  let quiet = false;
  const unsubscribe = origin.feed.subscribe((batch) => {
    if (lagging || sink.destroyed || (quiet && batch.entries.length)) return;
    lagging = !sink.write(batch);
  });
  return {
    setQuiet(q) {
      const was = quiet;
      quiet = q;
      if (was && !quiet && !lagging && !sink.destroyed) lagging = !sink.write(here());
    },
    drained() {
      if (!lagging || sink.destroyed) return;
      lagging = !sink.write(here());
    },
    close: () => void unsubscribe(),
  };
}
