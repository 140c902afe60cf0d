// etcdserverpb.Watch: one bidi stream carries many watchers, with etcd 3.4's rules
// (etcdserver/api/v3rpc/watch.go, mvcc/watcher.go): ids, created/cancel responses, filters,
// prev_kv, fragments, progress. The watchers themselves live in the hub.
import * as grpc from '@grpc/grpc-js';
import type { ServerCall, UnaryCallback } from '../../../shared/grpc/server.js';
import { service, num } from '../../../shared/proto/index.js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { EventType, previousVersion, type Change } from '../../../shared/mvcc/history.js';
import { MAX_REQUEST_BYTES } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import type { NodeInfo } from '../node-info.js';
import type { Hub, Subscriber, Watcher } from './hub.js';
import { isEmptyRange, watchRange } from './key-range.js';
import { encodeEvent, encodeWatchResponse, fragments, type WatchResponseFields } from './response.js';

/** etcd's mvcc errors, as cancel_reason texts. */
export const WatchErrors = {
  emptyRange: 'mvcc: watcher range is empty',
  duplicateId: 'mvcc: duplicate watch ID provided on the WatchStream',
  compacted: 'mvcc: required revision has been compacted',
} as const;

type Int64 = number | { high: number; low: number };
interface CreateRequest {
  key: Uint8Array;
  rangeEnd: Uint8Array;
  startRevision: Int64;
  progressNotify: boolean;
  filters: number[];
  prevKv: boolean;
  watchId: Int64;
  fragment: boolean;
}
interface WatchRequest {
  createRequest?: CreateRequest;
  cancelRequest?: { watchId: Int64 };
  progressRequest?: object;
}

const FILTER_NOPUT = 0;
const FILTER_NODELETE = 1;

export interface WatchServiceOptions {
  /**
   * With auth enabled: why the stream's caller may not watch [key, rangeEnd) (the cancel_reason
   * etcd sends), or undefined when they may (services/gateway/auth/watch.ts).
   */
  authorize?: (call: ServerCall<unknown, unknown>, key: Uint8Array, rangeEnd: Uint8Array) => string | undefined;
  /** etcd's --experimental-watch-progress-notify-interval (default 10 minutes). */
  progressIntervalMs: number;
}

class StreamWatcher implements Subscriber {
  watcher!: Watcher;
  /** No events since the last progress tick (etcd's progress[id]). */
  progressDue = true;

  constructor(
    private readonly stream: WatchStream,
    readonly id: number,
    readonly prevKv: boolean,
    readonly fragment: boolean,
    readonly progressNotify: boolean,
    readonly noPut: boolean,
    readonly noDelete: boolean,
  ) {}

  deliver(changes: Change[], revision: number): boolean {
    return this.stream.deliver(this, changes, revision);
  }

  ready(): boolean {
    return !this.stream.congested();
  }

  compacted(compactRevision: number): void {
    this.stream.compacted(this, compactRevision);
  }

  synced(): void {
    this.stream.answerProgress();
  }
}

type Call = ServerCall<WatchRequest, Buffer>;

class WatchStream {
  private readonly watchers = new Map<number, StreamWatcher>();
  /** Progress requests' revisions, answered once the stream's watchers are synced. */
  private readonly progressWaiting: number[] = [];
  private nextId = 0;
  private closed = false;
  private readonly ticker: NodeJS.Timeout;

  constructor(
    private readonly call: Call,
    private readonly hub: Hub,
    private readonly db: MvccDb,
    private readonly node: NodeInfo,
    private readonly opts: WatchServiceOptions,
    private readonly onClose: (s: WatchStream) => void,
  ) {
    call.on('data', (req: WatchRequest) => this.onRequest(req));
    // etcd keeps serving a stream whose client half-closed; it ends when the client cancels.
    call.on('cancelled', () => this.close());
    call.on('close', () => this.close());
    call.on('error', () => this.close());
    call.on('drain', () => this.hub.resume());
    this.ticker = setInterval(() => this.progressTick(), opts.progressIntervalMs);
    this.ticker.unref();
  }

  congested(): boolean {
    return this.call.writableNeedDrain;
  }

  private write(f: WatchResponseFields): void {
    if (this.closed) return;
    this.call.write(encodeWatchResponse(f));
  }

  private onRequest(req: WatchRequest): void {
    if (this.closed) return;
    if (req.createRequest) this.create(req.createRequest);
    else if (req.cancelRequest) this.cancel(num(req.cancelRequest.watchId as number));
    else if (req.progressRequest) this.progress();
  }

  private create(r: CreateRequest): void {
    const range = watchRange(r.key, r.rangeEnd);
    const wsrev = this.hub.storeRevision();
    // As etcd: a watch the caller may not read is answered created and canceled at once.
    const denied = this.opts.authorize?.(this.call as ServerCall<unknown, unknown>, r.key, r.rangeEnd);
    if (denied) return this.write({ header: this.node.header(wsrev), watchId: -1, created: true, canceled: true, cancelReason: denied });
    let start = num(r.startRevision as number);
    if (start === 0) start = wsrev + 1;
    let id = num(r.watchId as number);
    let error: string | undefined;
    if (isEmptyRange(range)) error = WatchErrors.emptyRange;
    else if (id === 0) {
      // 0 asks for an id: the lowest free one counting up from the last given (etcd's AutoWatchID).
      while (this.watchers.has(this.nextId)) this.nextId++;
      id = this.nextId++;
    } else if (this.watchers.has(id)) error = WatchErrors.duplicateId;
    const header = this.node.header(wsrev);
    if (error) {
      this.write({ header, watchId: -1, created: true, canceled: true, cancelReason: error });
      return;
    }
    const filters = r.filters ?? [];
    const sw = new StreamWatcher(this, id, r.prevKv, r.fragment, r.progressNotify, filters.includes(FILTER_NOPUT), filters.includes(FILTER_NODELETE));
    this.watchers.set(id, sw);
    this.write({ header, watchId: id, created: true });
    sw.watcher = this.hub.watch(range, start, sw);
  }

  private cancel(id: number): void {
    const sw = this.watchers.get(id);
    if (!sw) return; // etcd answers nothing for an unknown id
    sw.watcher.cancel();
    this.watchers.delete(id);
    this.write({ header: this.node.header(this.hub.storeRevision()), watchId: id, canceled: true });
    this.answerProgress();
  }

  /**
   * A progress request: the store revision, once every event up to it has been sent on this
   * stream: live watchers reached it, and none of the stream's is still reading history (it
   * would send older events after the answer; etcd waits for that too since 3.5.8, #15220).
   */
  private progress(): void {
    const rev = this.hub.storeRevision();
    this.hub.afterRevision(rev, () => {
      this.progressWaiting.push(rev);
      this.answerProgress();
    });
  }

  /** Sends the progress answers waiting, once every watcher of the stream has caught up. */
  answerProgress(): void {
    if (this.progressWaiting.length === 0) return;
    // (A watcher the hub is creating has none yet: it is synced, as it is being told.)
    for (const sw of this.watchers.values()) if (sw.watcher && !sw.watcher.synced) return;
    for (const rev of this.progressWaiting.splice(0)) this.write({ header: this.node.header(rev), watchId: -1 });
  }

  /** progress_notify: a watcher that got no events since the last tick learns the revision. */
  private progressTick(): void {
    if (this.congested()) return;
    for (const sw of this.watchers.values()) {
      if (!sw.progressNotify) continue;
      if (sw.progressDue && sw.watcher.synced) this.write({ header: this.node.header(this.hub.revision), watchId: sw.id });
      sw.progressDue = true;
    }
  }

  deliver(sw: StreamWatcher, changes: Change[], revision: number): boolean {
    if (this.closed || !this.watchers.has(sw.id)) return true;
    if (this.congested()) return false;
    let events = changes;
    if (sw.noPut || sw.noDelete) events = changes.filter((c) => (c.type === EventType.PUT ? !sw.noPut : !sw.noDelete));
    // A response whose events were all filtered out is not sent (etcd's watcher.send).
    if (events.length === 0) return true;
    if (sw.prevKv) this.db.env.resetReadTxn();
    const encoded = events.map((c) => (sw.prevKv ? encodeEvent(c, c.created ? undefined : previousVersion(this.db, c.key, c.revision)) : eventBytes(c)));
    sw.progressDue = false;
    const f: WatchResponseFields = { header: this.node.header(revision), watchId: sw.id, events: encoded };
    if (!sw.fragment) this.call.write(encodeWatchResponse(f));
    else for (const part of fragments(f, MAX_REQUEST_BYTES)) this.call.write(part);
    return true;
  }

  compacted(sw: StreamWatcher, compactRevision: number): void {
    if (!this.watchers.has(sw.id)) return;
    this.watchers.delete(sw.id);
    // etcd 3.4's compaction cancel: header revision 0, compact_revision, no cancel_reason.
    this.write({ header: this.node.header(0), watchId: sw.id, canceled: true, compactRevision });
    this.answerProgress();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.ticker);
    for (const sw of this.watchers.values()) sw.watcher.cancel();
    this.watchers.clear();
    this.onClose(this);
  }

  /** Ends the stream with UNAVAILABLE (the gateway is stopping): clients reconnect and resume. */
  shutdown(): void {
    if (this.closed) return;
    this.close();
    this.call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'kvs: gateway is shutting down' });
  }
}

/** An event without prev_kv is the same bytes for every watcher: encoded once per change. */
const encodedEvents = new WeakMap<Change, Buffer>();
function eventBytes(c: Change): Buffer {
  let b = encodedEvents.get(c);
  if (!b) encodedEvents.set(c, (b = encodeEvent(c)));
  return b;
}

export function watchService(hub: Hub, db: MvccDb, node: NodeInfo, opts: WatchServiceOptions, log: Logger) {
  const def = service('etcdserverpb.Watch');
  const streams = new Set<WatchStream>();
  const impl = {
    Watch(call: Call) {
      streams.add(new WatchStream(call, hub, db, node, opts, (s) => streams.delete(s)));
    },
  };
  return {
    def,
    impl,
    /** Open Watch streams (for metrics later). */
    streamCount: () => streams.size,
    /** Ends every stream: used when the gateway stops, so that clients reconnect at once. */
    shutdown() {
      log.debug({ streams: streams.size }, 'ending watch streams');
      for (const s of [...streams]) s.shutdown();
    },
  };
}
