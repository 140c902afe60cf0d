// The node's HTTP observability endpoints on --metrics-addr: /metrics (every component's
// registry, merged), /healthz and /readyz. Served by the supervisor, whose event loop does
// nothing heavy, so the probes answer at once even while storage replays a long WAL.
import http from 'node:http';
import { CONTENT_TYPE } from '../shared/metrics.js';
import { splitHostPort } from '../shared/config.js';

/** A probe's answer: ok, or the one-line reason it is not. */
export interface Probe {
  ok: boolean;
  reason: string;
}

export interface Endpoints {
  metrics(): Promise<string>;
  health(): Probe;
  ready(): Probe;
}

/** Listens on host:port; rejects with the listen error (e.g. EADDRINUSE). */
export function serveHttp(addr: string, endpoints: Endpoints, onError: (err: Error) => void): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?', 1)[0];
    const route = ROUTES[path as keyof typeof ROUTES];
    if (!route) return send(res, 404, `not found: ${path}; endpoints: /metrics, /healthz, /readyz\n`);
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
  });
  // Probes and scrapers keep connections open; a stop must not wait for them.
  server.keepAliveTimeout = 5000;
  const [host, port] = splitHostPort(addr)!;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      server.on('error', onError);
      resolve(server);
    });
  });
}

const ROUTES = { '/metrics': 'metrics', '/healthz': 'health', '/readyz': 'ready' } as const;

function send(res: http.ServerResponse, code: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(code, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body), 'Cache-Control': 'no-store' });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}

