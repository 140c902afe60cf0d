// A client of etcd's HTTP/JSON gateway for the load generator (the json-* workloads): one
// HTTP/1.1 keep-alive connection per client (node's http.Agent, maxSockets 1), `POST /v3/...`
// with a JSON body. A request counts as done only if its answer is a 200 whose body parses as
// JSON; anything else rejects, and the load generator counts it as an error, not as throughput.
import http from 'node:http';

/** The same deadline as the gRPC clients' default. */
const DEADLINE_MS = 30_000;

export class JsonClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  private readonly host: string;
  private readonly port: number;

  constructor(readonly endpoint: string) {
    const at = endpoint.lastIndexOf(':');
    this.host = endpoint.slice(0, at);
    this.port = Number(endpoint.slice(at + 1));
  }

  /**
   * POSTs `body` (JSON text) to `path`; resolves with the raw response body and its parsed JSON.
   * Rejects on a status other than 200 or a body that does not parse.
   */
  post(path: string, body: string): Promise<{ raw: Buffer; json: unknown }> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          agent: this.agent,
          host: this.host,
          port: this.port,
          method: 'POST',
          path,
          timeout: DEADLINE_MS,
          headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const raw = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
            const text = raw.toString('utf8');
            if (res.statusCode !== 200) return reject(new Error(`POST ${path}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`));
            let json: unknown;
            try {
              json = JSON.parse(text);
            } catch (err) {
              return reject(new Error(`POST ${path}: the 200 answer is not JSON (${(err as Error).message}): ${text.slice(0, 200)}`));
            }
            resolve({ raw, json });
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`POST ${path}: no answer within ${DEADLINE_MS} ms`)));
      req.on('error', reject);
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}
