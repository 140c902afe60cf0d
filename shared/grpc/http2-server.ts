// The client port's gRPC server, written on node:http2 directly.
//
// Why not @grpc/grpc-js's Server: on this project's 2-core reference machine its server path
// (metadata objects, interceptor chain, several event-loop hops per call) cost about as much
// CPU per unary call as the whole Range it serves, and ~30 µs per streamed watch response
// (docs/benchmarks.md). This server speaks the same wire protocol (gRPC over HTTP/2, h2c) with
// the parts etcd's clients use: unary, server-streaming and bidi calls, grpc-timeout,
// gzip/deflate request messages, the receive size limit, status trailers, and grpc-go's
// texts for the errors gRPC itself raises (what etcd's clients get from etcd). The services
// see a call object with the subset of grpc-js's server-call surface they use, so they are
// written as for grpc-js: `call.request`, `cb(err, res)`, `write`/`end`, `'data'`/`'end'`/
// `'cancelled'`/`'close'`/`'drain'` events and `emit('error', status)` to fail a stream.
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import zlib from 'node:zlib';
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { Metadata, status as Status, type ServiceDefinition, type MethodDefinition } from '@grpc/grpc-js';
import { secureContextOptions, TlsFileWatch, type ClientTlsFiles } from './client-tls.js';
import { routeConnection } from './authority.js';
import { COPY_LIMIT, MessageReader, frame, prefix, writeMessage } from './framing.js';

/** A gRPC status as handlers give it (grpc-js's ServiceError/StatusObject shape). */
export interface StatusLike {
  code?: number;
  details?: string;
  message?: string;
}

export type UnaryCallback<Res> = (err: StatusLike | null | undefined, value?: Res) => void;

export interface ServerOptions {
  /** The largest request message accepted (grpc's max receive message length). */
  maxReceiveMessageLength: number;
  /** Serve TLS only (h2 by ALPN), from these files, re-read when they change. */
  tls?: ClientTlsFiles;
  /** Where failed handshakes and certificate reloads are reported (one line each). */
  log?: ServerLog;
}

/** The part of a pino logger the server uses. */
export interface ServerLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** What a session knows of its connection (the TLS socket under it, whatever wraps it). */
interface Peer {
  socket: net.Socket;
  commonName?: string | null;
}
const PEER = Symbol('kvs.peer');
type PeerSession = http2.ServerHttp2Session & { [PEER]?: Peer };

const {
  HTTP2_HEADER_PATH,
  HTTP2_HEADER_METHOD,
  HTTP2_HEADER_CONTENT_TYPE,
  HTTP2_HEADER_STATUS,
  NGHTTP2_NO_ERROR,
} = http2.constants;

const RESPONSE_HEADERS = {
  [HTTP2_HEADER_STATUS]: 200,
  [HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
  'grpc-accept-encoding': 'identity,deflate,gzip',
};
const OK_TRAILERS = { 'grpc-status': '0' };
const WAIT_FOR_TRAILERS = { waitForTrailers: true };
const END_STREAM = { endStream: true };

/** grpc-message is percent-encoded (gRPC's HTTP/2 protocol): bytes outside 0x20–0x7E and '%'. */
export function encodeGrpcMessage(text: string): string {
  let plain = true;
  for (let i = 0; i < text.length && plain; i++) {
    const c = text.charCodeAt(i);
    plain = c >= 0x20 && c <= 0x7e && c !== 0x25;
  }
  if (plain) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

const MAX_TIMER_MS = 2 ** 31 - 1;
const TIMEOUT_UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** grpc-timeout ("<digits><unit>") in milliseconds, or undefined if absent or malformed. */
export function parseTimeout(value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string') return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(value);
  return m ? Number(m[1]) * TIMEOUT_UNITS[m[2]] : undefined;
}

type Method = MethodDefinition<any, any>;
type Handler = (call: ServerCall<any, any>, cb: UnaryCallback<any>) => void;

interface Route {
  method: Method;
  handler: Handler;
  kind: 'unary' | 'serverStream' | 'clientStream' | 'bidi';
}

/**
 * One call on the client port. Unary and server-streaming handlers get it with `request`
 * set; bidi handlers read 'data' events. The first write sends the response headers; a status
 * (OK from end(), or an error from emit('error', status) or a unary callback) ends the call.
 */
export class ServerCall<Req = unknown, Res = unknown> extends EventEmitter {
  request!: Req;
  cancelled = false;
  private headersSent = false;
  private finished = false;
  private closed = false;
  private deadlineTimer: NodeJS.Timeout | undefined;
  private deadline: Date | undefined;
  private pendingTrailers: Record<string, string> = OK_TRAILERS;
  private meta: Metadata | undefined;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly headers: http2.IncomingHttpHeaders,
    private readonly method: Method,
  ) {
    super();
  }

  /** The request's metadata (custom headers), built on first use. */
  get metadata(): Metadata {
    return (this.meta ??= Metadata.fromHttp2Headers(this.headers));
  }

  getPath(): string {
    return this.method.path;
  }

  getPeer(): string {
    const s = (this.stream.session as PeerSession | undefined)?.[PEER]?.socket;
    return s ? `${s.remoteAddress}:${s.remotePort}` : 'unknown';
  }

  /**
   * The Common Name of the client certificate verified in the TLS handshake (mutual TLS), or
   * undefined without one (plaintext, or TLS without --client-tls-ca).
   */
  get peerCommonName(): string | undefined {
    const peer = (this.stream.session as PeerSession | undefined)?.[PEER];
    if (!peer) return undefined;
    if (peer.commonName === undefined) {
      const s = peer.socket as tls.TLSSocket;
      const cert = s.encrypted && s.authorized ? s.getPeerCertificate() : undefined;
      // A subject with several CNs: Go's x509 (so etcd) keeps the last one.
      const cn = cert?.subject?.CN as string | string[] | undefined;
      peer.commonName = (Array.isArray(cn) ? cn[cn.length - 1] : cn) || null;
    }
    return peer.commonName ?? undefined;
  }

  get writable(): boolean {
    return !this.finished && !this.stream.destroyed;
  }

  get destroyed(): boolean {
    return this.stream.destroyed;
  }

  get writableNeedDrain(): boolean {
    return this.stream.writableNeedDrain;
  }

  /** Sends one response message; false means "wait for 'drain'", as a Writable's write. */
  write(message: Res): boolean {
    if (this.finished || this.gone()) return false;
    this.sendHeaders();
    return writeMessage(this.stream, this.method.responseSerialize(message) as Buffer);
  }

  /** Sends the response headers now (grpc-js's sendMetadata; a caller learns the call is served). */
  sendMetadata(): void {
    if (!this.finished && !this.gone()) this.sendHeaders();
  }

  /** Ends a streaming call with status OK (after the messages written so far). */
  end(): void {
    this.finish(OK_TRAILERS);
  }

  /** Ends the call with `err` as its status. */
  fail(err: StatusLike): void {
    const code = typeof err.code === 'number' ? err.code : Status.UNKNOWN;
    const details = err.details ?? err.message ?? '';
    this.finish({ 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(details) });
  }

  /** grpc-js's convention: emitting 'error' on a server stream ends it with that status. */
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'error') {
      this.fail((args[0] ?? {}) as StatusLike);
      if (this.listenerCount('error') === 0) return false;
    }
    return super.emit(event, ...args);
  }

  /** Answers a unary call (the handler's callback). */
  respond(err: StatusLike | null | undefined, value?: Res): void {
    if (err) return this.fail(err);
    if (this.finished || this.gone()) return;
    let body: Buffer;
    try {
      body = this.method.responseSerialize(value) as Buffer;
    } catch (e) {
      return this.fail({ code: Status.INTERNAL, details: `kvs: cannot encode the response: ${(e as Error).message}` });
    }
    this.finished = true;
    this.clearDeadline();
    this.headersSent = true;
    this.stream.respond(RESPONSE_HEADERS, WAIT_FOR_TRAILERS);
    if (body.length <= COPY_LIMIT) return void this.stream.end(frame(body));
    // A large answer (a Range of many keys) is not copied again just to prepend 5 bytes.
    this.stream.write(prefix(body.length));
    this.stream.end(body);
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.stream.respond(RESPONSE_HEADERS, WAIT_FOR_TRAILERS);
  }

  private finish(trailers: Record<string, string>): void {
    if (this.finished) return;
    this.finished = true;
    this.clearDeadline();
    const stream = this.stream;
    if (this.gone()) return;
    if (!this.headersSent) {
      // Trailers-only response: the status travels in the one HEADERS frame.
      this.headersSent = true;
      stream.respond({ ...RESPONSE_HEADERS, ...trailers }, END_STREAM);
      return;
    }
    this.pendingTrailers = trailers;
    stream.end();
  }

  /** @internal the stream asks for its trailers once its last DATA frame is queued. */
  sendTrailers(): void {
    if (!this.gone()) this.stream.sendTrailers(this.pendingTrailers);
  }

  /**
   * The client reset the stream or the connection closed: nothing can be sent any more (node
   * throws on a respond or write to such a stream; the 'close' event follows).
   */
  private gone(): boolean {
    return this.stream.destroyed || this.stream.closed;
  }

  /** @internal */
  armDeadline(ms: number): void {
    this.deadline = new Date(Date.now() + ms);
    this.deadlineTimer = setTimeout(() => {
      if (this.finished) return;
      this.cancelled = true;
      this.fail({ code: Status.DEADLINE_EXCEEDED, details: 'context deadline exceeded' });
      super.emit('cancelled', 'deadline');
    }, ms);
    this.deadlineTimer.unref();
  }

  private clearDeadline(): void {
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
  }

  /** @internal the HTTP/2 stream closed: a call that had not ended was cancelled by its client. */
  onStreamClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.clearDeadline();
    if (!this.finished) {
      this.finished = true;
      this.cancelled = true;
      super.emit('cancelled', 'cancelled');
    }
    super.emit('close');
  }

  /** @internal */
  get isFinished(): boolean {
    return this.finished;
  }

  /** The request's deadline (grpc-js's Deadline: Infinity when the client set none). */
  getDeadline(): Date | number {
    return this.deadline ?? Infinity;
  }
}

/**
 * After some protocol errors node's http2 sends GOAWAY with the error code, then neither reads
 * nor closes the connection, and tells JS nothing (RFC 9113 5.4.1 says it MUST close it): one
 * descriptor held per hostile connection (found by chaos/fuzz). A session quiet this long is
 * sent a PING; one that does not answer within PROBE_TIMEOUT_MS is destroyed. Clients answer
 * PINGs in their HTTP/2 layer, so a live idle client costs one PING round every IDLE_PROBE_MS.
 * (Node re-arms a session's idle timer once while its last writes are still draining, so such a
 * connection is closed 8-12 s after it went quiet.)
 */
const IDLE_PROBE_MS = 4000;
const PROBE_TIMEOUT_MS = 4000;

function probe(session: http2.ServerHttp2Session): void {
  if (session.destroyed || session.closed) return;
  const timer = setTimeout(() => session.destroy(), PROBE_TIMEOUT_MS);
  timer.unref();
  try {
    const sent = session.ping((err) => {
      clearTimeout(timer);
      if (err && !session.destroyed) session.destroy();
    });
    if (!sent) clearTimeout(timer); // PINGs already out: their answers decide
  } catch {
    clearTimeout(timer);
  }
}

export class GrpcServer {
  private readonly routes = new Map<string, Route>();
  private readonly services = new Set<string>();
  /** Makes the HTTP/2 sessions; it never listens itself: `listener` hands it each connection. */
  private readonly h2: http2.Http2Server;
  private listener: net.Server | undefined;
  /** Serving our own processes on a Unix socket: no stranger to probe (see IDLE_PROBE_MS). */
  private internal = false;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  /** The connection being handed to `h2` (its 'session' event fires synchronously). */
  private accepting: net.Socket | undefined;
  private readonly handshakeLog: RateLimitedLog | undefined;
  /** Connections not yet handed to `h2` (routeConnection's abandon functions). */
  private readonly looking = new Set<() => void>();

  constructor(private readonly opts: ServerOptions) {
    this.h2 = http2.createServer({
      // Streams are bounded by flow control, not by a count; etcd's (grpc-go's) default is
      // unlimited too. Watch fan-out and keep-alives keep many streams open per connection.
      settings: { maxConcurrentStreams: 2 ** 31 - 1 },
      // A watch connection may hold several MB of responses in flight; node's 10 MB default
      // would reset busy sessions with ENHANCE_YOUR_CALM.
      maxSessionMemory: 256,
    });
    this.h2.on('stream', (stream, headers) => this.onStream(stream, headers));
    this.h2.on('session', (session: PeerSession) => {
      session[PEER] = { socket: this.accepting ?? (session.socket as net.Socket) };
      this.sessions.add(session);
      session.on('close', () => this.sessions.delete(session));
      // A client that breaks the connection is that client's problem; the server goes on.
      session.on('error', () => {});
      session.on('goaway', onClientGoaway);
      // A busy caller (a long GC pause) must not lose its long-lived streams to a probe.
      if (!this.internal) session.setTimeout(IDLE_PROBE_MS, () => probe(session));
    });
    // A TLS client that negotiated no ALPN protocol (or http/1.1): not gRPC.
    this.h2.on('unknownProtocol', (socket: tls.TLSSocket) => {
      this.handshakeLog?.warn({ peer: `${socket.remoteAddress}:${socket.remotePort}`, alpn: socket.alpnProtocol }, 'client TLS connection refused: it did not negotiate HTTP/2 (ALPN h2)');
      socket.destroy();
    });
    if (opts.log) this.handshakeLog = new RateLimitedLog(opts.log);
  }

  addService(def: ServiceDefinition, impl: Record<string, unknown>): void {
    for (const [name, method] of Object.entries(def) as [string, Method][]) {
      const handler = impl[name] ?? impl[method.originalName ?? ''];
      if (typeof handler !== 'function') continue;
      const kind = method.requestStream ? (method.responseStream ? 'bidi' : 'clientStream') : method.responseStream ? 'serverStream' : 'unary';
      this.routes.set(method.path, { method, handler: handler as Handler, kind });
      this.services.add(method.path.split('/')[1]);
    }
  }

  /**
   * Listens on "host:port" (IPv6 hosts in brackets), resolving with the bound port, or on
   * "unix:<path>" (the internal services' sockets, always plaintext), resolving with 0.
   */
  listen(address: string): Promise<number> {
    if (address.startsWith('unix:')) {
      // Internal callers are our own processes: no :authority to look at (authority.ts).
      this.internal = true;
      const listener = (this.listener = net.createServer((socket) => this.handOver(socket)));
      return new Promise((resolve, reject) => {
        const onError = (err: Error) => reject(new Error(`cannot listen on ${address}: ${err.message}`));
        listener.once('error', onError);
        listener.listen(address.slice(5), () => {
          listener.off('error', onError);
          resolve(0);
        });
      });
    }
    const m = /^(?:\[(.*)\]|(.*)):(\d+)$/.exec(address);
    if (!m) return Promise.reject(new Error(`cannot listen on ${address}: expected host:port`));
    const host = m[1] ?? m[2];
    const listener = (this.listener = this.opts.tls ? this.tlsListener(this.opts.tls) : net.createServer((socket) => this.accept(socket)));
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(new Error(`cannot listen on ${address}: ${err.message}`));
      listener.once('error', onError);
      listener.listen(Number(m[3]), host, () => {
        listener.off('error', onError);
        resolve((listener.address() as { port: number }).port);
      });
    });
  }

  private tlsListener(files: ClientTlsFiles): tls.Server {
    const server = tls.createServer(secureContextOptions(files));
    const log = this.opts.log;
    const watch = new TlsFileWatch(
      files,
      (opts) => server.setSecureContext(opts),
      (err) => log?.warn({ err: err.message }, 'client TLS files changed but do not load; still serving the previous certificate'),
      () => log?.info({ cert: files.cert }, 'client TLS certificate reloaded'),
    );
    // Connections whose handshake ended either way; node closes the others silently.
    const settled = new WeakSet<net.Socket>();
    const peerOf = (s: net.Socket) => `${s.remoteAddress}:${s.remotePort}`;
    server.prependListener('connection', (raw: net.Socket) => {
      void raw.remoteAddress; // node caches it: a failed handshake is reported with it after the socket is gone
      // Before the TLS socket is made (tls.Server's own 'connection' listener): a handshake
      // always gets the certificate the files hold now.
      watch.check();
      if (!files.ca) return;
      // Node refuses a client certificate that does not verify (expired, another CA) by closing
      // the connection after the handshake, with no alert and no event; only this says so.
      raw.once('close', () => {
        if (!settled.has(raw)) this.handshakeLog?.warn({ peer: peerOf(raw) }, 'client TLS handshake failed: client certificate refused (expired, not yet valid, or not signed by --client-tls-ca)');
      });
    });
    server.on('secureConnection', (socket: tls.TLSSocket & { _parent?: net.Socket }) => {
      if (socket._parent) settled.add(socket._parent);
      this.accept(socket);
    });
    server.on('tlsClientError', (err: Error & { code?: string; reason?: string }, socket: tls.TLSSocket & { _parent?: net.Socket }) => {
      const s = socket._parent ?? socket;
      settled.add(s);
      // OpenSSL's reason ("peer did not return a certificate"), not its multi-part message.
      this.handshakeLog?.warn({ peer: peerOf(s), code: err.code }, `client TLS handshake failed: ${err.reason ?? err.message}`);
    });
    return server;
  }

  /**
   * A connection (plaintext, or TLS after its handshake) goes to the HTTP/2 server once its
   * first request showed whether its :authority needs rewriting (authority.ts).
   */
  private accept(socket: net.Socket): void {
    const abandon = routeConnection(socket, (transport) => {
      this.looking.delete(abandon);
      this.handOver(socket, transport);
    });
    this.looking.add(abandon);
  }

  private handOver(socket: net.Socket, transport: net.Socket | Duplex = socket): void {
    this.accepting = socket;
    try {
      this.h2.emit('connection', transport);
    } finally {
      this.accepting = undefined;
    }
  }

  /** Stops accepting connections, lets calls finish for up to `graceMs`, then cuts the rest. */
  shutdown(graceMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const s of this.sessions) s.destroy();
        resolve();
      }, graceMs);
      timer.unref();
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      // net.Server.close calls back once every connection, so every session, has ended.
      if (this.listener?.listening) this.listener.close(done);
      else done();
      for (const abandon of this.looking) abandon();
      this.looking.clear();
      for (const s of this.sessions) s.close();
    });
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', () => {}); // a reset stream; its 'close' ends the call
    // Node emits 'stream' a tick after the HEADERS were read: a client that reset the stream
    // in the same read (HEADERS, then RST_STREAM) has already destroyed it, and respond() on it
    // throws (found by the port fuzzer, docs/reliability.md). Nothing is owed to such a stream.
    if (stream.destroyed || stream.closed) return;
    const path = String(headers[HTTP2_HEADER_PATH] ?? '');
    const contentType = headers[HTTP2_HEADER_CONTENT_TYPE];
    if (headers[HTTP2_HEADER_METHOD] !== 'POST' || typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      // Not a gRPC request (grpc-go answers these with HTTP errors too).
      stream.respond({ [HTTP2_HEADER_STATUS]: 415 }, END_STREAM);
      return;
    }
    const route = this.routes.get(path);
    if (!route) return this.refuse(stream, this.unknown(path));
    const call = new ServerCall<any, any>(stream, headers, route.method);
    stream.on('close', () => call.onStreamClose());
    stream.on('wantTrailers', () => call.sendTrailers());
    const timeout = parseTimeout(headers['grpc-timeout']);
    // Node's timers cap at 2^31-1 ms (~24.8 days) and fire at once beyond it; a deadline that
    // far away is as good as none.
    if (timeout !== undefined && timeout <= MAX_TIMER_MS) call.armDeadline(timeout);
    const encoding = headers['grpc-encoding'];
    const inflate = encoding === undefined || encoding === 'identity' ? undefined : INFLATE[encoding as string];
    if (encoding !== undefined && encoding !== 'identity' && !inflate) {
      return call.fail({ code: Status.UNIMPLEMENTED, details: `grpc: Decompressor is not installed for grpc-encoding "${encoding}"` });
    }

    const decode = (msg: Buffer, compressed: boolean): unknown => {
      if (compressed) {
        if (!inflate) throw { code: Status.INTERNAL, details: 'grpc: compressed flag set with identity or empty encoding' };
        const max = this.opts.maxReceiveMessageLength;
        try {
          msg = inflate(msg, max);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw tooLarge(max + 1, max);
          throw { code: Status.INTERNAL, details: `grpc: failed to decompress the received message: ${(err as Error).message}` };
        }
        if (msg.length > max) throw tooLarge(msg.length, max);
      }
      try {
        return route.method.requestDeserialize(msg);
      } catch (err) {
        throw { code: Status.INTERNAL, details: `grpc: error unmarshalling request: ${(err as Error).message}` };
      }
    };

    let started = false;
    const reader = new MessageReader(
      this.opts.maxReceiveMessageLength,
      (msg, compressed) => {
        if (call.isFinished) return;
        let req: unknown;
        try {
          req = decode(msg, compressed);
        } catch (status) {
          return call.fail(status as StatusLike);
        }
        if (route.kind === 'bidi' || route.kind === 'clientStream') {
          call.emit('data', req);
          return;
        }
        // Unary and server-streaming calls start with their one request message.
        if (started) return;
        started = true;
        call.request = req;
        this.dispatch(route, call);
      },
      (size) => call.fail(tooLarge(size, this.opts.maxReceiveMessageLength)),
    );
    // Once the call has its status (an error, or a too-large message still arriving), the rest
    // of what the client sends is dropped unread rather than buffered.
    stream.on('data', (chunk: Buffer) => {
      if (!call.isFinished) reader.push(chunk);
    });
    stream.on('end', () => {
      if (route.kind === 'bidi' || route.kind === 'clientStream') {
        if (!call.isFinished) call.emit('end');
      } else if (!started && !call.isFinished) {
        call.fail({ code: Status.INTERNAL, details: 'grpc: error while reading the request: the stream ended before its message' });
      }
    });
    if (route.method.responseStream) stream.on('drain', () => call.emit('drain'));
    if (route.kind === 'bidi' || route.kind === 'clientStream') this.dispatch(route, call);
  }

  private dispatch(route: Route, call: ServerCall<any, any>): void {
    try {
      if (route.kind === 'unary' || route.kind === 'clientStream') route.handler(call, (err, value) => call.respond(err, value));
      else route.handler(call, noCallback);
    } catch (err) {
      call.fail({ code: Status.UNKNOWN, details: `kvs: ${(err as Error)?.message ?? String(err)}` });
    }
  }

  /** grpc-go's answers to a path it has no handler for (what etcd's clients see from etcd). */
  private unknown(path: string): StatusLike {
    const sm = path.startsWith('/') ? path.slice(1) : path;
    const pos = sm.lastIndexOf('/');
    if (pos === -1) return { code: Status.RESOURCE_EXHAUSTED, details: `malformed method name: ${JSON.stringify(path)}` };
    const service = sm.slice(0, pos);
    if (!this.services.has(service)) return { code: Status.UNIMPLEMENTED, details: `unknown service ${service}` };
    return { code: Status.UNIMPLEMENTED, details: `unknown method ${sm.slice(pos + 1)} for service ${service}` };
  }

  private refuse(stream: http2.ServerHttp2Stream, s: StatusLike): void {
    stream.respond({ ...RESPONSE_HEADERS, 'grpc-status': String(s.code), 'grpc-message': encodeGrpcMessage(s.details ?? '') }, END_STREAM);
  }
}

function noCallback(): void {}

/**
 * A client's GOAWAY does not end what the client sent with it. Its last-stream-id names the
 * last stream the *server* opened that the client will process (none here); the client may
 * have opened streams of its own just before, and node's http2 client even puts the GOAWAY
 * of `session.close()` on the wire ahead of the HEADERS of a request made in the same turn
 * (nghttp2 sends control frames before new streams). grpc-js closes a connection that way
 * whenever the last channel using it is closed (the etcd3 client closes its channels on any
 * watch-stream error, its own cancels included), so a call it had just started arrives right
 * after its GOAWAY, usually in the same read.
 *
 * Node's http2 server answers a client's GOAWAY (NO_ERROR) with `session.close()` at once,
 * while nghttp2 is still in the middle of that read: the frames after the GOAWAY are parsed
 * with the session already closed, so their streams are refused (node resets them with
 * REFUSED_STREAM and its own GOAWAY names none of them as processed), which grpc-js retries
 * on the channel it has just closed: UNAVAILABLE. grpc-go's server (etcd's plaintext port)
 * serves them. Here node's `close()` that follows the 'goaway' event
 * is put off to the next turn of the event loop (setImmediate), after the read and what
 * arrived with it: those streams are served, then the session closes as node would have
 * closed it (its own GOAWAY, the open streams finish, then the connection ends). A stream
 * sent later still gets node's answer: nghttp2 stops reading once a GOAWAY was received and
 * no stream is open, and a closed session refuses new streams. A GOAWAY with an error code
 * still destroys the session at once (node's rule).
 */
function onClientGoaway(this: http2.ServerHttp2Session, code: number): void {
  if (code !== NGHTTP2_NO_ERROR) return;
  // node calls session.close() right after emitting 'goaway': that one call is deferred.
  Object.defineProperty(this, 'close', { value: deferClose, configurable: true, writable: true });
  // Should node not make that call (another version), the session's close() is restored anyway.
  queueMicrotask(restoreClose.bind(this));
}

function deferClose(this: http2.ServerHttp2Session): void {
  restoreClose.call(this);
  setImmediate(closeSession, this);
}

function closeSession(session: http2.ServerHttp2Session): void {
  session.close();
}

function restoreClose(this: http2.ServerHttp2Session): void {
  if (Object.hasOwn(this, 'close')) delete (this as { close?: unknown }).close;
}

function tooLarge(size: number, max: number): StatusLike {
  return { code: Status.RESOURCE_EXHAUSTED, details: `grpc: received message larger than max (${size} vs. ${max})` };
}

/** Request decompression, bounded: a small compressed body must not inflate past the limit. */
const INFLATE: Record<string, (b: Buffer, max: number) => Buffer> = {
  gzip: (b, max) => zlib.gunzipSync(b, { maxOutputLength: max + 1 }),
  deflate: (b, max) => zlib.inflateSync(b, { maxOutputLength: max + 1 }),
};

/**
 * One line per event, but a flood (a scanner, a misconfigured fleet) must not flood the log: a
 * token bucket lets bursts of 20 through and then one line a second; the next line written
 * says how many were left out.
 */
class RateLimitedLog {
  private tokens = 20;
  private last = Date.now();
  private dropped = 0;
  constructor(private readonly log: ServerLog) {}

  warn(obj: Record<string, unknown>, msg: string): void {
    const now = Date.now();
    this.tokens = Math.min(20, this.tokens + (now - this.last) / 1000);
    this.last = now;
    if (this.tokens < 1) {
      this.dropped++;
      return;
    }
    this.tokens--;
    if (this.dropped) obj = { ...obj, suppressed: this.dropped };
    this.dropped = 0;
    this.log.warn(obj, msg);
  }
}
