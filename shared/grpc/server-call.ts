// A call on the client port's gRPC server (server.ts) as its handlers see it: the subset of
// grpc-js's server-call surface they use (`call.request`, `cb(err, res)`, `write`/`end`,
// events, `emit('error', status)`), the response's framing and status trailers, and the
// base the JSON gateway's calls share (services/gateway/json/call.ts).
import tls from 'node:tls';
import { EventEmitter } from 'node:events';
import { Metadata, status as Status, type MethodDefinition } from '@grpc/grpc-js';
import { writeMessage } from './framing.js';
import { encodeHeaders, type RequestHeaders } from '../http2/hpack.js';
import type { SessionStream as ServerStream } from '../http2/session.js';

/** A gRPC status as handlers give it (grpc-js's ServiceError/StatusObject shape). */
export interface StatusLike {
  code?: number;
  details?: string;
  message?: string;
}

/**
 * A unary handler's answer. `written`, with a response: called once the response's bytes are
 * in the socket, so that the handler may reuse its buffer (not called if the call ends first).
 */
export type UnaryCallback<Res> = (err: StatusLike | null | undefined, value?: Res, written?: () => void) => void;

export const RESPONSE_HEADERS = {
  ':status': 200,
  'content-type': 'application/grpc',
  'grpc-accept-encoding': 'identity,deflate,gzip',
};
/** The constant header blocks, HPACK-encoded once. */
const RESPONSE_BLOCK = encodeHeaders(RESPONSE_HEADERS);
const OK_TRAILERS_BLOCK = encodeHeaders({ 'grpc-status': '0' });

export function statusTrailers(code: number, details: string): Record<string, string> {
  return { 'grpc-status': String(code), 'grpc-message': encodeGrpcMessage(details) };
}

/** grpc-message is percent-encoded (gRPC's HTTP/2 protocol): bytes outside 0x20–0x7E and '%'. */
export function encodeGrpcMessage(text: string): string {
  let plain = true;
  for (let i = 0; i < text.length && plain; i++) {
    const c = text.charCodeAt(i);
    plain = c >= 0x20 && c <= 0x7e && c !== 0x25;
  }
  if (plain) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}


const TIMEOUT_UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** grpc-timeout ("<digits><unit>") in milliseconds, or undefined if absent or malformed. */
export function parseTimeout(value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string') return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(value);
  return m ? Number(m[1]) * TIMEOUT_UNITS[m[2]] : undefined;
}

export type Method = MethodDefinition<any, any>;
export type Handler = (call: ServerCall<any, any>, cb: UnaryCallback<any>) => void;

/** A method the server serves: the JSON gateway calls the same handlers (services/gateway/json). */
export interface Route {
  method: Method;
  handler: Handler;
  kind: 'unary' | 'serverStream' | 'clientStream' | 'bidi';
}

/**
 * What every server call shares, whichever transport carries it (server.ts's HTTP/2 gRPC, the
 * JSON gateway's HTTP): the deadline, grpc-js's `emit('error', status)` convention, and the end
 * of a call its client went away from. A transport implements `fail`.
 */
export abstract class CallBase extends EventEmitter {
  cancelled = false;
  protected finished = false;
  private closed = false;
  private deadlineTimer: NodeJS.Timeout | undefined;
  private deadline: Date | undefined;

  /** Ends the call with `err` as its status. */
  abstract fail(err: StatusLike): void;

  /** grpc-js's convention: emitting 'error' on a server stream ends it with that status. */
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (event === 'error') {
      this.fail((args[0] ?? {}) as StatusLike);
      if (this.listenerCount('error') === 0) return false;
    }
    return super.emit(event, ...args);
  }

  /** @internal */
  armDeadline(ms: number): void {
    this.deadline = new Date(Date.now() + ms);
    this.deadlineTimer = setTimeout(() => {
      if (this.finished) return;
      this.cancelled = true;
      this.fail({ code: Status.DEADLINE_EXCEEDED, details: 'context deadline exceeded' });
      super.emit('cancelled', 'deadline');
    }, ms);
    this.deadlineTimer.unref();
  }

  protected clearDeadline(): void {
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
  }

  /** @internal the transport closed: a call that had not ended was cancelled by its client. */
  transportClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.clearDeadline();
    if (!this.finished) {
      this.finished = true;
      this.cancelled = true;
      super.emit('cancelled', 'cancelled');
    }
    super.emit('close');
  }

  /** @internal */
  get isFinished(): boolean {
    return this.finished;
  }

  /** The request's deadline (grpc-js's Deadline: Infinity when the client set none). */
  getDeadline(): Date | number {
    return this.deadline ?? Infinity;
  }
}

/**
 * One call on the client port. Unary and server-streaming handlers get it with `request`
 * set; bidi handlers read 'data' events. The first write sends the response headers; a status
 * (OK from end(), or an error from emit('error', status) or a unary callback) ends the call.
 */
export class ServerCall<Req = unknown, Res = unknown> extends CallBase {
  request!: Req;
  private headersSent = false;
  private meta: Metadata | undefined;

  constructor(
    private readonly stream: ServerStream,
    private readonly headers: RequestHeaders,
    private readonly method: Method,
  ) {
    super();
  }

  /** The request's metadata (custom headers), built on first use. */
  get metadata(): Metadata {
    return (this.meta ??= Metadata.fromHttp2Headers(this.headers as Record<string, string | string[]>));
  }

  getPath(): string {
    return this.method.path;
  }

  getPeer(): string {
    const s = this.stream.session.socket;
    return s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : 'unknown';
  }

  /**
   * The Common Name of the client certificate verified in the TLS handshake (mutual TLS), or
   * undefined without one (plaintext, or TLS without --client-tls-ca).
   */
  get peerCommonName(): string | undefined {
    const peer = this.stream.session;
    if (peer.commonName === undefined) {
      const s = peer.socket as tls.TLSSocket;
      const cert = s.encrypted && s.authorized ? s.getPeerCertificate() : undefined;
      // A subject with several CNs: Go's x509 (so etcd) keeps the last one.
      const cn = cert?.subject?.CN as string | string[] | undefined;
      peer.commonName = (Array.isArray(cn) ? cn[cn.length - 1] : cn) || null;
    }
    return peer.commonName ?? undefined;
  }

  get writable(): boolean {
    return !this.finished && !this.stream.closed;
  }

  get destroyed(): boolean {
    return this.stream.closed;
  }

  get writableNeedDrain(): boolean {
    return this.stream.writableNeedDrain;
  }

  /** Sends one response message; false means "wait for 'drain'", as a Writable's write. */
  write(message: Res): boolean {
    if (this.finished || this.gone()) return false;
    this.sendHeaders();
    return writeMessage(this.stream, this.method.responseSerialize(message) as Buffer);
  }

  /**
   * Sends one message already serialized with its 5-byte prefix (framing.ts), for a streamer
   * that frames its messages in buffers of its own and reuses each once `flushed` is called.
   */
  writeFramed(framed: Buffer, flushed?: () => void): boolean {
    if (this.finished || this.gone()) return false;
    this.sendHeaders();
    return this.stream.write(framed, flushed);
  }

  /** Sends the response headers now (grpc-js's sendMetadata; a caller learns the call is served). */
  sendMetadata(): void {
    if (!this.finished && !this.gone()) this.sendHeaders();
  }

  /** Ends a streaming call with status OK (after the messages written so far). */
  end(): void {
    this.finish(undefined);
  }

  /** Ends the call with `err` as its status. */
  fail(err: StatusLike): void {
    const code = typeof err.code === 'number' ? err.code : Status.UNKNOWN;
    this.finish(statusTrailers(code, err.details ?? err.message ?? ''));
  }

  /** Answers a unary call (the handler's callback). */
  respond(err: StatusLike | null | undefined, value?: Res, written?: () => void): void {
    if (err) return this.fail(err);
    if (this.finished || this.gone()) return;
    let body: Buffer;
    try {
      body = this.method.responseSerialize(value) as Buffer;
    } catch (e) {
      return this.fail({ code: Status.INTERNAL, details: `kvs: cannot encode the response: ${(e as Error).message}` });
    }
    this.finished = true;
    this.clearDeadline();
    this.headersSent = true;
    this.stream.respond(RESPONSE_BLOCK);
    writeMessage(this.stream, body, written);
    this.stream.end(OK_TRAILERS_BLOCK);
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.stream.respond(RESPONSE_BLOCK);
  }

  /** Ends the call: OK (no `trailers`) or an error status. */
  private finish(trailers: Record<string, string> | undefined): void {
    if (this.finished) return;
    this.finished = true;
    this.clearDeadline();
    const stream = this.stream;
    if (this.gone()) return;
    if (!this.headersSent) {
      // Trailers-only response: the status travels in the one HEADERS frame.
      this.headersSent = true;
      stream.respond(encodeHeaders({ ...RESPONSE_HEADERS, ...(trailers ?? { 'grpc-status': '0' }) }), true);
      return;
    }
    stream.end(trailers ? encodeHeaders(trailers) : OK_TRAILERS_BLOCK);
  }

  /** The client reset the stream or the connection closed: nothing can be sent any more. */
  private gone(): boolean {
    return this.stream.closed;
  }

  /** @internal the HTTP/2 stream closed. */
  onStreamClose(): void {
    this.transportClosed();
  }
}
