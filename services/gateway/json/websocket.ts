// The JSON gateway over WebSocket, as etcd 3.4 serves it: embed/serve.go wraps the gateway's
// /v3/ routes in tmc/grpc-websocket-proxy (wsproxy). A WebSocket upgrade on a /v3/ path becomes
// a POST to that route whose body is the client's messages, each followed by a newline, and
// whose answer goes back a line a text message (a stream's `{"result": ...}` lines, a unary
// answer or an error object). Browsers cannot stream a request body, so this is how they watch.
//
// As wsproxy does: the upgrade request's headers are not passed on but Origin and Referer, and a
// token comes from the Sec-WebSocket-Protocol header ("Bearer, <token>") or a `token` cookie,
// as `Authorization: Bearer <token>` (which etcd 3.4's auth store does not strip: with auth on,
// such a token is refused as invalid by both). When the route's answer ends, so does the
// connection: with a close frame (1000) here, where wsproxy drops the TCP connection without
// one (a client sees 1006); a client's close is echoed, as gorilla's close handler does.
import { createHash } from 'node:crypto';
import type http from 'node:http';
import type net from 'node:net';
import type tls from 'node:tls';
import type { HttpExchange } from './gateway.js';
import { commonNameOf, peerOf } from './peer.js';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

/** A header's comma-separated tokens contain `token` (case-insensitive), as gorilla checks. */
function hasToken(value: string | string[] | undefined, token: string): boolean {
  const all = Array.isArray(value) ? value.join(',') : (value ?? '');
  return all.split(',').some((t) => t.trim().toLowerCase() === token);
}

/** gorilla's websocket.IsWebSocketUpgrade. */
export function isWebSocketUpgrade(req: http.IncomingMessage): boolean {
  return hasToken(req.headers.connection, 'upgrade') && hasToken(req.headers.upgrade, 'websocket');
}

/** wsproxy's transformSubProtocolHeader. */
function subprotocolToken(protocol: string): string {
  const i = protocol.indexOf('Bearer,');
  return i === -1 ? '' : `Bearer ${protocol.slice(i + 'Bearer,'.length).trim()}`;
}

/**
 * gorilla's Upgrader.Upgrade on `socket`: the handshake checked and answered. Undefined (and the
 * refusal written, the connection closed) when it is not a handshake gorilla takes.
 */
export function acceptWebSocket(req: http.IncomingMessage, socket: net.Socket, head: Buffer, maxMessageBytes: number): WebSocketExchange | undefined {
  const refuse = (status: number, text: string) => {
    socket.end(`HTTP/1.1 ${status} ${text}\r\nContent-Type: text/plain; charset=utf-8\r\nSec-Websocket-Version: 13\r\nX-Content-Type-Options: nosniff\r\nContent-Length: ${text.length + 1}\r\nConnection: close\r\n\r\n${text}\n`);
    return undefined;
  };
  if (req.method !== 'GET') return refuse(405, 'Method Not Allowed');
  if (!hasToken(req.headers['sec-websocket-version'], '13')) return refuse(400, 'Bad Request');
  const key = req.headers['sec-websocket-key'];
  if (!key) return refuse(400, 'Bad Request');
  const accept = createHash('sha1').update(key + GUID).digest('base64');
  const protocol = req.headers['sec-websocket-protocol'];
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${protocol?.startsWith('Bearer') ? 'Sec-WebSocket-Protocol: Bearer\r\n' : ''}\r\n`,
  );
  // The headers wsproxy passes on to the route.
  const headers: Record<string, string> = {};
  for (const name of ['origin', 'referer']) {
    const v = req.headers[name];
    if (typeof v === 'string') headers[name] = v;
  }
  if (protocol !== undefined) headers.authorization = subprotocolToken(protocol);
  const cookie = /(?:^|;\s*)token=([^;]*)/.exec(req.headers.cookie ?? '');
  if (cookie) headers.authorization = `Bearer ${cookie[1]}`;
  return new WebSocketExchange(req, socket, head, headers, maxMessageBytes);
}

const OP_CONTINUATION = 0x0;
const OP_TEXT = 0x1;
const OP_BINARY = 0x2;
const OP_CLOSE = 0x8;
const OP_PING = 0x9;
const OP_PONG = 0xa;

/** One server frame (never masked). */
function frame(opcode: number, payload: Buffer): Buffer {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x80 | opcode, n]) : n < 65536 ? Buffer.from([0x80 | opcode, 126, n >> 8, n & 0xff]) : Buffer.alloc(10);
  if (n >= 65536) {
    head[0] = 0x80 | opcode;
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(n), 2);
  }
  return Buffer.concat([head, payload]);
}

const closeFrame = (code: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(code);
  return frame(OP_CLOSE, b);
};

/** A WebSocket connection as the gateway's exchange: messages in as the body, lines out as messages. */
export class WebSocketExchange implements HttpExchange {
  readonly method = 'POST';
  readonly url: string;
  readonly peer: string;
  /** The body comes in whole messages and ends only with the connection. */
  readonly framed = true;
  private input: Buffer = Buffer.alloc(0);
  /** The bytes that came with the handshake, until read (before any later chunk). */
  private pendingHead: Buffer | undefined;
  private fragments: Buffer[] = [];
  private fragmentBytes = 0;
  private discarding = false;
  private ended = false;
  private bodyEnded = false;
  private partialLine = '';
  private dataFns: ((c: Buffer) => void)[] = [];
  private endFns: (() => void)[] = [];

  constructor(
    req: http.IncomingMessage,
    private readonly socket: net.Socket,
    head: Buffer,
    private readonly headers: Record<string, string>,
    private readonly maxMessageBytes: number,
  ) {
    this.url = req.url ?? '/';
    this.peer = peerOf(socket);
    socket.setNoDelay(true);
    // What came with the handshake is read first: it precedes any later chunk (a 'data' event
    // may come before a deferred read of `head` would).
    this.pendingHead = head.length ? head : undefined;
    socket.on('data', (c: Buffer) => this.read(this.takeHead(c)));
    socket.on('end', () => this.endBody());
    socket.on('close', () => this.endBody());
    socket.on('error', () => socket.destroy());
    // Deferred, so that the gateway has registered its callbacks when the first frame is read.
    if (head.length) setImmediate(() => this.pendingHead && this.read(this.takeHead(Buffer.alloc(0))));
  }

  get commonName(): string | undefined {
    return commonNameOf(this.socket);
  }

  get secure(): boolean {
    return !!(this.socket as tls.TLSSocket).encrypted;
  }

  header(name: string): string | undefined {
    return this.headers[name];
  }

  onData(fn: (chunk: Buffer) => void): void {
    this.dataFns.push(fn);
  }
  onEnd(fn: () => void): void {
    this.endFns.push(fn);
  }
  onClose(fn: () => void): void {
    this.socket.on('close', fn);
  }
  onDrain(fn: () => void): void {
    this.socket.on('drain', fn);
  }
  /** Messages are framed: there is no body to break. */
  onBodyError(): void {}
  discardBody(): void {
    this.discarding = true;
  }

  /** The status and headers have no place on a WebSocket: the body's lines are the answer. */
  respond(): void {}

  write(chunk: string): boolean {
    if (this.ended || this.socket.destroyed) return false;
    const lines = (this.partialLine + chunk).split('\n');
    this.partialLine = lines.pop()!;
    let ok = true;
    for (const line of lines) if (line) ok = this.socket.write(frame(OP_TEXT, Buffer.from(line))) && ok;
    return ok;
  }

  end(chunk?: string): void {
    if (this.ended) return;
    if (chunk) this.write(chunk);
    // What is left without a newline is a message too (bufio.Scanner's last token).
    if (this.partialLine && !this.socket.destroyed) this.socket.write(frame(OP_TEXT, Buffer.from(this.partialLine)));
    this.partialLine = '';
    this.ended = true;
    if (!this.socket.destroyed) this.socket.end(closeFrame(1000));
  }

  get closed(): boolean {
    return this.ended || this.socket.destroyed;
  }

  get needDrain(): boolean {
    return this.socket.writableNeedDrain;
  }

  private endBody(): void {
    if (this.bodyEnded) return;
    this.bodyEnded = true;
    for (const fn of this.endFns) fn();
  }

  /** A message from the client: its payload and a newline, as the next piece of the body. */
  private message(payload: Buffer): void {
    if (this.discarding || this.bodyEnded) return;
    const chunk = Buffer.concat([payload, Buffer.from('\n')]);
    for (const fn of this.dataFns) fn(chunk);
  }

  /** Client frames (masked), as many as have come whole. */
  private takeHead(chunk: Buffer): Buffer {
    const head = this.pendingHead;
    if (!head) return chunk;
    this.pendingHead = undefined;
    return chunk.length ? Buffer.concat([head, chunk]) : head;
  }

  private read(chunk: Buffer): void {
    this.input = this.input.length ? Buffer.concat([this.input, chunk]) : chunk;
    for (;;) {
      const b = this.input;
      if (b.length < 2) return;
      const fin = (b[0]! & 0x80) !== 0;
      const opcode = b[0]! & 0x0f;
      const masked = (b[1]! & 0x80) !== 0;
      let len = b[1]! & 0x7f;
      let at = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        const big = b.readBigUInt64BE(2);
        len = big > BigInt(Number.MAX_SAFE_INTEGER) ? Infinity : Number(big);
        at = 10;
      }
      // A client's frames are masked (RFC 6455 §5.1); a message over the limit is refused.
      if (!masked) return this.fail(1002);
      if (this.fragmentBytes + len > this.maxMessageBytes) return this.fail(1009);
      if (b.length < at + 4 + len) return;
      const mask = b.subarray(at, at + 4);
      const payload = Buffer.from(b.subarray(at + 4, at + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i & 3]!;
      this.input = b.subarray(at + 4 + len);
      switch (opcode) {
        case OP_TEXT:
        case OP_BINARY:
        case OP_CONTINUATION:
          this.fragments.push(payload);
          this.fragmentBytes += payload.length;
          if (fin) {
            const whole = Buffer.concat(this.fragments);
            this.fragments = [];
            this.fragmentBytes = 0;
            this.message(whole);
          }
          break;
        case OP_PING:
          if (!this.socket.destroyed) this.socket.write(frame(OP_PONG, payload));
          break;
        case OP_PONG:
          break;
        case OP_CLOSE:
          // The client is done: the body ends, its close is echoed (its code, or none, as
          // gorilla's default close handler does), and so the call ends.
          if (!this.socket.destroyed && !this.ended) this.socket.end(frame(OP_CLOSE, payload.subarray(0, 2)));
          this.ended = true;
          this.endBody();
          return;
        default:
          return this.fail(1002);
      }
    }
  }

  private fail(code: number): void {
    this.ended = true;
    if (!this.socket.destroyed) this.socket.end(closeFrame(code));
    this.endBody();
  }
}
