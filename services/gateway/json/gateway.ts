// etcd's HTTP/JSON gateway on the client port (etcd 3.4's grpc-gateway, embed/serve.go): every
// v3 RPC as `POST /v3/...` with a JSON body, plus GET /version, /health and /metrics. A request
// is read into the wire bytes of its gRPC message and handed to the same handler the gRPC server
// runs (GrpcServer.route), with a call object of the same surface (call.ts); the answer's wire
// bytes are written as etcd's gateway writes them: JSON, `{"result": ...}` lines for streams,
// `{"error", "message", "code"}` with grpc-gateway's HTTP status for errors.
//
// Transport-neutral: HTTP/1.1 (node's http server) and HTTP/2 requests that are not gRPC
// (exchanges.ts) both come in as an HttpExchange (exchange.ts). What it copies of Go's net/http
// and grpc-gateway on the way (paths, redirects, status codes, error bodies, Grpc-Timeout) is in
// go-http.ts.
import { Metadata, status as Status } from '@grpc/grpc-js';
import type protobuf from 'protobufjs';
import { type GrpcServer, type Route, type StatusLike } from '../../../shared/grpc/server.js';
import { GatewayCall, type CallSink } from './call.js';
import { JsonRequestError, readRequest, typeAsWritten, wireToJson } from './proto-json.js';
import { routeOf } from './routes.js';
import { rootAsWritten } from '../../../shared/proto/index.js';
import type { HttpExchange } from './exchange.js';
import {
  CORS,
  GRPC_MD,
  JSON_HEADERS,
  badRequest,
  cleanPath,
  errorBody,
  escapePath,
  gatewayTimeout,
  httpStatusOf,
  plainError,
  redirect,
  requestTarget,
  streamErrorBody,
  tooLarge,
} from './go-http.js';

// Exported from here before the split, so importers of gateway.js keep working.
export type { HttpExchange } from './exchange.js';
export { cleanPath, gatewayTimeout, httpStatusOf, unescapePath } from './go-http.js';

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
