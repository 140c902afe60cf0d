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
