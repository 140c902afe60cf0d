// A caller's side of a batch stream (kvs.storage.WriteBatch in, WriteResultBatch out): the
// gateway's hop to storage (Storage.Write / Storage.Lease), and in cluster mode the hops of a
// forwarded write (gateway -> peer agent -> leader's peer port -> leader's storage). Every
// write issued in one event-loop turn travels in one message; results come back batched.
//
// If the stream breaks (storage restarting, the leader gone), writes already sent fail with
// UNAVAILABLE: their outcome is unknown, as for any etcd client whose server went away.
// Writes not yet sent wait for the reconnection, up to `waitMs`, then fail with `unavailable`
// without having been sent.
import type { MethodDefinition } from '@grpc/grpc-js';
import { service } from '../proto/index.js';
import type { StreamChannel } from '../grpc/stream-channel.js';
import { EtcdError, Errors } from '../errors.js';
import type { Logger } from '../log.js';

interface Queued {
  id: number;
  op: number;
  body: Uint8Array;
  /** The auth revision its permission was checked at (0: none; see WriteRequest.auth_revision). */
  authRevision: number;
  /** W3C traceparent of the caller's span, only while tracing is on. */
  traceParent: string | undefined;
  resolve(body: Buffer): void;
  reject(err: EtcdError): void;
  expires: number;
}
interface Result { id: number | { toNumber(): number }; body: Buffer; code: number; message: string }

/** kvs.storage.Storage's methods, for callers on our own HTTP/2 streams (shared/grpc/stream-channel.ts). */
export const STORAGE = service('kvs.storage.Storage');

/** What callers of a write stream need: the gateway's services take any of them. */
export interface WriteLink {
  call(op: number, body: Uint8Array, authRevision?: number, traceParent?: string): Promise<Buffer>;
}

export interface BatchLinkOptions {
  /** How long an unsent write waits for the stream (default 5 s). */
  waitMs?: number;
  /** The error of a write that could not be sent, or whose stream broke. */
  unavailable?: EtcdError;
  /** What the far end is, for log lines ("storage", "the leader"). */
  peerName?: string;
}

/** What a link writes on: one bidi call at a time (the next one after the last broke). */
interface BatchCall {
  on(event: 'metadata', listener: () => void): unknown;
  on(event: 'data', listener: (msg: { results: Result[] }) => void): unknown;
  on(event: 'error', listener: (err?: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  write(message: { requests: unknown[] }): boolean;
  end(): void;
}

/** Opens the link's calls: our own streams (shared/grpc/stream-channel.ts), to storage, the peer agent or the leader. */
export interface BatchCalls {
  open(): BatchCall;
  close(): void;
}

export class BatchLink implements WriteLink {
  private stream: BatchCall | undefined;
  /** True once the storage process answered on the current stream. */
  private connected = false;
  private nextId = 1;
  private sent = new Map<number, Queued>();
  private outbox: Queued[] = [];
  private flushScheduled = false;
  private closed = false;
  private retryMs = 20;
  private expiryTimer: NodeJS.Timeout | undefined;

  private readonly waitMs: number;
  private readonly unavailable: EtcdError;
  private readonly peerName: string;

  constructor(private readonly calls: BatchCalls, private readonly log: Logger, opts: BatchLinkOptions = {}) {
    this.waitMs = opts.waitMs ?? 5000;
    this.unavailable = opts.unavailable ?? Errors.storageUnavailable;
    this.peerName = opts.peerName ?? 'storage';
    this.open();
  }

  get isConnected(): boolean {
    return this.connected;
  }

  private open(): void {
    if (this.closed) return;
    const stream = this.calls.open();
    this.stream = stream;
    // The storage server sends its metadata as soon as the stream is accepted.
    stream.on('metadata', () => {
      if (this.stream !== stream) return;
      this.connected = true;
      this.retryMs = 20;
      this.scheduleFlush();
    });
    stream.on('data', (msg: { results: Result[] }) => {
      for (const r of msg.results) {
        const id = typeof r.id === 'number' ? r.id : r.id.toNumber();
        const q = this.sent.get(id);
        if (!q) continue;
        this.sent.delete(id);
        if (r.code === 0) q.resolve(r.body);
        else q.reject(new EtcdError(r.code, r.message));
      }
    });
    const broken = (err?: Error) => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      const wasConnected = this.connected;
      this.connected = false;
      if (this.sent.size) this.log.warn({ err: err?.message, inflight: this.sent.size }, `${this.peerName} stream broke; writes in flight have an unknown outcome`);
      for (const q of this.sent.values()) q.reject(this.unavailable);
      this.sent.clear();
      if (this.closed) return;
      if (wasConnected) this.log.warn(`lost ${this.peerName}; reconnecting`);
      setTimeout(() => this.open(), this.retryMs).unref();
      this.retryMs = Math.min(this.retryMs * 2, 500);
    };
    stream.on('error', broken);
    stream.on('end', () => broken());
  }

  /**
   * Sends one write and resolves with the encoded etcd response. `authRevision`: the auth
   * revision its permission was checked at (0: none; see WriteRequest.auth_revision).
   * `traceParent` (tracing on) makes storage's span of the write a child of the caller's.
   */
  call(op: number, body: Uint8Array, authRevision = 0, traceParent?: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.outbox.push({ id: this.nextId++, op, body, authRevision, traceParent, resolve, reject, expires: Date.now() + this.waitMs });
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flush);
  }

  private flush = (): void => {
    this.flushScheduled = false;
    if (this.outbox.length === 0) return;
    if (!this.stream || !this.connected) {
      this.armExpiry();
      return;
    }
    const batch = this.outbox;
    this.outbox = [];
    const requests = new Array(batch.length);
    for (let i = 0; i < batch.length; i++) {
      const q = batch[i];
      this.sent.set(q.id, q);
      // An undefined traceParent is not encoded (tracing off: the message is as before).
      requests[i] = { id: q.id, op: q.op, body: q.body, authRevision: q.authRevision, traceParent: q.traceParent };
    }
    this.stream.write({ requests });
  };

  /** Fails writes that waited longer than waitMs for the storage process. */
  private armExpiry(): void {
    if (this.expiryTimer) return;
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      const now = Date.now();
      const keep: Queued[] = [];
      for (const q of this.outbox) {
        if (q.expires <= now) q.reject(this.unavailable);
        else keep.push(q);
      }
      this.outbox = keep;
      if (keep.length && !this.connected) this.armExpiry();
    }, 100);
    this.expiryTimer.unref();
  }

  /**
   * Closes the link and moves the writes it has not sent yet to `next` (the link to a new
   * leader): never sent, they cannot be applied twice, and need not wait out `waitMs` for a
   * peer that is gone. Writes in flight fail as on close(): their outcome is unknown.
   */
  handOver(next: BatchLink): void {
    const unsent = this.outbox;
    this.outbox = [];
    this.close();
    next.adopt(unsent);
  }

  private adopt(writes: Queued[]): void {
    if (!writes.length) return;
    if (this.closed) {
      for (const q of writes) q.reject(this.unavailable);
      return;
    }
    for (const q of writes) this.outbox.push({ ...q, id: this.nextId++ });
    this.scheduleFlush();
  }

  close(): void {
    this.closed = true;
    for (const q of [...this.outbox, ...this.sent.values()]) q.reject(this.unavailable);
    this.outbox = [];
    this.sent.clear();
    this.stream?.end();
    this.calls.close();
  }
}

/**
 * A link on our own HTTP/2 streams (shared/grpc/stream-channel.ts) to a batch method: on
 * `channel`, a connection the caller's other links share (a Unix socket, or an in-process
 * pipe to a server in this process). Closing the channel is its owner's.
 */
export function channelBatchLink(channel: StreamChannel, method: MethodDefinition<any, any>, log: Logger, opts: BatchLinkOptions = {}): BatchLink {
  const def = method as MethodDefinition<unknown, { results: Result[] }>;
  return new BatchLink({ open: () => channel.stream(def), close: () => {} }, log, opts);
}

/**
 * The gateway's (and the leader's peer agent's) link to storage on <data-dir>/run/storage.sock,
 * on `channel`, a connection to it that the caller's other links to storage share.
 */
export function storageLink(channel: StreamChannel, log: Logger, method: 'Write' | 'Lease' = 'Write', waitMs = 5000): BatchLink {
  return channelBatchLink(channel, STORAGE[method]!, log, { waitMs });
}
