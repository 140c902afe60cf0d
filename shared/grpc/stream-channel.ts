// The callers' side of our own gRPC streams: the internal ones on Unix sockets (storage's
// Write, Lease and Feed; the peer agent's Attach and Forward) and the peer port between nodes
// (a follower's Follow, Forward and GetRevision to its leader). It is the client side of our
// HTTP/2 session (shared/http2/session.ts) with gRPC's framing, no gRPC library. A message on a hop
// cost about half the CPU and latency of @grpc/grpc-js's client and server (`npm run hop`),
// and node's http2 client sent each write from a later phase of the event loop
// (docs/perf/hop-costs.md). The servers are our own too (server.ts). It does only what our
// own calls need: no metadata beyond fixed headers, no compression, no retries (the caller
// reconnects: the batch link, the follower's loop), deadlines only on a unary call.
import net from 'node:net';
import { EventEmitter } from 'node:events';
import { status, type MethodDefinition } from '@grpc/grpc-js';
import { MessageReader, writeMessage } from './framing.js';
import type { RequestHeaders } from '../http2/hpack.js';
import { ClientSession, DEFAULT_WINDOW, H2_CANCEL, H2_INTERNAL_ERROR, type SessionStream } from '../http2/session.js';

export { DEFAULT_WINDOW };

/** Flow-control windows of a connection and of a write link's stream: a burst of answers never waits for a WINDOW_UPDATE. */
const WINDOW = 1 << 24;
const NO_LIMIT = 2 ** 31 - 1;
/** How often a channel with a keepalive looks at its connection. */
const KEEPALIVE_TICK_MS = 1000;

export interface ChannelOptions {
  /** Sent with every call besides gRPC's own headers. */
  headers?: Record<string, string>;
  /**
   * A connection with nothing read for `idleMs` is sent a PING, and closed (its calls fail)
   * when no answer came `timeoutMs` later: a far end gone without a word (a host down, a
   * partition) is noticed. None on a Unix socket: the kernel tells when the process is gone.
   */
  keepalive?: { idleMs: number; timeoutMs: number };
}

/** How a call ended other than with status OK: gRPC's status code and message, as grpc-js's ServiceError has them. */
export class CallError extends Error {
  constructor(
    path: string,
    readonly code: number,
    readonly details: string,
  ) {
    super(`${path}: ${details}`);
  }
}

/**
 * One HTTP/2 connection made by `dial`, made when a call needs it and again after it broke.
 * Several calls may share it (the gateway's write links and feed): what the server answers on
 * them in one turn arrives in one read.
 */
export class StreamChannel {
  private session: ClientSession | undefined;
  private keepaliveTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly dial: () => net.Socket,
    private readonly opts: ChannelOptions = {},
  ) {}

  private connection(): ClientSession {
    const s = this.session;
    if (s && !s.closed) return s;
    // Every call on a connection that fails fails too, and that is what callers hear.
    const session = (this.session = new ClientSession(this.dial(), WINDOW, this.opts.headers));
    const ka = this.opts.keepalive;
    if (ka) {
      clearInterval(this.keepaliveTimer);
      const timer = (this.keepaliveTimer = setInterval(() => {
        if (session.destroyed) clearInterval(timer);
        else session.probe(Date.now(), ka.idleMs, ka.timeoutMs);
      }, KEEPALIVE_TICK_MS).unref());
    }
    return session;
  }

  /**
   * Opens a bidi call of `method`; it emits 'metadata' once the server took it. `window`: how
   * much the server may send on it ahead of what this process has read (HTTP/2's default,
   * 64 KiB, for the feed: storage skips a gateway that falls that far behind).
   */
  stream<Req, Res>(method: MethodDefinition<Req, Res>, window = WINDOW): H2Stream<Req, Res> {
    return new H2Stream(this.connection(), method, window);
  }

  /** A unary call; it fails with DEADLINE_EXCEEDED if not answered within `timeoutMs`. */
  unary<Req, Res>(method: MethodDefinition<Req, Res>, request: Req, timeoutMs: number): Promise<Res> {
    return new Promise((resolve, reject) => {
      const call = this.stream(method, DEFAULT_WINDOW);
      let answer: { value: Res } | undefined;
      const timer = setTimeout(() => {
        reject(new CallError(method.path, status.DEADLINE_EXCEEDED, 'Deadline exceeded'));
        call.cancel();
      }, timeoutMs);
      call.on('data', (m: Res) => (answer = { value: m }));
      call.on('end', () => {
        clearTimeout(timer);
        if (answer) resolve(answer.value);
        else reject(new CallError(method.path, status.INTERNAL, 'the server answered OK without a message'));
      });
      call.on('error', (err: CallError) => {
        clearTimeout(timer);
        reject(err);
      });
      call.write(request);
      call.end();
    });
  }

  close(): void {
    clearInterval(this.keepaliveTimer);
    this.session?.destroy();
    this.session = undefined;
  }
}

/** A channel to one of our own Unix sockets. */
export class UnixStreamChannel extends StreamChannel {
  constructor(socket: string) {
    super(() => net.connect(socket));
  }
}

/**
 * One bidi call, with the events of grpc-js's ClientDuplexStream that the batch link uses:
 * 'metadata' (the server's response headers), 'data' (each decoded message), then 'end' (the
 * server ended the call with status OK) or 'error' (any other ending).
 */
export class H2Stream<Req, Res> extends EventEmitter {
  private readonly req: SessionStream;
  private status: string | undefined;
  private details = '';
  private failure: Error | undefined;

  constructor(session: ClientSession, private readonly method: MethodDefinition<Req, Res>, window: number) {
    super();
    const req = (this.req = session.request(method.path, window));
    const reader = new MessageReader(
      NO_LIMIT,
      (msg, compressed) => {
        if (compressed) return this.abort(new Error(`a compressed message on an identity stream`));
        let decoded: Res;
        try {
          decoded = method.responseDeserialize(msg);
        } catch (err) {
          return this.abort(new Error(`cannot decode a message: ${(err as Error).message}`));
        }
        this.emit('data', decoded);
      },
      (size) => this.abort(new Error(`a message of ${size} bytes`)),
    );
    req.onheaders = (h, end) => {
      if (end || h['grpc-status'] !== undefined) this.onStatus(h);
      else this.emit('metadata', h);
    };
    req.ondata = (chunk) => reader.push(chunk);
    req.onclose = () => {
      if (this.status === '0') return void this.emit('end');
      const err =
        this.status !== undefined ? new CallError(method.path, Number(this.status), this.details)
        : this.failure ? new CallError(method.path, status.INTERNAL, this.failure.message)
        : req.rstCode === H2_CANCEL ? new CallError(method.path, status.CANCELLED, 'cancelled')
        : req.rstCode !== undefined ? new CallError(method.path, status.UNAVAILABLE, `stream reset (${req.rstCode})`)
        : new CallError(method.path, status.UNAVAILABLE, 'connection closed');
      this.emit('error', err);
    };
  }

  private onStatus(h: RequestHeaders): void {
    this.status = String(h['grpc-status']);
    const text = String(h['grpc-message'] ?? '');
    try {
      this.details = decodeURIComponent(text);
    } catch {
      this.details = text; // not percent-encoded after all: as it came
    }
  }

  private abort(err: Error): void {
    this.failure ??= err;
    this.req.reset(H2_INTERNAL_ERROR);
  }

  /**
   * Sends one message; false means "wait for 'drain'", as a Writable's write. `flushed`, as a
   * Writable's callback, is called once the message left (and not at all on a closed stream).
   */
  write(message: Req, flushed?: () => void): boolean {
    const req = this.req;
    if (req.closed) return false;
    return writeMessage(req, this.method.requestSerialize(message), flushed);
  }

  end(): void {
    this.req.end();
  }

  /** Ends the call from this side (RST_STREAM CANCEL); it then emits 'error'. */
  cancel(): void {
    this.req.reset(H2_CANCEL);
  }
}
