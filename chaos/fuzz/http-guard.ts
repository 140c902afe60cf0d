// The scratch guard for the JSON gateway's HTTP/1.x cases. A JSON body is checked as the
// gateway will read it: routes.ts's routeOf names the gRPC method, proto-json.ts's readRequest
// (with the field names as written) turns the body into the wire bytes the service gets, and
// scratch-guard.ts's staysInScratch judges those. Which bytes of a connection are a request's
// body is node's HTTP parser's call (Content-Length, chunked encoding, pipelining, and every way
// the fuzzer breaks them), so a whole connection is also checked by replaying its bytes into
// the gateway's own http1Server (exchanges.ts) in this process: every request that arrives
// whole there, with the body node hands it, must stay in scratch. That server never answers, so
// it reads at least everything the real one does (an answer with `Connection: close` only ends
// a connection sooner).
import net from 'node:net';
import type protobuf from 'protobufjs';
import { http1Server } from '../../services/gateway/json/exchanges.js';
import { JsonRequestError, readRequest, typeAsWritten } from '../../services/gateway/json/proto-json.js';
import { routeOf } from '../../services/gateway/json/routes.js';
import { rootAsWritten } from '../../shared/proto/index.js';
import { staysInScratch } from './scratch-guard.js';

export interface GatewayRoute {
  /** The HTTP path (`/v3/kv/put`). */
  http: string;
  /** The gRPC method (`/etcdserverpb.KV/Put`). */
  grpc: string;
  /** The request type, field names as written (the gateway's). */
  requestType: protobuf.Type;
  /** Watch and LeaseKeepAlive: the body holds one request after another. */
  requestStream: boolean;
}

const routes = new Map<string, GatewayRoute>();
/** The route an HTTP path names (`/v3beta/` included), as the gateway finds it. */
export function gatewayRoute(httpPath: string): GatewayRoute | undefined {
  const grpc = routeOf(httpPath);
  if (!grpc) return undefined;
  let r = routes.get(grpc);
  if (!r) {
    const [service, name] = grpc.slice(1).split('/') as [string, string];
    const m = rootAsWritten().lookupService(service).methods[name]!;
    m.resolve();
    r = { http: httpPath, grpc, requestType: typeAsWritten(m.resolvedRequestType!.fullName.slice(1)), requestStream: !!m.requestStream };
    routes.set(grpc, r);
  }
  return r;
}

/**
 * True when `body`, as the body of `method` `url`, cannot change anything outside the scratch
 * space. A unary route reads the body's first JSON value (json.Decoder, as etcd's gateway);
 * a body that does not read is refused by the gateway, so it is safe. The streamed routes
 * (Watch, LeaseKeepAlive) write nothing.
 */
export function httpBodyStaysInScratch(method: string, url: string, body: Buffer): boolean {
  if (method !== 'POST') return true;
  const q = url.indexOf('?');
  const route = gatewayRoute(q === -1 ? url : url.slice(0, q));
  if (!route || route.requestStream) return true;
  let wire: Buffer;
  try {
    wire = readRequest(route.requestType, body.toString('utf8'), 0)?.wire ?? Buffer.alloc(0);
  } catch (err) {
    if (err instanceof JsonRequestError) return true;
    // Anything else the gateway would not survive either (the fuzzer's job is to see that);
    // nothing of it reaches a service.
    return true;
  }
  return staysInScratch(route.grpc, wire);
}

interface Parsed {
  method: string;
  url: string;
  body: Buffer;
}

/** The gateway's HTTP/1 server, fed the fuzzer's connections on a loopback port of its own. */
class Mirror {
  private readonly pending = new Map<number, { parsed: Parsed[]; done: (p: Parsed[] | undefined) => void }>();
  /** Requests read on a connection no parse() call knew (cannot happen; counted so that the guard fails closed). */
  private strays = 0;
  private readonly listener: net.Server;
  private readonly ready: Promise<number>;

  constructor() {
    const http = http1Server({
      handle: (ex) => {
        const chunks: Buffer[] = [];
        const port = (ex.peer.match(/:(\d+)$/) ?? [])[1];
        ex.onData((c) => chunks.push(c));
        ex.onEnd(() => {
          const p = this.pending.get(Number(port));
          if (p) p.parsed.push({ method: ex.method, url: ex.url, body: Buffer.concat(chunks) });
          else this.strays++;
          // Answered at once: the server serves a connection's pipelined requests one at a
          // time, so the next is read only after this one's answer. Where the real gateway
          // would close the connection instead, this copy reads on: it sees at least as much.
          ex.respond(200, {});
          ex.end();
        });
      },
      // The real server proxies these; what a WebSocket carries is not guarded here, and the
      // fuzzer sends no WebSocket frames after an upgrade.
      acceptsWebSocket: () => false,
      maxMessageBytes: 2 * 1024 * 1024,
    });
    this.listener = net.createServer((socket) => {
      const port = socket.remotePort!;
      // After the requests' own 'end' events, which node may still have queued.
      socket.once('close', () =>
        setImmediate(() => {
          const p = this.pending.get(port);
          this.pending.delete(port);
          p?.done(p.parsed);
        }),
      );
      http.connection(socket);
    });
    this.listener.unref();
    this.ready = new Promise((resolve, reject) => {
      this.listener.once('error', reject);
      this.listener.listen(0, '127.0.0.1', () => resolve((this.listener.address() as net.AddressInfo).port));
    });
  }

  /** The requests node reads whole from `bytes` (undefined: it did not finish in time). */
  async parse(bytes: Buffer): Promise<Parsed[] | undefined> {
    const port = await this.ready;
    const strays = this.strays;
    return new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      const timer = setTimeout(() => finish(undefined), 5000);
      let settled = false;
      const finish = (p: Parsed[] | undefined) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        socket.destroy();
        resolve(this.strays === strays ? p : undefined);
      };
      socket.on('error', () => {});
      socket.on('data', () => {});
      socket.on('connect', () => {
        this.pending.set(socket.localPort!, { parsed: [], done: finish });
        socket.end(bytes);
      });
    });
  }

  close(): void {
    this.listener.close();
  }
}

let mirror: Mirror | undefined;

/**
 * True when no request node's parser reads whole from the connection `bytes` would change
 * anything outside the scratch space. A connection the client port takes for HTTP/2 (it opens
 * with "PRI") carries no HTTP/1 request; the HTTP/1 cases never send JSON in HTTP/2 frames.
 */
export async function connectionStaysInScratch(bytes: Buffer): Promise<boolean> {
  if (bytes.subarray(0, 3).toString('latin1') === 'PRI') return true;
  const parsed = await (mirror ??= new Mirror()).parse(bytes);
  return parsed !== undefined && parsed.every((p) => httpBodyStaysInScratch(p.method, p.url, p.body));
}

/** Stops the mirror (it does not keep the process alive meanwhile). */
export function closeHttpGuard(): void {
  mirror?.close();
  mirror = undefined;
}
