// The callers' side of the internal streams on Unix sockets (storage's Write, Lease and Feed;
// the peer agent's Attach and Forward): the client side of our HTTP/2 session
// (http2-session.ts) with gRPC's framing, no gRPC library. A message on this hop cost about
// half the CPU and latency of @grpc/grpc-js's client and server (`npm run hop`), and node's
// http2 client sent each write from a later phase of the event loop (docs/benchmarks.md); a
// serial put crosses the hop twice. The server is our own too (http2-server.ts). It does only what a long-lived internal stream needs: no
// deadlines, no metadata, no compression, no retries (the link above it reconnects).
import net from 'node:net';
import { EventEmitter } from 'node:events';
import type { MethodDefinition } from '@grpc/grpc-js';
import { MessageReader, writeMessage } from './framing.js';
import type { RequestHeaders } from './hpack.js';
import { ClientSession, DEFAULT_WINDOW, H2_CANCEL, H2_INTERNAL_ERROR, type SessionStream } from './http2-session.js';

export { DEFAULT_WINDOW };

/** Flow-control windows of a connection and of a write link's stream: a burst of answers never waits for a WINDOW_UPDATE. */
const WINDOW = 1 << 24;
const NO_LIMIT = 2 ** 31 - 1;

/**
 * One HTTP/2 connection to a Unix socket, made when a stream needs it and again after it broke.
 * Several streams may share it (the gateway's write links and feed): what the server answers
 * on them in one turn arrives in one read.
 */
export class UnixH2Channel {
  private session: ClientSession | undefined;

  constructor(private readonly socket: string) {}

  private connection(): ClientSession {
    const s = this.session;
    if (s && !s.closed) return s;
    // Every stream on a connection that fails fails too, and that is what callers hear.
    this.session = new ClientSession(net.connect(this.socket), WINDOW);
    return this.session;
  }

  /**
   * Opens a bidi call of `method`; it emits 'metadata' once the server took it. `window`: how
   * much the server may send on it ahead of what this process has read (HTTP/2's default,
   * 64 KiB, for the feed: storage skips a gateway that falls that far behind).
   */
  stream<Req, Res>(method: MethodDefinition<Req, Res>, window = WINDOW): H2Stream<Req, Res> {
    return new H2Stream(this.connection(), method, window);
  }

  close(): void {
    this.session?.destroy();
    this.session = undefined;
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
        if (compressed) return this.abort(new Error(`${method.path}: a compressed message on an identity stream`));
        let decoded: Res;
        try {
          decoded = method.responseDeserialize(msg);
        } catch (err) {
          return this.abort(new Error(`${method.path}: cannot decode a message: ${(err as Error).message}`));
        }
        this.emit('data', decoded);
      },
      (size) => this.abort(new Error(`${method.path}: a message of ${size} bytes`)),
    );
    req.onheaders = (h, end) => {
      if (end || h['grpc-status'] !== undefined) this.onStatus(h);
      else this.emit('metadata', h);
    };
    req.ondata = (chunk) => reader.push(chunk);
    req.onclose = () => {
      if (this.status === '0') return void this.emit('end');
      const why =
        this.status !== undefined ? `status ${this.status}: ${this.details}`
        : this.failure ? this.failure.message
        : req.rstCode !== undefined ? `stream reset (${req.rstCode})`
        : 'connection closed';
      this.emit('error', new Error(`${method.path}: ${why}`));
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
