// The gateway's subscription to storage's committed-entry feed (Storage.Feed), kept open
// across storage restarts: a broken stream is reopened with a short backoff, and the first
// message of the new stream tells the hub the store's revision, so a gap is filled from LMDB.
//
// While nothing here needs the messages (no watcher, nothing waiting for a revision or an
// applied index) for QUIET_AFTER_MS, the link asks storage for quiet: a follower's gateway
// then sleeps through the writes its node applies instead of waking for each batch (one of
// a cluster put's process wake-ups, docs/perf/wake-ups.md). The first watcher or wait asks for
// messages again; storage answers with where the store is, and the hub fills what it missed
// from LMDB history, as after a reconnect.
import * as grpc from '@grpc/grpc-js';
import type { MethodDefinition } from '@grpc/grpc-js';
import { num } from '../../../shared/proto/index.js';
import type { Logger } from '../../../shared/log.js';
import { EtcdError } from '../../../shared/errors.js';
import { STORAGE } from '../../../shared/batch-link/link.js';
import { DEFAULT_WINDOW, type StreamChannel } from '../../../shared/grpc/stream-channel.js';
import type { Hub } from './hub.js';

export interface FeedMessage {
  revision: number | { high: number; low: number };
  entries: Uint8Array[];
  index?: number | { high: number; low: number };
  refused?: string;
}

const FEED = STORAGE.Feed as MethodDefinition<{ quiet?: boolean }, FeedMessage>;

/** One subscription to storage's feed, as the Storage.Feed call (our own HTTP/2 stream) has it. */
export interface FeedCall {
  write(req: { quiet?: boolean }): unknown;
  on(event: 'data', listener: (m: FeedMessage) => void): unknown;
  on(event: 'error', listener: (err?: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  /** Ends the subscription from this side; it then emits 'error'. */
  cancel(): void;
}

/**
 * Where the link subscribes: Storage.Feed on storage's socket (`feedOverChannel`), or, with the
 * engine in this process (embed/), the engine's feed itself (services/storage/in-process.ts).
 */
export interface FeedSource {
  open(): FeedCall;
}

/**
 * Storage.Feed on `channel`, the connection to storage the write links share (storage writes a
 * batch's feed message and its answers in one socket write, read in one wake-up here). HTTP/2's
 * default window, as grpc-js's: a gateway that falls behind is skipped by storage rather than
 * buffering megabytes of entries it has not read.
 */
export function feedOverChannel(channel: StreamChannel): FeedSource {
  return { open: () => channel.stream(FEED, DEFAULT_WINDOW) };
}

/**
 * How long the link keeps the messages coming after the last watcher or wait is gone, so that
 * reads that come now and then on a follower do not each wait for storage to answer a request
 * for messages first.
 */
export const QUIET_AFTER_MS = 1000;

export class FeedLink {
  /**
   * Our own HTTP/2 stream, as the write links (shared/grpc/stream-channel.ts): storage sends a
   * batch's feed message before its answers, so unless quiet, reading it is on every put's path.
   */
  private call: FeedCall | undefined;
  /** Storage was asked for quiet on the current stream. */
  quiet = false;
  /** When something last needed the messages (performance.now()). */
  private neededAt = performance.now();
  private retryMs = 20;
  private closed = false;
  private connected = false;
  /** Storage's applied revision and WAL index, as of the latest message. */
  revision = 0;
  index = 0;
  /**
   * Why storage applies nothing now (a follower below its free-space floor), '' while it
   * applies: what waits for it is refused with this instead of waiting for the deadline.
   */
  refused = '';
  private waiters: { index: number; revision: number; resolve(): void; reject(err: Error): void }[] = [];

  constructor(private readonly source: FeedSource, private readonly hub: Hub, private readonly log: Logger) {
    hub.onInterest = () => this.needed();
    this.open();
  }

  /** Something needs the messages: ask for them again if quiet. */
  private needed(): void {
    this.neededAt = performance.now();
    if (!this.quiet) return;
    this.quiet = false;
    this.call?.write({ quiet: false });
  }

  /** After a message: ask for quiet if nothing has needed the messages for a while. */
  private maybeQuiet(): void {
    if (this.quiet || !this.call) return;
    const now = performance.now();
    if (this.waiters.length || !this.hub.idle) {
      this.neededAt = now;
      return;
    }
    if (now - this.neededAt < QUIET_AFTER_MS) return;
    this.quiet = true;
    this.call.write({ quiet: true });
  }

  private open(): void {
    if (this.closed) return;
    const call = this.source.open();
    // Open for requests for quiet (a new stream starts with messages).
    call.write({});
    this.call = call;
    this.quiet = false;
    call.on('data', (m: FeedMessage) => {
      if (!this.connected) {
        this.connected = true;
        this.retryMs = 20;
        this.log.debug({ revision: num(m.revision as number) }, 'watch feed connected');
      }
      this.revision = num(m.revision as number);
      this.index = num(m.index as number);
      this.hub.onFeed(this.revision, m.entries ?? []);
      if (m.refused !== undefined && m.refused !== this.refused) this.onRefused(m.refused);
      if (this.waiters.length) this.wake();
      this.maybeQuiet();
    });
    const broken = (err?: Error) => {
      if (this.call !== call) return;
      this.call = undefined;
      if (this.connected) this.log.warn({ err: err?.message }, 'lost the watch feed from storage; reconnecting');
      this.connected = false;
      if (this.closed) return;
      setTimeout(() => this.open(), this.retryMs).unref();
      this.retryMs = Math.min(this.retryMs * 2, 500);
    };
    call.on('error', broken);
    call.on('end', () => broken());
  }

  /**
   * Resolves once storage has applied WAL index `index` and revision `revision` (cluster mode:
   * a follower's read waits for what the leader committed, and a forwarded write for its own
   * effect, so that a read after it on this node sees it).
   */
  applied(index: number, revision = 0): Promise<void> {
    // Even one that need not wait: a node serving such reads keeps its feed, or each read
    // after a quiet second would wait for storage's answer to a request for messages.
    this.neededAt = performance.now();
    if (this.index >= index && this.revision >= revision) return Promise.resolve();
    if (this.refused) return Promise.reject(this.refusal());
    return new Promise((resolve, reject) => {
      this.waiters.push({ index, revision, resolve, reject });
      this.needed();
    });
  }

  /** The error for what would wait for storage while it applies nothing. */
  refusal(): EtcdError {
    return new EtcdError(
      grpc.status.RESOURCE_EXHAUSTED,
      `${this.refused}; this follower applies nothing meanwhile, so it refuses writes and linearizable reads (serializable reads serve what it has): use another member`,
    );
  }

  private onRefused(reason: string): void {
    this.refused = reason;
    if (!reason) return;
    this.log.warn({ reason }, 'storage applies nothing: refusing forwarded writes and linearizable reads until it does');
    const waiting = this.waiters;
    this.waiters = [];
    for (const w of waiting) w.reject(this.refusal());
  }

  private wake(): void {
    const still: typeof this.waiters = [];
    for (const w of this.waiters) {
      if (this.index >= w.index && this.revision >= w.revision) w.resolve();
      else still.push(w);
    }
    this.waiters = still;
  }

  close(): void {
    this.closed = true;
    const call = this.call;
    this.call = undefined; // its cancel is not a lost feed
    call?.cancel(); // the channel (or engine) is its owner's to close
  }
}
