// The node's HTTP endpoints on --metrics-addr: /metrics (every component's registry, merged),
// /healthz and /readyz, and the operator console (supervisor/console/). Served by the
// supervisor, whose event loop does nothing heavy, so the probes answer at once even while
// storage replays a long WAL. When the client port has TLS, the console is served over https
// with the client port's certificate on the same address; the probes answer both there and
// in plain HTTP (the first byte of a connection tells a TLS handshake from a request), so a
// scraper or kubelet configured for http keeps working.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { CONTENT_TYPE } from '../shared/metrics.js';
import { splitHostPort } from '../shared/config.js';
import { secureContextOptions, TlsFileWatch, type ClientTlsFiles } from '../shared/tls/client-port.js';

/** A probe's answer: ok, or the one-line reason it is not. */
export interface Probe {
  ok: boolean;
  reason: string;
}

export interface Endpoints {
  metrics(): Promise<string>;
  health(): Probe;
  ready(): Probe;
  /** The console: handles the request if the path is its own (/, /static/*, /api/*). */
  console?(req: http.IncomingMessage, res: http.ServerResponse, url: URL): boolean;
}

export interface HttpOptions {
  /** The client port's certificate and key: the console is served over https with them. */
  tls?: ClientTlsFiles;
}

export interface ObservabilityServer {
  /** Stops listening and drops every open connection. */
  close(): void;
}

/** Listens on host:port; rejects with the listen error (e.g. EADDRINUSE). */
export function serveHttp(addr: string, endpoints: Endpoints, onError: (err: Error) => void, opts: HttpOptions = {}): Promise<ObservabilityServer> {
  const handler = (secure: boolean) => (req: http.IncomingMessage, res: http.ServerResponse) => {
    const path = (req.url ?? '').split('?', 1)[0]!;
    const route = ROUTES[path as keyof typeof ROUTES];
    if (!route) {
      if (endpoints.console) {
        if (opts.tls && !secure) {
          // The console carries passwords and tokens: over TLS only when the node has a certificate.
          res.writeHead(308, { Location: `https://${req.headers.host ?? addr}${req.url ?? '/'}`, 'Content-Length': 0 });
          return res.end();
        }
        let url: URL;
        try {
          url = new URL(req.url ?? '/', 'http://console');
        } catch {
          return send(res, 400, `malformed request target\n`);
        }
        if (endpoints.console(req, res, url)) return;
      }
      return send(res, 404, `not found: ${path}; endpoints: /metrics, /healthz, /readyz${endpoints.console ? ', / (the console)' : ''}\n`);
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      return send(res, 405, `method ${req.method} not allowed on ${path}\n`);
    }
    if (route === 'metrics') {
      endpoints.metrics().then(
        (text) => send(res, 200, text, CONTENT_TYPE),
        (err: Error) => {
          onError(err);
          send(res, 500, `metrics failed: ${err.message}\n`);
        },
      );
      return;
    }
    const probe = route === 'health' ? endpoints.health() : endpoints.ready();
    send(res, probe.ok ? 200 : 503, probe.ok ? 'ok\n' : `${probe.reason}\n`);
  };
  const plain = http.createServer(handler(false));
  // Probes and scrapers keep connections open; a stop must not wait for them.
  plain.keepAliveTimeout = 5000;
  const [host, port] = splitHostPort(addr)!;

  let listener: net.Server = plain;
  let secure: https.Server | undefined;
  const sockets = new Set<net.Socket>();
  if (opts.tls) {
    // The browser presents no client certificate: the client port's CA is not asked for here.
    const files = { cert: opts.tls.cert, key: opts.tls.key };
    const tlsOpts = () => ({ ...secureContextOptions(files), ALPNProtocols: ['http/1.1'] });
    secure = https.createServer(tlsOpts(), handler(true));
    secure.keepAliveTimeout = 5000;
    const watch = new TlsFileWatch(files, () => secure!.setSecureContext(tlsOpts()), onError);
    listener = net.createServer({ pauseOnConnect: true }, (socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => socket.destroy());
      // Until its first byte a connection belongs to no server, whose timeouts would cut it.
      socket.setTimeout(10_000, () => socket.destroy());
      socket.once('data', (first) => {
        socket.setTimeout(0);
        socket.pause();
        socket.unshift(first);
        if (first[0] === 0x16) {
          watch.check();
          secure!.emit('connection', socket);
        } else plain.emit('connection', socket);
        process.nextTick(() => socket.resume());
      });
      socket.resume();
    });
  }
  return new Promise((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(port, host, () => {
      listener.off('error', reject);
      listener.on('error', onError);
      resolve({
        close() {
          plain.closeAllConnections();
          secure?.closeAllConnections();
          for (const s of sockets) s.destroy();
          listener.close();
        },
      });
    });
  });
}

const ROUTES = { '/metrics': 'metrics', '/healthz': 'health', '/readyz': 'ready' } as const;

function send(res: http.ServerResponse, code: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(code, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body), 'Cache-Control': 'no-store' });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}
