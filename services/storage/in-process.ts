// The storage engine's links for callers in its own process (an embedded node, embed/): what
// the Storage service (server.ts) serves on run/storage.sock, as calls. Writes go straight to
// engine.submit, lease calls to the lessor, and the feed subscribes to the engine's CommitFeed
// with Storage.Feed's own rules (feed.ts: subscribeFeed), so the two paths cannot drift.
import { EventEmitter } from 'node:events';
import { EtcdError } from '../../shared/errors.js';
import type { WriteLink } from '../../shared/batch-link/link.js';
import type { Engine, WriteResult } from './engine.js';
import { subscribeFeed, type FeedBatch, type FeedSubscription } from './feed.js';

function settle(resolve: (body: Buffer) => void, reject: (err: EtcdError) => void): (r: WriteResult) => void {
  return (r) => (r.code === 0 ? resolve(r.body ?? Buffer.alloc(0)) : reject(new EtcdError(r.code, r.message)));
}

/** Storage.Write as a call: the write is answered once durable and applied. */
export function engineWriteLink(engine: Engine): WriteLink {
  return {
    call: (op, body, authRevision = 0, traceParent) =>
      new Promise((resolve, reject) => engine.submit(op, body, settle(resolve, reject), authRevision, traceParent ?? '')),
  };
}

/** Storage.Lease as a call: keep-alives and queries, which never write. */
export function engineLeaseLink(engine: Engine): WriteLink {
  return { call: (op, body) => new Promise((resolve, reject) => engine.lessor.call(op, body, settle(resolve, reject))) };
}

/**
 * One subscription to the engine's feed, with the events of the Storage.Feed call that the
 * gateway's FeedLink reads. A batch is handed over on process.nextTick: never inside the
 * engine's own commit path, and, when the commit ran from an I/O callback (a single node's
 * fsync), before the answers to its writes, whose promises settle later: the order storage's
 * socket keeps (a batch's feed message, then its answers). Nothing depends on that order: a
 * forwarded write waits for its revision in the feed, and the hub fills a gap from LMDB.
 */
class InProcessFeedCall extends EventEmitter {
  private destroyed = false;
  private readonly sub: FeedSubscription;

  constructor(engine: Engine) {
    super();
    const call = this;
    this.sub = subscribeFeed(engine, {
      write(batch: FeedBatch) {
        process.nextTick(() => !call.destroyed && call.emit('data', batch));
        return true; // never behind: it is read in this process
      },
      get destroyed() {
        return call.destroyed;
      },
    });
  }

  /** The subscriber asks for quiet, or for messages again (Storage.Feed's requests). */
  write(req: { quiet?: boolean }): void {
    if (!this.destroyed) this.sub.setQuiet(req.quiet === true);
  }

  cancel(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.sub.close();
    process.nextTick(() => this.emit('error', new Error('cancelled')));
  }
}

/** Storage.Feed as a subscription in this process (the gateway's FeedSource). */
export function engineFeed(engine: Engine): { open(): InProcessFeedCall } {
  return { open: () => new InProcessFeedCall(engine) };
}
