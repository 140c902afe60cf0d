// The client port's gRPC server, on our own HTTP/2 server side (shared/http2/session.ts).
//
// Why not @grpc/grpc-js's Server: on this project's 2-core reference machine its server path
// (metadata objects, interceptor chain, several event-loop hops per call) cost about as much
// CPU per unary call as the whole Range it serves, and ~30 µs per streamed watch response
// (docs/perf/client-port.md); node:http2's server, under this one until 2026-11-27, cost 2–4 times
// what shared/http2/session.ts costs per call. This server speaks the same wire protocol (gRPC over
// HTTP/2: h2c, or h2 over TLS) with
// the parts etcd's clients use: unary, server-streaming and bidi calls, grpc-timeout,
// gzip/deflate request messages, the receive size limit, status trailers, and grpc-go's
// texts for the errors gRPC itself raises (what etcd's clients get from etcd). The services
// see a call object with the subset of grpc-js's server-call surface they use, so they are
// written as for grpc-js: `call.request`, `cb(err, res)`, `write`/`end`, `'data'`/`'end'`/
// `'cancelled'`/`'close'`/`'drain'` events and `emit('error', status)` to fail a stream.
import net from 'node:net';
import tls from 'node:tls';
import zlib from 'node:zlib';
import { status as Status, type ServiceDefinition } from '@grpc/grpc-js';
import { secureContextOptions, TlsFileWatch, type ClientTlsFiles } from '../tls/client-port.js';
import { MessageReader } from './framing.js';
import { RESPONSE_HEADERS, ServerCall, parseTimeout, statusTrailers, type Handler, type Method, type Route, type StatusLike } from './server-call.js';
import { encodeHeaders, type RequestHeaders } from '../http2/hpack.js';
import { ServerSession, type SessionStream as ServerStream, type SessionHandler } from '../http2/session.js';

// The call surface lives in server-call.ts; handlers import it from here, with the server.
export { CallBase, ServerCall, encodeGrpcMessage, parseTimeout, type Route, type StatusLike, type UnaryCallback } from './server-call.js';

export interface ServerOptions {
  /** The largest request message accepted (grpc's max receive message length). */
  maxReceiveMessageLength: number;
  /** Serve TLS only (h2 by ALPN), from these files, re-read when they change. */
  tls?: ClientTlsFiles;
  /** Where failed handshakes and certificate reloads are reported (one line each). */
  log?: ServerLog;
  /**
   * Serve what is not gRPC too, on the same port (etcd's JSON gateway): connections that do
   * not open with the HTTP/2 preface (or negotiate http/1.1 by ALPN) go to `connection`, and
   * HTTP/2 requests that are not gRPC to `stream`. Without it, both are refused.
   */
  otherHttp?: OtherHttp;
}

/** The client port's other protocols (services/gateway/json). */
export interface OtherHttp {
  /** An HTTP/1.x connection; its first bytes were put back (socket.unshift) and it is paused. */
  connection(socket: net.Socket): void;
  /** An HTTP/2 request whose content-type is not application/grpc. */
  stream(stream: ServerStream, headers: RequestHeaders): void;
  /**
   * How long a plaintext connection has to send the bytes that tell HTTP/2 from HTTP/1.x
   * before it is closed (default: IDLE_PROBE_MS + PROBE_TIMEOUT_MS, the time a quiet HTTP/2
   * session that does not answer the idle probe lives).
   */
  sniffTimeoutMs?: number;
}

/** The part of a pino logger the server uses. */
export interface ServerLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

const NOT_GRPC_BLOCK = encodeHeaders({ ':status': 415 });
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A client connection quiet this long is sent a PING; one that does not answer within
 * PROBE_TIMEOUT_MS is closed: a client that vanished without closing (a host gone, a
 * half-open connection) does not hold its descriptor and its streams forever. Clients answer
 * PINGs in their HTTP/2 layer, so a live idle client costs one PING round every IDLE_PROBE_MS;
 * a busy one (a long GC pause) has the whole timeout to answer.
 */
export const IDLE_PROBE_MS = 4000;
export const PROBE_TIMEOUT_MS = 4000;
/** How often the idle probe looks at the sessions. */
export const PROBE_TICK_MS = 1000;

export class GrpcServer implements SessionHandler {
  private readonly routes = new Map<string, Route>();
  private readonly services = new Set<string>();
  private listener: net.Server | undefined;
  private stopped = false;
  /** A shutdown without a listener, waiting for its last session to end. */
  private drained: (() => void) | undefined;
  private readonly sessions = new Set<ServerSession>();
  private readonly handshakeLog: RateLimitedLog | undefined;
  private probeTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: ServerOptions) {
    if (opts.log) this.handshakeLog = new RateLimitedLog(opts.log);
  }

  /** The handler of a gRPC method path (`/etcdserverpb.KV/Range`), if served. */
  route(path: string): Route | undefined {
    return this.routes.get(path);
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
      // Internal callers are our own processes: nobody to probe.
      const listener = (this.listener = net.createServer((socket) => this.accept(socket)));
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
    this.probeTimer ??= setInterval(() => this.probeIdle(), PROBE_TICK_MS).unref();
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
    const alpn = this.opts.otherHttp ? ['h2', 'http/1.1'] : ['h2'];
    const server = tls.createServer({ ...secureContextOptions(files), ALPNProtocols: alpn });
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
   * Serves a connection accepted elsewhere: the peer port's listener (services/peer/transport.ts)
   * lets a peer in only once it has checked its TLS. Its sessions are probed as a TCP port's.
   * A socket its caller paused (to peek at its first bytes and put them back) is read from here.
   */
  inject(socket: net.Socket): void {
    // Shut down, it takes nothing more, as a closed listener (an in-process pipe's dial).
    if (this.stopped) return void socket.destroy();
    this.probeTimer ??= setInterval(() => this.probeIdle(), PROBE_TICK_MS).unref();
    this.accept(socket);
    socket.resume();
  }

  /** A connection (plaintext, or TLS after its handshake) becomes an HTTP/2 session. */
  private accept(socket: net.Socket): void {
    const alpn = (socket as tls.TLSSocket).alpnProtocol;
    const other = this.opts.otherHttp;
    if (other && (socket as tls.TLSSocket).encrypted) {
      // ALPN decided: h2 (gRPC, or JSON over HTTP/2), else HTTP/1.1 (clients that offer none).
      if (alpn !== 'h2') return other.connection(socket);
    } else if (other) {
      return this.sniff(socket, other);
    }
    if ((socket as tls.TLSSocket).encrypted && alpn !== 'h2') {
      // A TLS client that negotiated no ALPN protocol (or http/1.1): not gRPC.
      this.handshakeLog?.warn({ peer: `${socket.remoteAddress}:${socket.remotePort}`, alpn }, 'client TLS connection refused: it did not negotiate HTTP/2 (ALPN h2)');
      socket.destroy();
      return;
    }
    this.sessions.add(new ServerSession(socket, this));
  }

  /**
   * A plaintext connection is HTTP/2 if it opens with the preface ("PRI * HTTP/2.0"), and
   * HTTP/1.x otherwise. One look at the first bytes per connection, none per call.
   */
  private sniff(socket: net.Socket, other: OtherHttp): void {
    let head: Buffer = Buffer.alloc(0);
    // Neither side's bounds apply before one of them has the connection: one that sends
    // nothing (or only "P") was kept until the client left.
    const undecided = setTimeout(() => socket.destroy(), other.sniffTimeoutMs ?? IDLE_PROBE_MS + PROBE_TIMEOUT_MS).unref();
    const onData = (chunk: Buffer) => {
      head = head.length ? Buffer.concat([head, chunk]) : chunk;
      // 'P' alone could still be POST, PUT or PATCH.
      if (head.length < 3 && head[0] === 0x50) return;
      clearTimeout(undecided);
      socket.off('data', onData);
      socket.off('close', onGone);
      socket.off('error', onGone);
      socket.pause();
      socket.unshift(head);
      if (head.subarray(0, 3).toString('latin1') === 'PRI') {
        this.sessions.add(new ServerSession(socket, this));
        socket.resume();
      } else {
        other.connection(socket);
      }
    };
    const onGone = () => {
      clearTimeout(undecided);
      socket.off('data', onData);
      socket.destroy();
    };
    socket.on('data', onData);
    socket.once('close', onGone);
    socket.once('error', onGone);
  }

  /** @internal SessionHandler: a session ended. */
  onClose(session: ServerSession): void {
    this.sessions.delete(session);
    if (this.sessions.size === 0) this.drained?.();
  }

  private probeIdle(): void {
    const now = Date.now();
    for (const s of this.sessions) s.probe(now, IDLE_PROBE_MS, PROBE_TIMEOUT_MS);
  }

  /** Stops accepting connections, lets calls finish for up to `graceMs`, then cuts the rest. */
  shutdown(graceMs: number): Promise<void> {
    this.stopped = true;
    if (this.probeTimer) clearInterval(this.probeTimer);
    this.probeTimer = undefined;
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
      // net.Server.close calls back once every connection, so every session, has ended;
      // without a listener (connections injected only: in-process pipes) the last session does.
      if (this.listener?.listening) this.listener.close(done);
      else if (this.sessions.size === 0) done();
      else this.drained = done;
      for (const s of this.sessions) s.close();
    });
  }

  /** @internal SessionHandler: a new stream. */
  onStream(stream: ServerStream, headers: RequestHeaders): void {
    const path = String(headers[':path'] ?? '');
    const contentType = headers['content-type'];
    if (headers[':method'] !== 'POST' || typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      if (this.opts.otherHttp) return this.opts.otherHttp.stream(stream, headers);
      // Not a gRPC request (grpc-go answers these with HTTP errors too).
      stream.respond(NOT_GRPC_BLOCK, true);
      return;
    }
    const route = this.routes.get(path);
    if (!route) return this.refuse(stream, this.unknown(path));
    const call = new ServerCall<any, any>(stream, headers, route.method);
    stream.onclose = () => call.onStreamClose();
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
    stream.ondata = (chunk: Buffer) => {
      if (!call.isFinished) reader.push(chunk);
    };
    stream.onend = () => {
      if (route.kind === 'bidi' || route.kind === 'clientStream') {
        if (!call.isFinished) call.emit('end');
      } else if (!started && !call.isFinished) {
        call.fail({ code: Status.INTERNAL, details: 'grpc: error while reading the request: the stream ended before its message' });
      }
    };
    if (route.method.responseStream) stream.ondrain = () => call.emit('drain');
    if (route.kind === 'bidi' || route.kind === 'clientStream') this.dispatch(route, call);
  }

  private dispatch(route: Route, call: ServerCall<any, any>): void {
    try {
      if (route.kind === 'unary' || route.kind === 'clientStream') route.handler(call, (err, value, written) => call.respond(err, value, written));
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

  private refuse(stream: ServerStream, s: StatusLike): void {
    stream.respond(encodeHeaders({ ...RESPONSE_HEADERS, ...statusTrailers(s.code ?? Status.UNKNOWN, s.details ?? '') }), true);
  }
}

function noCallback(): void {}

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
