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
 * A slow or stalled client is cut (etcd's Go server has no such bound): a request's headers
 * must arrive within 10 s of the connection or of the previous answer, and its whole body (a
 * streamed route's too: a watch's requests come in one body) within 30 s of its headers.
 * node's own headersTimeout/requestTimeout are checked only for connections its server
 * accepted itself, and these come from the client port's listener, so the timers are ours.
 */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;

export interface Http1Server {
  /** Serves a connection the client port accepted (paused, its first bytes put back). */
  accept(socket: net.Socket): void;
  /** Ends every connection (the gateway is stopping). */
  close(): void;
}

/** node's http server, fed the connections the client port hands over. */
export function http1Server(handle: (ex: HttpExchange) => void): Http1Server {
  const server = http.createServer({ keepAliveTimeout: 30_000 }, (req, res) => {
    const socket = req.socket;
    clearTimeout(deadlines.get(socket));
    // The body's deadline, until the request has been read.
    if (!req.complete) {
      const body = setTimeout(() => socket.destroy(), REQUEST_TIMEOUT_MS).unref();
      deadlines.set(socket, body);
      req.once('end', () => clearTimeout(body));
      req.once('close', () => clearTimeout(body));
    }
    // The next request's headers, once this one is answered.
    res.once('finish', () => {
      if (!socket.destroyed) deadlines.set(socket, setTimeout(() => socket.destroy(), HEADERS_TIMEOUT_MS).unref());
    });
    handle(new Http1Exchange(req, res));
  });
  const deadlines = new WeakMap<net.Socket, NodeJS.Timeout>();
  // Go's server answers a request it cannot parse with 400 and closes; node's default writes
  // nothing on some errors.
  server.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
    if (!socket.writable) return socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n${status}`);
  });
  return {
    accept(socket) {
      deadlines.set(socket, setTimeout(() => socket.destroy(), HEADERS_TIMEOUT_MS).unref());
      socket.once('close', () => clearTimeout(deadlines.get(socket)));
      server.emit('connection', socket);
      socket.resume();
    },
    close() {
      server.closeAllConnections();
    },
  };
}

function commonNameOf(socket: net.Socket): string | undefined {
  const s = socket as tls.TLSSocket;
  if (!s.encrypted || !s.authorized) return undefined;
  const cn = s.getPeerCertificate()?.subject?.CN as string | string[] | undefined;
  return (Array.isArray(cn) ? cn[cn.length - 1] : cn) || undefined;
}

const peerOf = (s: net.Socket) => (s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : 'unknown');

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
    this.res.writeHead(status, headers);
  }

  write(chunk: string): boolean {
    return this.res.write(chunk);
  }

  end(chunk?: string, trailers?: Record<string, string>): void {
    if (trailers) {
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
