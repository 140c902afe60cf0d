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

/**
 * A slow or stalled client is cut (etcd's Go server has no such bound): its headers within
 * 10 s, its whole request within 30 s (a streamed route's body too: a watch's requests come in
 * one body).
 */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;

function commonNameOf(socket: net.Socket): string | undefined {
  const s = socket as tls.TLSSocket;
  if (!s.encrypted || !s.authorized) return undefined;
  const cn = s.getPeerCertificate()?.subject?.CN as string | string[] | undefined;
  return (Array.isArray(cn) ? cn[cn.length - 1] : cn) || undefined;
}

const peerOf = (s: net.Socket) => (s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : 'unknown');

/** How often node looks for requests past those bounds (its default, 30 s, would let a stalled one live up to 40 s). */
const TIMEOUT_CHECK_MS = 1000;

/**
 * node's http server, fed the connections the client port hands over. `limits`: the bounds
 * above (tests shorten them).
 */
export function http1Server(handle: (ex: HttpExchange) => void, limits = { headersMs: HEADERS_TIMEOUT_MS, requestMs: REQUEST_TIMEOUT_MS }): http.Server {
  const server = http.createServer(
    { headersTimeout: limits.headersMs, requestTimeout: limits.requestMs, connectionsCheckingInterval: Math.min(TIMEOUT_CHECK_MS, limits.headersMs), keepAliveTimeout: 30_000 },
    (req, res) => handle(new Http1Exchange(req, res)),
  );
  // node tracks connections for those bounds (and for closeAllConnections) from its
  // 'listening' event on; this server never listens (its connections come from the client
  // port), so without this no stalled request was ever cut (found while writing the port
  // fuzzer's HTTP target). exchanges.test.ts fails if a node version stops starting it so.
  server.emit('listening');
  // Go's server answers a request line it cannot parse with 400 and closes; node's default
  // writes nothing on some errors. Not once an answer has begun on the connection (a request
  // timed out while its answer streams, as a watch's does): that answer is cut instead, as
  // node's own handler does, not followed by a status line in the middle of its bytes.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
    if (!socket.writable || (socket as net.Socket & { _httpMessage?: http.ServerResponse })._httpMessage?.headersSent) return socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n${status}`);
  });
  return server;
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

  header(name: string): string | undefined {
    const v = this.req.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  }

  onData(fn: (chunk: Buffer) => void): void {
    this.dataFns.push(fn);
  }

  onEnd(fn: () => void): void {
    this.req.on('end', fn);
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
    // Trailers need chunked encoding, which an HTTP/1.0 response (without `TE: chunked`) has
    // not: Go announces them anyway and sends none; node throws at the announcement, so it is
    // left out.
    if (!this.res.useChunkedEncodingByDefault && 'Trailer' in headers) {
      const { Trailer: _, ...rest } = headers;
      headers = rest;
    }
    this.res.writeHead(status, headers);
  }

  write(chunk: string): boolean {
    return this.res.write(chunk);
  }

  end(chunk?: string, trailers?: Record<string, string>): void {
    if (trailers && this.res.useChunkedEncodingByDefault) {
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
    // HTTP/2 has no Transfer-Encoding, and names its headers in lower case.
    for (const [k, v] of Object.entries(headers)) if (k !== 'Trailer') h[k.toLowerCase()] = v;
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
