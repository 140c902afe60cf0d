// The JSON gateway's transports, each as an HttpExchange: HTTP/1.x on node's http server
// (keep-alive, pipelining served in order, chunked bodies, Expect: 100-continue and HTTP/1.0,
// with Go's server's limits and answers where node's differ), WebSocket upgrades of /v3/ routes
// (websocket.ts, as etcd's wsproxy), and HTTP/2 requests that are not gRPC, on the client
// port's own HTTP/2 session (curl over TLS negotiates h2 by ALPN and sends JSON on it, as etcd
// serves it).
import http from 'node:http';
import type net from 'node:net';
import type tls from 'node:tls';
import { encodeHeaders, type RequestHeaders } from '../../../shared/http2/hpack.js';
import type { SessionStream } from '../../../shared/http2/session.js';
import type { HttpExchange } from './gateway.js';
import { commonNameOf, peerOf } from './peer.js';
import { acceptWebSocket, isWebSocketUpgrade } from './websocket.js';

/**
 * A slow or stalled client is cut (etcd's Go server has no such bound): its headers within
 * 10 s, its whole request within 30 s (a streamed route's body too: a watch's requests come in
 * one body), checked every second (node's default, 30 s, would let one live up to 40 s more).
 */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;
const TIMEOUT_CHECK_MS = 1000;

/** The bounds above; tests shorten them. */
export interface Http1Limits {
  headersMs: number;
  requestMs: number;
}

/** Go's http.DefaultMaxHeaderBytes and the 4 KiB its server reads beyond them. */
export const MAX_HEADER_BYTES = (1 << 20) + 4096;

/** Go's answer to a request it cannot read: the status (and why) as text, the connection closed. */
function goRefusal(status: string): string {
  return `HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n${status}`;
}

/** What Go's server says of what node's parser refused: its status line, and why. */
function refusalOf(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return '431 Request Header Fields Too Large';
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return '408 Request Timeout';
    case 'HPE_INVALID_HEADER_TOKEN':
      return '400 Bad Request: invalid header name';
    default:
      return '400 Bad Request';
  }
}

/** Go's chunked reader's words for a body node's parser refused midway. */
const bodyErrorOf = (err: NodeJS.ErrnoException) => (err.code === 'HPE_INVALID_CHUNK_SIZE' ? 'invalid byte in chunk length' : 'malformed chunked encoding');

/** What the HTTP/1 side needs of the gateway. */
export interface Http1Gateway {
  handle(ex: HttpExchange): void;
  /** Whether an upgrade request to `url` goes to the WebSocket proxy (a /v3/ route). */
  acceptsWebSocket(method: string, url: string, commonName: string | undefined): boolean;
  /** The largest message a WebSocket client may send. */
  readonly maxMessageBytes: number;
}

/** The client port's HTTP/1: connections handed over, and all of them closed at shutdown. */
export interface Http1Server {
  connection(socket: net.Socket): void;
  closeAll(): void;
}

/**
 * node's http server, fed the connections the client port hands over. WebSocket upgrades of
 * /v3/ routes go to the gateway's WebSocket proxy; any other upgrade request (curl --http2 asks
 * for h2c) is served as the request it is, as Go's server ignores the Upgrade header: its bytes
 * are replayed into a second server that has no upgrade handler.
 */
export function http1Server(gateway: Http1Gateway, limits: Http1Limits = { headersMs: HEADERS_TIMEOUT_MS, requestMs: REQUEST_TIMEOUT_MS }): Http1Server {
  // Shared by both servers: a connection's pipelined requests, and the exchanges by request.
  const queues = new WeakMap<net.Socket, (() => void)[]>();
  const exchanges = new WeakMap<http.IncomingMessage, Http1Exchange>();
  const webSockets = new Set<net.Socket>();

  function make(): http.Server {
    // The Host check is Go's (below), with Go's answer; node's would be an empty 400. Headers
    // may be as large as Go's server takes them (node's default is 16 KiB).
    const server = http.createServer(
      {
        headersTimeout: limits.headersMs,
        requestTimeout: limits.requestMs,
        connectionsCheckingInterval: Math.min(TIMEOUT_CHECK_MS, limits.headersMs),
        keepAliveTimeout: 30_000,
        requireHostHeader: false,
        maxHeaderSize: MAX_HEADER_BYTES,
      },
      (req, res) => serve(req, res, false),
    );
    // node tracks connections for those bounds (and for closeAllConnections) from its
    // 'listening' event on; this server never listens (its connections come from the client
    // port), so without this no stalled request was ever cut (found while writing the port
    // fuzzer's HTTP target). exchanges.test.ts fails if a node version stops starting it so.
    server.emit('listening');
    // Expect: 100-continue is answered when the body is read (as Go's server does), not at once.
    server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => serve(req, res, true));
    // Go's server answers a request line it cannot parse with 400 and closes; node's default
    // writes nothing once a response was written on the connection. Go writes it after the
    // answers to the requests before it (pipelining), so this waits for them.
    server.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
      // A body that breaks midway (a bad chunk) fails the request it belongs to, as Go's gateway
      // fails its read of the body; that answer closes the connection.
      const current = (socket as net.Socket & { _httpMessage?: http.ServerResponse })._httpMessage;
      // A request that timed out while its answer streams (a watch whose chunked body never
      // ends): the answer is cut, as node's own handler does, not followed by a status line in
      // the middle of its bytes.
      // A request that has not been answered yet is answered 408 now: waiting for the answers
      // before it would wait for its own.
      if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
        if (current?.headersSent) return socket.destroy();
        if (!socket.writable) return socket.destroy();
        return void socket.end(goRefusal(refusalOf(err)));
      }
      const ex = current?.req && !current.req.complete ? exchanges.get(current.req) : undefined;
      if (ex && err.code !== 'ERR_HTTP_REQUEST_TIMEOUT' && ex.bodyFailed(bodyErrorOf(err))) return;
      afterResponses(socket, () => {
        if (!socket.writable) return socket.destroy();
        socket.end(goRefusal(refusalOf(err)));
      });
    });
    return server;
  }

  // One request at a time per connection, as Go's server reads the next request only once the
  // handler of the one before has returned: pipelined requests are served in order (a range
  // sent after a put sees it), not side by side. Node parses ahead; the later ones wait here.
  function serve(req: http.IncomingMessage, res: http.ServerResponse, expectsContinue: boolean): void {
    queued(req.socket, res, () => start(req, res, expectsContinue));
  }
  function queued(socket: net.Socket, res: http.ServerResponse | undefined, run: () => void): void {
    let queue = queues.get(socket);
    const go = () => {
      let done = false;
      const next = () => {
        if (done) return;
        done = true;
        const q = queues.get(socket)!;
        q.shift();
        if (socket.destroyed) q.length = 0;
        q[0]?.();
      };
      if (res) {
        res.once('finish', next);
        res.once('close', next);
      }
      run();
    };
    if (!queue) queues.set(socket, (queue = []));
    queue.push(go);
    if (queue.length === 1) go();
  }
  function start(req: http.IncomingMessage, res: http.ServerResponse, expectsContinue: boolean): void {
    const http11 = req.httpVersionMajor === 1 && req.httpVersionMinor >= 1;
    const refuse = (code: number, reason: string, text: string) => {
      res.writeHead(code, reason, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close', 'Content-Length': String(text.length) });
      res.end(text);
    };
    if (http11 && req.headers.host === undefined) return refuse(400, 'Bad Request: missing required Host header', '400 Bad Request: missing required Host header');
    // Go's server takes no transfer coding but chunked (node would read "gzip, chunked" as chunked).
    const te = req.headers['transfer-encoding'];
    if (http11 && te !== undefined && te.trim().toLowerCase() !== 'chunked') return refuse(501, 'Not Implemented', 'Unsupported transfer encoding');
    const ex = new Http1Exchange(req, res, expectsContinue);
    exchanges.set(req, ex);
    gateway.handle(ex);
  }

  const plain = make();
  const main = make();
  main.on('upgrade', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    // node's server took its own error listener off the socket for the upgrade: a client that
    // resets it now (while this waits behind a pipelined request, or after a refused
    // handshake) must not be an uncaught 'error' that ends the gateway.
    socket.on('error', () => socket.destroy());
    // After the answers to the requests before it on the connection.
    queued(socket, undefined, () => {
      if (isWebSocketUpgrade(req) && gateway.acceptsWebSocket(req.method ?? 'GET', req.url ?? '/', commonNameOf(socket))) {
        const ex = acceptWebSocket(req, socket, head, gateway.maxMessageBytes);
        if (!ex) return;
        webSockets.add(socket);
        socket.once('close', () => webSockets.delete(socket));
        return gateway.handle(ex);
      }
      // Not ours to upgrade: the request again, as node read it, to the server without an
      // upgrade handler (which serves the rest of the connection too).
      queues.delete(socket);
      const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      socket.unshift(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), head]));
      plain.emit('connection', socket);
      socket.resume();
    });
  });
  return {
    connection: (socket) => {
      main.emit('connection', socket);
      socket.resume();
    },
    closeAll: () => {
      main.closeAllConnections();
      plain.closeAllConnections();
      for (const s of webSockets) s.destroy();
    },
  };
}

/** Runs `fn` once the responses in progress on `socket` are written (node assigns them in turn). */
function afterResponses(socket: net.Socket, fn: () => void): void {
  const current = (socket as net.Socket & { _httpMessage?: http.ServerResponse })._httpMessage;
  if (!current || current.writableFinished || current.destroyed) return fn();
  const next = () => setImmediate(() => afterResponses(socket, fn));
  current.once('finish', next);
  current.once('close', next);
}

class Http1Exchange implements HttpExchange {
  readonly method: string;
  readonly url: string;
  readonly peer: string;
  private discarding = false;
  private dataFns: ((c: Buffer) => void)[] = [];
  private bodyErrorFns: ((message: string) => void)[] = [];

  constructor(
    private readonly req: http.IncomingMessage,
    private readonly res: http.ServerResponse,
    /** The client waits for 100 Continue before it sends the body. */
    private expectsContinue = false,
  ) {
    this.method = req.method ?? 'GET';
    this.url = req.url ?? '/';
    this.peer = peerOf(req.socket);
    req.on('data', (c: Buffer) => {
      if (!this.discarding) for (const fn of this.dataFns) fn(c);
    });
    // A streamed response goes out as it is written.
    res.socket?.setNoDelay(true);
  }

  get commonName(): string | undefined {
    return commonNameOf(this.req.socket);
  }

  get secure(): boolean {
    return !!(this.req.socket as tls.TLSSocket).encrypted;
  }

  header(name: string): string | undefined {
    const v = this.req.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  }

  onData(fn: (chunk: Buffer) => void): void {
    this.wantBody();
    this.dataFns.push(fn);
  }

  onEnd(fn: () => void): void {
    this.wantBody();
    this.req.on('end', fn);
  }

  onBodyError(fn: (message: string) => void): void {
    this.bodyErrorFns.push(fn);
  }

  /**
   * The parser refused the rest of the body: the gateway answers (and the connection closes
   * after it). False if nobody reads the body, so there is nobody to answer.
   */
  bodyFailed(message: string): boolean {
    if (this.bodyErrorFns.length === 0 || this.res.headersSent) return false;
    this.res.shouldKeepAlive = false;
    // After the body read before the error (its 'data' events are still on their way).
    setImmediate(() => {
      for (const fn of this.bodyErrorFns) fn(message);
    });
    return true;
  }

  /** The body is read: a client waiting for 100 Continue gets it now. */
  private wantBody(): void {
    if (!this.expectsContinue) return;
    this.expectsContinue = false;
    this.res.writeContinue();
  }

  onClose(fn: () => void): void {
    this.res.on('close', fn);
  }

  onDrain(fn: () => void): void {
    this.res.on('drain', fn);
  }

  discardBody(): void {
    // The rest of the body is read and dropped, so that the connection can serve the next
    // request (a body left unread would be taken for one).
    this.discarding = true;
  }

  respond(status: number, headers: Record<string, string>): void {
    if (this.res.headersSent) return;
    // A client still waiting for 100 Continue may send its body, or the next request, after
    // this answer: the connection cannot be read on, so it is closed (as Go's server does).
    if (this.expectsContinue) headers = { ...headers, Connection: 'close' };
    // HTTP/1.0 has no chunked encoding, so no trailers (node refuses to declare one).
    if (!this.chunked && headers.Trailer !== undefined) {
      headers = { ...headers };
      delete headers.Trailer;
    }
    this.res.writeHead(status, headers);
  }

  /** The response can be chunked (and carry trailers): HTTP/1.1 and later. */
  private get chunked(): boolean {
    return this.req.httpVersionMajor > 1 || (this.req.httpVersionMajor === 1 && this.req.httpVersionMinor >= 1);
  }

  write(chunk: string): boolean {
    return this.res.write(chunk);
  }

  end(chunk?: string, trailers?: Record<string, string>): void {
    if (trailers && this.chunked) {
      if (chunk) this.res.write(chunk);
      this.res.addTrailers(trailers);
      this.res.end();
    } else {
      this.res.end(chunk);
    }
  }

  get closed(): boolean {
    return this.res.writableEnded || this.res.destroyed;
  }

  get needDrain(): boolean {
    return this.res.writableNeedDrain;
  }
}

/** An HTTP/2 request that is not gRPC, on the client port's session. */
export class Http2Exchange implements HttpExchange {
  readonly method: string;
  readonly url: string;
  readonly peer: string;
  private discarding = false;
  private dataFns: ((c: Buffer) => void)[] = [];
  private endFns: (() => void)[] = [];
  private closeFns: (() => void)[] = [];
  private drainFns: (() => void)[] = [];
  private ended = false;

  constructor(
    private readonly stream: SessionStream,
    private readonly headers: RequestHeaders,
  ) {
    this.method = String(headers[':method'] ?? 'GET');
    this.url = String(headers[':path'] ?? '/');
    this.peer = peerOf(stream.session.socket);
    stream.ondata = (c) => {
      if (!this.discarding) for (const fn of this.dataFns) fn(c);
    };
    stream.onend = () => {
      for (const fn of this.endFns) fn();
    };
    stream.onclose = () => {
      this.ended = true;
      for (const fn of this.closeFns) fn();
    };
    stream.ondrain = () => {
      for (const fn of this.drainFns) fn();
    };
  }

  get commonName(): string | undefined {
    return commonNameOf(this.stream.session.socket);
  }

  get secure(): boolean {
    return !!(this.stream.session.socket as tls.TLSSocket).encrypted;
  }

  header(name: string): string | undefined {
    const v = this.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  }

  onData(fn: (chunk: Buffer) => void): void {
    this.dataFns.push(fn);
  }
  onEnd(fn: () => void): void {
    this.endFns.push(fn);
  }
  onClose(fn: () => void): void {
    this.closeFns.push(fn);
  }
  onDrain(fn: () => void): void {
    this.drainFns.push(fn);
  }
  /** HTTP/2 frames the body: a stream cut short is reset, not a body error. */
  onBodyError(): void {}
  discardBody(): void {
    this.discarding = true;
  }

  respond(status: number, headers: Record<string, string>): void {
    const h: Record<string, string | number> = { ':status': status };
    // HTTP/2 has no Transfer-Encoding nor Connection, and names its headers in lower case.
    for (const [k, v] of Object.entries(headers)) if (k !== 'Trailer' && k !== 'Connection') h[k.toLowerCase()] = v;
    this.stream.respond(encodeHeaders(h));
  }

  write(chunk: string): boolean {
    return this.stream.write(Buffer.from(chunk));
  }

  end(chunk?: string, trailers?: Record<string, string>): void {
    if (this.ended) return;
    this.ended = true;
    if (chunk) this.stream.write(Buffer.from(chunk));
    const t = trailers ? Object.fromEntries(Object.entries(trailers).map(([k, v]) => [k.toLowerCase(), v])) : undefined;
    this.stream.end(t ? encodeHeaders(t) : undefined);
  }

  get closed(): boolean {
    return this.ended || this.stream.closed;
  }

  get needDrain(): boolean {
    return this.stream.writableNeedDrain;
  }
}
