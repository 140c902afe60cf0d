// A minimal gRPC client channel for unary calls, straight on node:http2: one HTTP/2 session
// (one TCP connection), each call one stream carrying one length-prefixed message. It skips
// grpc-js's call stack (resolving, retrying, load-balancing calls, metadata objects), which
// on a small VM costs ~3× the CPU per call; the load generator shares the machine with the
// servers it measures, so every microsecond it spends is taken from them.
import http2 from 'node:http2';
import { frame } from '../shared/grpc/framing.js';

export class GrpcError extends Error {
  constructor(
    readonly code: number,
    details: string,
  ) {
    super(`${code} ${details}`);
  }
}

const { NGHTTP2_CANCEL } = http2.constants;

interface Pending {
  stream: http2.ClientHttp2Stream;
  deadline: number;
}

export class UnaryGrpcChannel {
  private session: http2.ClientHttp2Session | undefined;
  private readonly pending = new Set<Pending>();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(readonly endpoint: string) {}

  private open(): http2.ClientHttp2Session {
    const s = this.session;
    if (s && !s.closed && !s.destroyed) return s;
    const session = http2.connect(`http://${this.endpoint}`, {
      settings: { enablePush: false, initialWindowSize: 1 << 22 },
    });
    session.on('error', () => {}); // surfaces on the calls' streams
    session.once('connect', () => session.setLocalWindowSize(1 << 24));
    this.session = session;
    // One timer per channel enforces the deadlines (rather than one per call).
    this.sweeper ??= setInterval(() => {
      const now = Date.now();
      for (const p of this.pending) if (now > p.deadline) p.stream.close(NGHTTP2_CANCEL);
    }, 250).unref();
    return session;
  }

  connect(timeoutMs: number): Promise<void> {
    const s = this.open();
    if (s.connecting === false) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        s.destroy();
        reject(new Error(`cannot connect to ${this.endpoint} within ${timeoutMs} ms`));
      }, timeoutMs);
      s.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
      s.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  /** `token`: sent as the `token` header (gRPC metadata) when given, as etcd's clients do. */
  unary(path: string, body: Buffer, deadlineMs: number, token?: string): Promise<Buffer> {
    const framed = frame(body);
    return new Promise((resolve, reject) => {
      let stream: http2.ClientHttp2Stream;
      try {
        const headers: http2.OutgoingHttpHeaders = {
          ':method': 'POST',
          ':path': path,
          'content-type': 'application/grpc',
          te: 'trailers',
          'grpc-timeout': `${deadlineMs}m`,
        };
        if (token !== undefined) headers.token = token;
        stream = this.open().request(headers);
      } catch (err) {
        this.session?.destroy();
        return reject(err);
      }
      const pending: Pending = { stream, deadline: Date.now() + deadlineMs };
      this.pending.add(pending);
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message = '';
      let failure: Error | undefined;
      const onHeaders = (h: http2.IncomingHttpHeaders) => {
        if (h['grpc-status'] !== undefined) {
          status = String(h['grpc-status']);
          message = decodeURIComponent(String(h['grpc-message'] ?? ''));
        }
      };
      stream.on('response', onHeaders); // a trailers-only answer carries the status here
      stream.on('trailers', onHeaders);
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', (err) => (failure = err));
      stream.on('close', () => {
        this.pending.delete(pending);
        if (status === '0') {
          const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
          if (all.length < 5 || all[0] !== 0) return reject(new Error(`bad gRPC response framing from ${this.endpoint}${path}`));
          return resolve(all.subarray(5, 5 + all.readUInt32BE(1)));
        }
        if (status !== undefined) return reject(new GrpcError(Number(status), message));
        if (Date.now() > pending.deadline) return reject(new GrpcError(4, 'deadline exceeded (client)'));
        reject(failure ?? new Error(`stream closed without a gRPC status (rst ${stream.rstCode})`));
      });
      stream.end(framed);
    });
  }

  close(): void {
    clearInterval(this.sweeper);
    // destroy, not a graceful close: nothing is pending when a client closes, and a session left
    // closing (its peer gone or stalled) was seen keeping a process spinning at exit (chaos test).
    this.session?.destroy();
    this.session = undefined;
  }
}
