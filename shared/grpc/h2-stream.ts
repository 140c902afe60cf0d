// The callers' side of the internal streams on Unix sockets (storage's Write, Lease and Feed;
// the peer agent's Attach and Forward) on node:http2, with gRPC's framing and no gRPC library:
// a message on this hop costs about half the CPU and latency of @grpc/grpc-js's client and
// server (`npm run hop`, docs/benchmarks.md), and a serial put crosses it twice. The server
// is our own too (http2-server.ts). It does only what a long-lived internal stream needs: no
// deadlines, no metadata, no compression, no retries (the link above it reconnects).
import http2 from 'node:http2';
import net from 'node:net';
import { EventEmitter } from 'node:events';
import type { MethodDefinition } from '@grpc/grpc-js';
import { MessageReader, writeMessage } from './framing.js';

/** Flow-control windows of the write links: a burst of answers never waits for a WINDOW_UPDATE. */
const WINDOW = 1 << 24;
const NO_LIMIT = 2 ** 31 - 1;
/** HTTP/2's initial window (RFC 9113 6.9.2). */
export const DEFAULT_WINDOW = 65_535;

/** One HTTP/2 connection to a Unix socket, made when a stream needs it and again after it broke. */
export class UnixH2Channel {
  private session: http2.ClientHttp2Session | undefined;

  /**
   * `window`: how much the server may send ahead of what this process has read (HTTP/2's
   * default, 64 KiB, for the feed: storage skips a gateway that falls that far behind).
   */
  constructor(
    private readonly socket: string,
    private readonly window = WINDOW,
  ) {}

  private connection(): http2.ClientHttp2Session {
    const s = this.session;
    if (s && !s.closed && !s.destroyed) return s;
    const session = http2.connect('http://localhost', {
      createConnection: () => net.connect(this.socket),
      settings: { enablePush: false, initialWindowSize: this.window },
      maxSessionMemory: 256,
    });
    session.on('error', () => {}); // every stream on it fails too, and that is what callers hear
    if (this.window > DEFAULT_WINDOW) session.once('connect', () => session.setLocalWindowSize(this.window));
    this.session = session;
    return session;
  }

  /** Opens a bidi call of `method`; it emits 'metadata' once the server took it. */
  stream<Req, Res>(method: MethodDefinition<Req, Res>): H2Stream<Req, Res> {
    return new H2Stream(this.connection(), method);
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
  private readonly req: http2.ClientHttp2Stream | undefined;
  private status: string | undefined;
  private details = '';
  private failure: Error | undefined;

  constructor(session: http2.ClientHttp2Session, private readonly method: MethodDefinition<Req, Res>) {
    super();
    try {
      this.req = session.request({ ':method': 'POST', ':path': method.path, 'content-type': 'application/grpc', te: 'trailers' });
    } catch (err) {
      // A session that is closing refuses new streams at once.
      session.destroy();
      process.nextTick(() => this.emit('error', err));
      return;
    }
    const req = this.req;
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
    req.on('response', (h) => {
      if (h['grpc-status'] !== undefined) this.onStatus(h);
      else this.emit('metadata', h);
    });
    req.on('trailers', (h) => this.onStatus(h));
    req.on('data', (chunk: Buffer) => reader.push(chunk));
    req.on('error', (err) => (this.failure ??= err));
    req.on('close', () => {
      if (this.status === '0') return void this.emit('end');
      const why = this.status !== undefined ? `status ${this.status}: ${this.details}` : (this.failure?.message ?? `stream reset (${req.rstCode})`);
      this.emit('error', new Error(`${method.path}: ${why}`));
    });
  }

  private onStatus(h: http2.IncomingHttpHeaders): void {
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
    this.req?.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  }

  /**
   * Sends one message; false means "wait for 'drain'", as a Writable's write. `flushed`, as a
   * Writable's callback, is called once the message left (and not at all on a closed stream).
   */
  write(message: Req, flushed?: (err?: Error | null) => void): boolean {
    const req = this.req;
    if (!req || req.destroyed || req.closed) return false;
    return writeMessage(req, this.method.requestSerialize(message), flushed);
  }

  end(): void {
    if (this.req && !this.req.destroyed) this.req.end();
  }

  /** Ends the call from this side (RST_STREAM CANCEL); it then emits 'error'. */
  cancel(): void {
    if (this.req && !this.req.destroyed) this.req.close(http2.constants.NGHTTP2_CANCEL);
  }
}
