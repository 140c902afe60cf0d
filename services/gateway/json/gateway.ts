// etcd's HTTP/JSON gateway on the client port (etcd 3.4's grpc-gateway, embed/serve.go): every
// v3 RPC as `POST /v3/...` with a JSON body, plus GET /version, /health and /metrics. A request
// is read into the wire bytes of its gRPC message and handed to the same handler the gRPC server
// runs (GrpcServer.route), with a call object of the same surface (call.ts); the answer's wire
// bytes are written as etcd's gateway writes them: JSON, `{"result": ...}` lines for streams,
// `{"error", "message", "code"}` with grpc-gateway's HTTP status for errors.
//
// Transport-neutral: HTTP/1.1 (node's http server) and HTTP/2 requests that are not gRPC
// (exchanges.ts) both come in as an HttpExchange.
//
// One file over 500 lines on purpose: it is one request's life, target to answer (the class), and
// the Go net/http and grpc-gateway behaviours it copies on the way (paths, redirects, status
// codes, error bodies, Grpc-Timeout) are the small pure helpers that the class reads beside it.
import { Metadata, status as Status } from '@grpc/grpc-js';
import type protobuf from 'protobufjs';
import { type GrpcServer, type Route, type StatusLike } from '../../../shared/grpc/server.js';
import { GatewayCall, type CallSink } from './call.js';
import { JsonRequestError, readRequest, typeAsWritten, wireToJson } from './proto-json.js';
import { routeOf } from './routes.js';
import { rootAsWritten } from '../../../shared/proto/index.js';

/** What the gateway needs of an HTTP request and its response, whichever HTTP it came over. */
export interface HttpExchange {
  readonly method: string;
  /** The request target, query included. */
  readonly url: string;
  header(name: string): string | undefined;
  readonly peer: string;
  /** The verified client certificate's Common Name (mutual TLS), else undefined. */
  readonly commonName: string | undefined;
  /** The connection is TLS. */
  readonly secure: boolean;
  /**
   * The body comes in whole messages and ends only with the connection (WebSocket): a unary
   * call's request is its first complete JSON value.
   */
  readonly framed?: boolean;
  onData(fn: (chunk: Buffer) => void): void;
  onEnd(fn: () => void): void;
  /** The client went away, or the response ended. */
  onClose(fn: () => void): void;
  onDrain(fn: () => void): void;
  /** The body could not be read to its end (a bad chunk): `message` is Go's word for why. */
  onBodyError(fn: (message: string) => void): void;
  /** Stops reading the body (the rest is not wanted); the response can still be written. */
  discardBody(): void;
  respond(status: number, headers: Record<string, string>): void;
  write(chunk: string): boolean;
  end(chunk?: string, trailers?: Record<string, string>): void;
  readonly closed: boolean;
  readonly needDrain: boolean;
}

export interface JsonGatewayOptions {
  server: GrpcServer;
  /** The largest gRPC message a request may become (the gRPC port's receive limit). */
  maxMessageBytes: number;
  /** GET /version's answer. */
  version: { etcdserver: string; etcdcluster: string };
  /** GET /metrics's text (Prometheus exposition), as the metrics address serves it. */
  metrics(): Promise<string>;
  /** Whether auth is enabled now (a client certificate's CN is refused then, as etcd does). */
  authEnabled(): boolean;
  /** Client certificates are required on the client port (--client-tls-ca). */
  clientCertAuth: boolean;
  /** Resolves once this node could serve a linearizable read (GET /health). */
  readable(): Promise<void>;
  /** Where a request that broke the gateway's own code is reported. */
  log?: { error(obj: object, msg: string): void };
}

/** etcd's gateway reads whole bodies; this bounds one: base64 makes bytes 4/3 as long. */
const BODY_FACTOR = 3;

const CORS = {
  'Access-Control-Allow-Headers': 'accept, content-type, authorization',
  'Access-Control-Allow-Methods': 'POST, GET, OPTIONS, PUT, DELETE',
  'Access-Control-Allow-Origin': '*',
};
const JSON_HEADERS = { ...CORS, 'Content-Type': 'application/json' };
const GRPC_MD = { 'Grpc-Metadata-Content-Type': 'application/grpc' };

/** grpc-gateway's HTTPStatusFromCode (500 for any other code). */
const HTTP_STATUS = new Map<number, number>([
  [Status.OK, 200],
  [Status.CANCELLED, 408],
  [Status.INVALID_ARGUMENT, 400],
  [Status.OUT_OF_RANGE, 400],
  [Status.DEADLINE_EXCEEDED, 504],
  [Status.NOT_FOUND, 404],
  [Status.ALREADY_EXISTS, 409],
  [Status.ABORTED, 409],
  [Status.PERMISSION_DENIED, 403],
  [Status.UNAUTHENTICATED, 401],
  [Status.RESOURCE_EXHAUSTED, 429],
  [Status.FAILED_PRECONDITION, 412],
  [Status.UNIMPLEMENTED, 501],
  [Status.UNAVAILABLE, 503],
]);

export function httpStatusOf(code: number): number {
  return HTTP_STATUS.get(code) ?? 500;
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  408: 'Request Timeout',
  409: 'Conflict',
  412: 'Precondition Failed',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

const quote = (s: string) => JSON.stringify(s).replace(/[<>&]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
const errorBody = (code: number, message: string) => `{"error":${quote(message)},"message":${quote(message)},"code":${code}}`;
const streamErrorBody = (code: number, message: string) => {
  const http = httpStatusOf(code);
  return `{"error":{"grpc_code":${code},"http_code":${http},"message":${quote(message)},"http_status":${quote(STATUS_TEXT[http] ?? '')}}}`;
};

/** Go's http.Error: plain text and a newline. */
function plainError(ex: HttpExchange, status: number, text: string, extra: Record<string, string> = {}, cors = true): void {
  ex.discardBody();
  const body = `${text}\n`;
  ex.respond(status, { ...(cors ? CORS : {}), ...extra, 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff', 'Content-Length': String(Buffer.byteLength(body)) });
  ex.end(body);
}

/** Go's server on a request line it cannot read (here: a path that does not unescape). */
function badRequest(ex: HttpExchange): void {
  ex.discardBody();
  ex.respond(400, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
  ex.end('400 Bad Request');
}

/** Go's http.Redirect with 301, as its ServeMux sends it. */
function redirect(ex: HttpExchange, location: string): void {
  ex.discardBody();
  const headers: Record<string, string> = { ...CORS, Location: location };
  let body = '';
  if (ex.method === 'GET' || ex.method === 'HEAD') headers['Content-Type'] = 'text/html; charset=utf-8';
  if (ex.method === 'GET') body = `<a href="${htmlEscape(location)}">Moved Permanently</a>.\n\n`;
  headers['Content-Length'] = String(Buffer.byteLength(body));
  ex.respond(301, headers);
  ex.end(body);
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&#34;', "'": '&#39;' };
const htmlEscape = (s: string) => s.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);

/** Go's url.PathUnescape of a request path, as a byte string; undefined if an escape is bad. */
export function unescapePath(raw: string): string | undefined {
  if (!raw.includes('%')) return raw;
  if (/%(?![0-9A-Fa-f]{2})/.test(raw)) return undefined;
  return raw.replace(/%([0-9A-Fa-f]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
}

/** Go's cleanPath (net/http): path.Clean, keeping a trailing slash. */
export function cleanPath(p: string): string {
  if (p === '') return '/';
  if (p[0] !== '/') p = `/${p}`;
  const out: string[] = [];
  for (const part of p.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') out.pop();
    else out.push(part);
  }
  let np = `/${out.join('/')}`;
  if (p.endsWith('/') && np !== '/') np += '/';
  return np;
}

/** Go's URL.EscapedPath of a clean path (a byte string). */
function escapePath(p: string): string {
  return p.replace(/[^A-Za-z0-9\-_.~$&+,/:;=@]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}

export class JsonGateway {
  constructor(private readonly opts: JsonGatewayOptions) {}

  /**
   * Whether etcd would hand this upgrade request to its WebSocket proxy: a /v3/ path, clean,
   * past the accessController (not OPTIONS, not a refused CN).
   */
  acceptsWebSocket(method: string, url: string, commonName: string | undefined): boolean {
    const target = requestTarget(url);
    if (!target || method === 'OPTIONS' || this.refusesCommonName(target.path, commonName)) return false;
    return target.path.startsWith('/v3/') && cleanPath(target.path) === target.path;
  }

  private refusesCommonName(path: string, commonName: string | undefined): boolean {
    return path.startsWith('/v3/') && this.opts.clientCertAuth && !!commonName && this.opts.authEnabled();
  }

  /**
   * Serves one request. Whatever throws on its way (in the gateway's code or a handler's, now
   * or in a later event of the request) fails that request with INTERNAL, and never the
   * process: the port fuzzer found such throws, each fixed where it lay; this is the floor.
   */
  handle(ex: HttpExchange): void {
    const safe = guarded(ex, (err) => this.broken(ex, err));
    try {
      this.serve(safe);
    } catch (err) {
      this.broken(ex, err);
    }
  }

  private broken(ex: HttpExchange, err: unknown): void {
    const message = (err as Error)?.message ?? String(err);
    this.opts.log?.error({ err: message, url: ex.url }, 'JSON gateway request failed in kvs code');
    try {
      if (ex.closed) return;
      ex.discardBody();
      ex.respond(500, JSON_HEADERS);
      ex.end(errorBody(Status.INTERNAL, `kvs: internal error: ${message}`));
    } catch {
      // The answer cannot be written either: the client sees its connection end.
    }
  }

  private serve(ex: HttpExchange): void {
    const target = requestTarget(ex.url);
    // A path that does not unescape is a bad request line, answered before any handler.
    if (!target) return badRequest(ex);
    const { path, query } = target;
    // etcd's accessController: /v3beta/ is rewritten to /v3/ (in requestTarget), a client
    // certificate's CN is refused with auth on, CORS headers are added, and OPTIONS is
    // answered; then Go's mux.
    if (this.refusesCommonName(path, ex.commonName)) {
      return plainError(ex, 400, 'CommonName of client sending a request against gateway will be ignored and not used as expected', {}, false);
    }
    if (ex.method === 'OPTIONS') {
      ex.discardBody();
      ex.respond(200, { ...CORS, 'Content-Length': '0' });
      return ex.end();
    }
    // Go's ServeMux redirects a path that is not clean (// . ..) to the clean one, and /v3 to
    // the subtree it names, /v3/.
    const clean = cleanPath(path);
    const cleaned = clean === '/v3' ? '/v3/' : clean !== path ? clean : undefined;
    if (cleaned !== undefined) return redirect(ex, escapePath(cleaned) + (query ? `?${query}` : ''));
    if (path === '/metrics') return this.metrics(ex);
    if (path === '/version' || path === '/health') return this.probe(ex, path);
    const grpcPath = routeOf(path);
    if (!grpcPath) {
      // grpc-gateway's mux answers under /v3/, Go's default mux elsewhere.
      return plainError(ex, 404, path.startsWith('/v3/') ? 'Not Found' : '404 page not found');
    }
    if (ex.method !== 'POST') return plainError(ex, 405, 'Method Not Allowed');
    // grpc-gateway reads Grpc-Timeout before the body (runtime.AnnotateContext).
    const timeout = gatewayTimeout(ex.header('grpc-timeout'));
    if (timeout === 'invalid') return this.fail(ex, { code: Status.INVALID_ARGUMENT, details: `invalid grpc-timeout: ${ex.header('grpc-timeout')}` }, false);
    // A deadline already past: etcd's gateway's gRPC client gives up before it sends anything.
    if (timeout !== undefined && timeout <= 0) return this.fail(ex, { code: Status.DEADLINE_EXCEEDED, details: 'context deadline exceeded' }, false);
    const route = this.opts.server.route(grpcPath);
    if (!route) return this.fail(ex, { code: Status.UNIMPLEMENTED, details: `kvs: ${grpcPath} is not served` }, false);
    if (route.method.requestStream) this.stream(ex, route);
    else this.unary(ex, route);
  }

  private metadataOf(ex: HttpExchange): Metadata {
    const md = new Metadata();
    // grpc-gateway passes Authorization through as `authorization`, and Grpc-Metadata-* headers
    // as metadata without the prefix (a token there works too).
    const auth = ex.header('authorization');
    if (auth !== undefined) md.set('authorization', auth);
    const token = ex.header('grpc-metadata-token');
    if (token !== undefined) md.set('token', token);
    return md;
  }

  private newCall(ex: HttpExchange, route: Route, sink: CallSink): GatewayCall {
    const call = new GatewayCall(sink, route.method, this.metadataOf(ex), ex.peer);
    const timeout = gatewayTimeout(ex.header('grpc-timeout'));
    if (typeof timeout === 'number' && timeout <= 2 ** 31 - 1) call.armDeadline(timeout);
    ex.onClose(() => call.transportClosed());
    return call;
  }

  /**
   * A call with one request: unary, or server-streaming (Snapshot, Observe). The body is read
   * whole, as etcd's gateway reads it (one JSON value; what follows it is ignored).
   */
  private unary(ex: HttpExchange, route: Route): void {
    const type = requestType(route);
    const limit = this.opts.maxMessageBytes * BODY_FACTOR;
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    ex.onBodyError((message) => {
      if (done) return;
      done = true;
      this.fail(ex, { code: Status.INVALID_ARGUMENT, details: message }, false);
    });
    /** The request, once its JSON value is whole (or the body ended). */
    const take = (final: boolean) => {
      let wire: Buffer;
      try {
        wire = readRequest(type, Buffer.concat(chunks).toString('latin1'), 0)?.wire ?? Buffer.alloc(0);
      } catch (err) {
        if (!(err instanceof JsonRequestError)) throw err;
        // A framed body (WebSocket) may complete the value with its next message.
        if (!final && err.message === 'unexpected EOF') return;
        done = true;
        return this.fail(ex, { code: Status.INVALID_ARGUMENT, details: err.message }, false);
      }
      if (!final && wire.length === 0 && Buffer.concat(chunks).toString('latin1').trim() === '') return;
      done = true;
      ex.discardBody();
      if (wire.length > this.opts.maxMessageBytes) return this.fail(ex, tooLarge(wire.length, this.opts.maxMessageBytes), true);
      const streamed = route.method.responseStream;
      const call = this.newCall(ex, route, this.sink(ex, route, streamed));
      if (streamed) ex.onDrain(() => call.emit('drain'));
      try {
        call.request = route.method.requestDeserialize(wire);
        route.handler(call as never, call.respond);
      } catch (err) {
        call.fail({ code: Status.UNKNOWN, details: `kvs: ${(err as Error)?.message ?? String(err)}` });
      }
    };
    ex.onData((chunk) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        done = true;
        // The body is not read further: its size stands for the message's.
        return this.fail(ex, tooLarge(size, this.opts.maxMessageBytes), true);
      }
      chunks.push(chunk);
      if (ex.framed) take(false);
    });
    ex.onEnd(() => {
      if (!done && !ex.closed) take(true);
    });
  }

  /**
   * A client-streaming or bidi call (Watch, LeaseKeepAlive): the body holds one request after
   * another, each sent to the service as it is complete. As etcd's gateway does, a first
   * request that does not read fails the call; a later one ends the requests (half-close).
   */
  private stream(ex: HttpExchange, route: Route): void {
    const type = requestType(route);
    const limit = this.opts.maxMessageBytes * BODY_FACTOR;
    let text = '';
    let at = 0;
    let call: GatewayCall | undefined;
    let ended = false;
    const halfClose = () => {
      if (ended) return;
      ended = true;
      ex.discardBody();
      if (call && !call.isFinished) call.emit('end');
    };
    const pump = (final: boolean) => {
      for (;;) {
        let next;
        try {
          next = readRequest(type, text, at);
        } catch (err) {
          if (!(err instanceof JsonRequestError)) throw err;
          // A request cut short may be completed by the next chunk.
          if (!final && err.message === 'unexpected EOF') break;
          if (!call) return void this.fail(ex, { code: Status.UNKNOWN, details: err.message }, false);
          return halfClose();
        }
        if (!next) break;
        at = next.end;
        if (next.wire.length > this.opts.maxMessageBytes) {
          if (!call) return void this.fail(ex, tooLarge(next.wire.length, this.opts.maxMessageBytes), false);
          return halfClose();
        }
        call ??= this.startStream(ex, route);
        if (call.isFinished) return;
        try {
          call.emit('data', route.method.requestDeserialize(next.wire));
        } catch (err) {
          return call.fail({ code: Status.INTERNAL, details: `grpc: error unmarshalling request: ${(err as Error).message}` });
        }
      }
      // What was read is dropped; a pending partial request stays.
      if (at > 0) {
        text = text.slice(at);
        at = 0;
      }
      if (final) {
        // An empty body opens the stream with nothing in it, as etcd's gateway does.
        call ??= this.startStream(ex, route);
        halfClose();
      }
    };
    // A body that breaks: as a request that does not read (the first fails the call, a later
    // one ends the requests).
    ex.onBodyError((message) => {
      if (ended) return;
      if (!call) return void this.fail(ex, { code: Status.UNKNOWN, details: message }, false);
      halfClose();
    });
    ex.onData((chunk) => {
      if (ended) return;
      // Bytes, one char each: a chunk may end inside a character.
      text += chunk.toString('latin1');
      if (text.length > limit) {
        if (!call) return void this.fail(ex, tooLarge(text.length, this.opts.maxMessageBytes), false);
        return halfClose();
      }
      pump(false);
    });
    ex.onEnd(() => {
      if (!ended && !ex.closed) pump(true);
    });
  }

  private startStream(ex: HttpExchange, route: Route): GatewayCall {
    const call = this.newCall(ex, route, this.sink(ex, route, true));
    ex.onDrain(() => call.emit('drain'));
    try {
      route.handler(call as never, () => {});
    } catch (err) {
      call.fail({ code: Status.UNKNOWN, details: `kvs: ${(err as Error)?.message ?? String(err)}` });
    }
    return call;
  }

  /** Writes a call's answers as JSON: one object, or `{"result": ...}` lines for a stream. */
  private sink(ex: HttpExchange, route: Route, streamed: boolean): CallSink {
    const type = responseType(route);
    let started = false;
    const start = () => {
      if (started) return;
      started = true;
      ex.respond(200, { ...JSON_HEADERS, ...GRPC_MD });
    };
    return {
      get closed() {
        return ex.closed;
      },
      get needDrain() {
        return ex.needDrain;
      },
      // These run in the service's callbacks, outside handle()'s guard: what throws here (an
      // answer that does not become JSON) fails the request, not the process.
      unary: (wire) => {
        try {
          const body = wireToJson(type, wire);
          started = true;
          ex.respond(200, { ...JSON_HEADERS, ...GRPC_MD, 'Content-Length': String(Buffer.byteLength(body)) });
          ex.end(body);
        } catch (err) {
          this.broken(ex, err);
        }
      },
      message: (wire) => {
        try {
          const line = `{"result":${wireToJson(type, wire)}}\n`;
          start();
          return ex.write(line);
        } catch (err) {
          this.broken(ex, err);
          return false;
        }
      },
      finish: (s) => {
        try {
          this.finishCall(ex, s, streamed, started, () => (started = true));
        } catch (err) {
          this.broken(ex, err);
        }
      },
    };
  }

  /** The end of a call on its sink: OK, a unary error, or a stream's error line. */
  private finishCall(ex: HttpExchange, s: StatusLike | undefined, streamed: boolean, started: boolean, markStarted: () => void): void {
    if (!s || s.code === Status.OK) {
      if (!started) {
        markStarted();
        ex.respond(200, { ...JSON_HEADERS, ...GRPC_MD });
      }
      return ex.end();
    }
    if (!streamed) return this.fail(ex, s, true);
    // grpc-gateway's stream error: an error object, with the status only if nothing was
    // written yet.
    if (!started) {
      markStarted();
      ex.respond(httpStatusOf(s.code ?? Status.UNKNOWN), JSON_HEADERS);
    }
    ex.end(streamErrorBody(s.code ?? Status.UNKNOWN, s.details ?? ''));
  }


  /**
   * An error answer. `fromService`: the call reached the service. etcd's gateway then forwards
   * the gRPC trailer its client got: over plaintext, grpc-go answers an error with trailers
   * alone, content-type among them (`Grpc-Trailer-Content-Type`); over TLS, etcd's gRPC
   * server is Go's HTTP/2 server's handler, which sends the content-type as a header, so no
   * trailer is forwarded. A request that did not read has none either.
   */
  private fail(ex: HttpExchange, s: StatusLike, fromService: boolean): void {
    const code = s.code ?? Status.UNKNOWN;
    ex.discardBody();
    const body = errorBody(code, s.details ?? s.message ?? '');
    if (fromService && !ex.secure) {
      ex.respond(httpStatusOf(code), { ...JSON_HEADERS, Trailer: 'Grpc-Trailer-Content-Type' });
      ex.end(body, { 'Grpc-Trailer-Content-Type': 'application/grpc' });
    } else {
      ex.respond(httpStatusOf(code), { ...JSON_HEADERS, 'Content-Length': String(Buffer.byteLength(body)) });
      ex.end(body);
    }
  }

  // ---------------------------------------------------------------- /version, /health, /metrics

  /** /version and /health: GET only, as etcd's handlers check. */
  private probe(ex: HttpExchange, path: string): void {
    ex.discardBody();
    if (ex.method !== 'GET') return plainError(ex, 405, 'Method Not Allowed', { Allow: 'GET' });
    if (path === '/version') {
      const body = JSON.stringify(this.opts.version);
      ex.respond(200, { ...JSON_HEADERS, 'Content-Length': String(body.length) });
      return ex.end(body);
    }
    this.health()
      .then((healthy) => {
        const body = JSON.stringify({ health: healthy ? 'true' : 'false' });
        ex.respond(healthy ? 200 : 503, { ...CORS, 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': String(body.length) });
        ex.end(body);
      })
      .catch((err) => this.broken(ex, err));
  }

  /** /metrics: any method, as Prometheus's handler serves it. */
  private metrics(ex: HttpExchange): void {
    ex.discardBody();
    this.opts.metrics().then(
      (text) => {
        ex.respond(200, { ...CORS, 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8', 'Content-Length': String(Buffer.byteLength(text)) });
        ex.end(text);
      },
      (err: Error) => plainError(ex, 500, `kvs: metrics unavailable: ${err.message}`),
    ).catch((err) => this.broken(ex, err));
  }

  /**
   * etcd's /health: false while an alarm is raised (unless excluded by name; kvs raises none,
   * maintenance.ts) or when the node cannot serve a linearizable read within a second. Both
   * are asked of the node itself, not through a client's call: etcd's check passes no auth
   * either, so a node with auth on is as healthy as it is with auth off.
   */
  private async health(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 1000)));
    try {
      return await Promise.race([this.opts.readable().then(() => true, () => false), late]);
    } finally {
      clearTimeout(timer);
    }
  }

}

const TIMEOUT_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * grpc-gateway's timeoutDecode of Grpc-Timeout: an integer (strconv.ParseInt: a sign allowed,
 * 64 bits) and a unit, in ms; 'invalid' for anything else; undefined without the header or
 * for 0.
 */
export function gatewayTimeout(value: string | undefined): number | 'invalid' | undefined {
  if (value === undefined || value === '') return undefined;
  const m = /^([+-]?\d+)([HMSmun])$/.exec(value);
  if (!m) return 'invalid';
  const n = BigInt(m[1]!);
  if (n > 2n ** 63n - 1n || n < -(2n ** 63n)) return 'invalid';
  // 0 is no deadline at all (grpc-gateway sets one only for a timeout other than 0).
  return n === 0n ? undefined : Number(n) * TIMEOUT_UNIT_MS[m[2]!]!;
}

/**
 * A request target's path (Go's URL.Path: percent-escapes undone, /v3beta/ rewritten to /v3/)
 * and query; undefined if the path does not unescape. A target in absolute form
 * (http://host/path, as proxies send it) names the path after its authority.
 */
function requestTarget(raw: string): { path: string; query: string } | undefined {
  const url = raw.replace(/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/, '');
  const q = url.indexOf('?');
  const path = unescapePath(q === -1 ? url : url.slice(0, q));
  if (path === undefined) return undefined;
  return { path: path.startsWith('/v3beta/') ? `/v3/${path.slice(8)}` : path, query: q === -1 ? '' : url.slice(q + 1) };
}

function tooLarge(size: number, max: number): StatusLike {
  return { code: Status.RESOURCE_EXHAUSTED, details: `grpc: received message larger than max (${size} vs. ${max})` };
}

const typeNames = new WeakMap<Route, { req: protobuf.Type; res: protobuf.Type }>();
function typesOf(route: Route): { req: protobuf.Type; res: protobuf.Type } {
  let t = typeNames.get(route);
  if (!t) {
    const [service, method] = route.method.path.slice(1).split('/');
    const m = typeAsWrittenService(service).methods[method];
    m.resolve();
    t = { req: typeAsWritten(m.resolvedRequestType!.fullName.slice(1)), res: typeAsWritten(m.resolvedResponseType!.fullName.slice(1)) };
    typeNames.set(route, t);
  }
  return t;
}
const requestType = (route: Route) => typesOf(route).req;
const responseType = (route: Route) => typesOf(route).res;

function typeAsWrittenService(name: string): protobuf.Service {
  return rootAsWritten().lookupService(name);
}

/** `ex`, with every callback it is given wrapped: a throw goes to `onThrow`, not the process. */
function guarded(ex: HttpExchange, onThrow: (err: unknown) => void): HttpExchange {
  const wrap =
    <A extends unknown[]>(fn: (...args: A) => void) =>
    (...args: A) => {
      try {
        fn(...args);
      } catch (err) {
        onThrow(err);
      }
    };
  const callbacks = new Set(['onData', 'onEnd', 'onClose', 'onDrain', 'onBodyError']);
  return new Proxy(ex, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== 'function') return value;
      if (callbacks.has(prop as string)) return (fn: (...args: unknown[]) => void) => value.call(target, wrap(fn));
      return value.bind(target);
    },
  });
}
