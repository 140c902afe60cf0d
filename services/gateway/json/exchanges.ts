// The JSON gateway's two transports, each as an HttpExchange: HTTP/1.x on node's http server
// (keep-alive, pipelining, chunked bodies, Expect: 100-continue and HTTP/1.0 are node's), and
// HTTP/2 requests that are not gRPC, on the client port's own HTTP/2 session (curl over TLS
// negotiates h2 by ALPN and sends JSON on it, as etcd serves it).
import http from 'node:http';
import type net from 'node:net';
import type tls from 'node:tls';
import { encodeHeaders, type RequestHeaders } from '../../../shared/grpc/hpack.js';
import type { SessionStream } from '../../../shared/grpc/http2-session.js';
import type { HttpExchange } from './gateway.js';

/** A slow or stalled client is cut: headers within 10 s, the whole request within 60 s. */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 60_000;

function commonNameOf(socket: net.Socket): string | undefined {
  const s = socket as tls.TLSSocket;
  if (!s.encrypted || !s.authorized) return undefined;
  const cn = s.getPeerCertificate()?.subject?.CN as string | string[] | undefined;
  return (Array.isArray(cn) ? cn[cn.length - 1] : cn) || undefined;
}

const peerOf = (s: net.Socket) => (s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : 'unknown');

/** node's http server, fed the connections the client port hands over. */
export function http1Server(handle: (ex: HttpExchange) => void): http.Server {
  // The Host check is Go's (below), with Go's answer; node's would be an empty 400.
  const server = http.createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS, keepAliveTimeout: 30_000, requireHostHeader: false }, (req, res) => serve(req, res, false));
  // Expect: 100-continue is answered when the body is read (as Go's server does), not at once.
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => serve(req, res, true));
  // One request at a time per connection, as Go's server reads the next request only once the
  // handler of the one before has returned: pipelined requests are served in order (a range
  // sent after a put sees it), not side by side. Node parses ahead; the later ones wait here.
  const queues = new WeakMap<net.Socket, (() => void)[]>();
  function serve(req: http.IncomingMessage, res: http.ServerResponse, expectsContinue: boolean): void {
    const socket = req.socket;
    let queue = queues.get(socket);
    const run = () => {
      let done = false;
      const next = () => {
        if (done) return;
        done = true;
        const q = queues.get(socket)!;
        q.shift();
        if (socket.destroyed) q.length = 0;
        q[0]?.();
      };
      res.once('finish', next);
      res.once('close', next);
      start(req, res, expectsContinue);
    };
    if (!queue) queues.set(socket, (queue = []));
    queue.push(run);
    if (queue.length === 1) run();
  }
  function start(req: http.IncomingMessage, res: http.ServerResponse, expectsContinue: boolean): void {
    if (req.httpVersion === '1.1' && req.headers.host === undefined) {
      const text = '400 Bad Request: missing required Host header';
      res.writeHead(400, 'Bad Request: missing required Host header', { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
      res.end(text);
      return;
    }
    handle(new Http1Exchange(req, res, expectsContinue));
  }
  // Go's server answers a request line it cannot parse with 400 and closes; node's default
  // writes nothing once a response was written on the connection. Go writes it after the
  // answers to the requests before it (pipelining), so this waits for them.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : '400 Bad Request';
    afterResponses(socket, () => {
      if (!socket.writable) return socket.destroy();
      socket.end(`HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n${status}`);
    });
  });
  return server;
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
