// One HTTP/2 connection (RFC 9113) as gRPC uses it. The server side is the transport under the
// client port's gRPC server (shared/grpc/server.ts) and the internal services' sockets; the client
// side carries our own processes' long-lived internal streams (shared/grpc/stream-channel.ts).
// One file because it is one state machine: the frame parser, the flow-control windows and the
// stream table of a connection change together; the two sides differ only in who opens streams
// (ServerSession, ClientSession at the end).
//
// Why not node:http2: measured on the reference machine with etcd's Go client (the bench's
// `--client go`), a unary call answered at once cost node's HTTP/2 server 200–330 µs of CPU
// (16 clients / 1 client) and this one 45–110 µs, and a serial round trip was 160–200 µs
// shorter (docs/perf/client-port.md). Node's server builds a Duplex stream, a headers object and
// several events per call, and nghttp2 writes each frame on its own; here a call is a small
// object with callbacks, the frames of everything answered in one turn of the event loop leave
// in one write, and the parser is a loop over the bytes of one read. What it does not have,
// gRPC does not use: server push, priorities (ignored, as RFC 9113 allows), HTTP/1.1.
//
// Flow control: the server advertises a 1 MiB window per stream and 16 MiB for the connection,
// and returns what it has read at once (each stream's bytes are handed to its call as they
// come, which decides what to keep). It sends no more than the client's windows allow; what
// does not fit waits on the stream, and `write` returns false past HIGH_WATER, as a Writable.
import type net from 'node:net';
import { HeaderDecoder, encodeHeaders, type RequestHeaders } from './hpack.js';

const T_DATA = 0x0;
const T_HEADERS = 0x1;
const T_PRIORITY = 0x2;
const T_RST_STREAM = 0x3;
const T_SETTINGS = 0x4;
const T_PUSH_PROMISE = 0x5;
const T_PING = 0x6;
const T_GOAWAY = 0x7;
const T_WINDOW_UPDATE = 0x8;
const T_CONTINUATION = 0x9;

const F_END_STREAM = 0x1;
const F_ACK = 0x1;
const F_END_HEADERS = 0x4;
const F_PADDED = 0x8;
const F_PRIORITY = 0x20;

export const H2_NO_ERROR = 0x0;
const PROTOCOL_ERROR = 0x1;
const FLOW_CONTROL_ERROR = 0x3;
const STREAM_CLOSED = 0x5;
const FRAME_SIZE_ERROR = 0x6;
const REFUSED_STREAM = 0x7;
export const H2_CANCEL = 0x8;
export const H2_INTERNAL_ERROR = 0x2;
const COMPRESSION_ERROR = 0x9;
const ENHANCE_YOUR_CALM = 0xb;

const S_INITIAL_WINDOW_SIZE = 0x4;
const S_MAX_FRAME_SIZE = 0x5;
const S_ENABLE_PUSH = 0x2;

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
/** HTTP/2's initial window (RFC 9113 6.9.2). */
export const DEFAULT_WINDOW = 65_535;
/** The largest frame the server accepts: HTTP/2's default, which it does not change. */
const MAX_FRAME = 16_384;
const MAX_WINDOW = 2 ** 31 - 1;
/** The receive windows the server advertises (see the file's comment). */
const STREAM_WINDOW = 1 << 20;
const CONNECTION_WINDOW = 16 << 20;
/** A header block (HPACK-compressed, over CONTINUATION frames) larger than this ends the connection. */
const MAX_HEADER_BLOCK = 256 * 1024;
/** Decoded request headers larger than this (RFC 9113's count) are answered 431. */
export const MAX_HEADER_LIST = 64 * 1024;
/**
 * Data a stream holds back (the client's window is spent) before `write` asks the caller to
 * wait. Above one large message: a watcher whose client reads promptly but returns its 64 KiB
 * window a moment late must not count as stalled (the watch hub then serves it from history).
 */
const HIGH_WATER = 1024 * 1024;
/**
 * Output up to this size is joined into one buffer for one socket write; larger output goes
 * out as it is, in one writev. A client with 64 KiB windows (grpc-js's default) takes a large
 * response 32–48 KiB per window update: joining copied each such piece into a fresh buffer,
 * which cost the gateway more CPU and GC than the writev (2.5–3.4 → 1.6 ms per 1,000-key Range).
 */
const JOIN_LIMIT = 16 * 1024;

const EMPTY = Buffer.alloc(0);

function frameHeader(length: number, type: number, flags: number, stream: number): Buffer {
  const h = Buffer.allocUnsafe(9);
  h[0] = length >>> 16;
  h[1] = (length >>> 8) & 0xff;
  h[2] = length & 0xff;
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream, 5);
  return h;
}

function u32Pair(a: number, b: number): Buffer {
  const p = Buffer.allocUnsafe(8);
  p.writeUInt32BE(a, 0);
  p.writeUInt32BE(b, 4);
  return p;
}

function u32(v: number): Buffer {
  const p = Buffer.allocUnsafe(4);
  p.writeUInt32BE(v, 0);
  return p;
}

/** SETTINGS with one setting: the initial stream window. */
function windowSettings(window: number): Buffer {
  const settings = Buffer.allocUnsafe(6);
  settings.writeUInt16BE(S_INITIAL_WINDOW_SIZE, 0);
  settings.writeUInt32BE(window, 2);
  return Buffer.concat([frameHeader(6, T_SETTINGS, 0, 0), settings]);
}

function windowUpdate(stream: number, increment: number): Buffer {
  return Buffer.concat([frameHeader(4, T_WINDOW_UPDATE, 0, stream), u32(increment)]);
}

/** The server's first frame, sent as the connection opens: its SETTINGS (a 1 MiB stream window). */
const GREETING = windowSettings(STREAM_WINDOW);
/** The connection's window, opened once the client has shown it speaks HTTP/2 (its SETTINGS). */
const CONNECTION_WINDOW_UPDATE = windowUpdate(0, CONNECTION_WINDOW - DEFAULT_WINDOW);
const SETTINGS_ACK = frameHeader(0, T_SETTINGS, F_ACK, 0);

/** What the session tells its owner (the gRPC server). */
export interface SessionHandler {
  /** A new stream with its request headers; set its callbacks before returning. */
  onStream(stream: SessionStream, headers: RequestHeaders): void;
  /** The session ended (closed, destroyed or failed). */
  onClose(session: Http2Session): void;
}

/**
 * One stream. On a server: a request, whose callbacks the gRPC server sets when it arrives. On
 * a client: a call this side opened (`ClientSession.request`).
 */
export class SessionStream {
  /** A chunk of the peer's DATA (its gRPC messages, unparsed). */
  ondata: ((chunk: Buffer) => void) | undefined;
  /** The peer ended its side (END_STREAM). */
  onend: (() => void) | undefined;
  /** A client's stream: the response headers, then the trailers (`end`), or trailers only. */
  onheaders: ((headers: RequestHeaders, end: boolean) => void) | undefined;
  /** The RST_STREAM code the peer ended the stream with, if it did. */
  rstCode: number | undefined;
  /** The stream is over: both sides ended, or it was reset, or the connection went. Once. */
  onclose: (() => void) | undefined;
  /** After `write` returned false, the data held back has gone out. */
  ondrain: (() => void) | undefined;

  /** The stream can take no more frames (ended both ways, reset, or the connection is gone). */
  closed = false;
  private headersSent = false;
  /** END_STREAM sent (or queued behind held-back data). */
  private localEnded = false;
  /** END_STREAM received. */
  remoteEnded = false;
  /** Bytes the peer may still send on this stream before this side's next WINDOW_UPDATE. */
  recvWindow: number;
  /** The receive window this side keeps open for the stream (topped up as data is read). */
  window: number;
  /** A client's stream: whether the response headers came. */
  headersReceived = false;
  /** Bytes this side may still send on this stream (the peer's window for it). */
  sendWindow: number;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private trailers: Buffer | undefined;
  private needDrain = false;
  /** `write` callbacks waiting for data held back to go out. */
  private heldFlushed: (() => void)[] = [];

  constructor(
    readonly session: Http2Session,
    readonly id: number,
  ) {
    this.sendWindow = session.peerInitialWindow;
    this.recvWindow = this.window = session.streamWindow;
  }

  get writableNeedDrain(): boolean {
    return this.heldBytes >= HIGH_WATER;
  }

  /** Sends the response headers (an encoded block); with `endStream`, they are the whole answer. */
  respond(block: Buffer, endStream = false): void {
    if (this.closed || this.headersSent) return;
    this.headersSent = true;
    this.session.frame(T_HEADERS, endStream ? F_END_HEADERS | F_END_STREAM : F_END_HEADERS, this.id, block);
    if (endStream) this.ended();
  }

  /**
   * Sends DATA; false means "wait for ondrain" (data held back past HIGH_WATER). `flushed` is
   * called once the data was handed to the socket (not at all if the stream closes first).
   */
  write(data: Buffer, flushed?: () => void): boolean {
    if (this.closed || this.localEnded) return false;
    if (this.heldBytes === 0) data = this.send(data);
    if (data.length) {
      this.held.push(data);
      this.heldBytes += data.length;
      if (flushed) this.heldFlushed.push(flushed);
    } else if (flushed) this.session.onFlush(flushed);
    if (this.heldBytes < HIGH_WATER) return true;
    this.needDrain = true;
    return false;
  }

  /** Ends this side with trailers (an encoded block) or, without, an empty DATA frame, after the data held back. */
  end(trailers?: Buffer): void {
    if (this.closed || this.localEnded) return;
    this.localEnded = true;
    const last = trailers ?? EMPTY;
    if (this.heldBytes) this.trailers = last;
    else this.sendTrailers(last);
  }

  /** Ends the stream at once with RST_STREAM. */
  reset(code: number): void {
    if (this.closed) return;
    this.session.frame(T_RST_STREAM, 0, this.id, u32(code));
    this.close();
  }

  /** @internal sends what the windows allow of `data`; returns the rest. */
  private send(data: Buffer): Buffer {
    const s = this.session;
    while (data.length) {
      const n = Math.min(data.length, this.sendWindow, s.sendWindow, s.peerMaxFrame);
      if (n <= 0) {
        if (s.sendWindow <= 0) s.blocked.add(this);
        return data;
      }
      s.frame(T_DATA, 0, this.id, n === data.length ? data : data.subarray(0, n));
      this.sendWindow -= n;
      s.sendWindow -= n;
      data = data.subarray(n);
    }
    return EMPTY;
  }

  /** @internal the windows grew: sends what was held back, then the trailers if they wait. */
  pump(): void {
    if (this.closed) return;
    while (this.held.length) {
      const rest = this.send(this.held[0]);
      this.heldBytes -= this.held[0].length - rest.length;
      if (rest.length) {
        this.held[0] = rest;
        return;
      }
      this.held.shift();
    }
    for (const cb of this.heldFlushed) this.session.onFlush(cb);
    this.heldFlushed = [];
    if (this.trailers) {
      const t = this.trailers;
      this.trailers = undefined;
      this.sendTrailers(t);
    }
    if (this.needDrain && !this.closed) {
      this.needDrain = false;
      this.ondrain?.();
    }
  }

  /** Trailers end a response; an empty block is an empty DATA frame with END_STREAM (a request's end). */
  private sendTrailers(block: Buffer): void {
    if (block.length) this.session.frame(T_HEADERS, F_END_HEADERS | F_END_STREAM, this.id, block);
    else this.session.frame(T_DATA, F_END_STREAM, this.id, EMPTY);
    this.ended();
  }

  /**
   * This side has ended. A server's stream is over then: a client still sending is told to stop
   * (as grpc-go does). A client's waits for the server's end.
   */
  private ended(): void {
    this.localEnded = true;
    if (this.remoteEnded) return this.close();
    if (this.session.isServer) {
      this.session.frame(T_RST_STREAM, 0, this.id, u32(H2_NO_ERROR));
      this.close();
    }
  }

  /** @internal the peer ended its side. */
  remoteEnd(): void {
    this.remoteEnded = true;
    if (this.closed) return;
    this.onend?.();
    // A client's call is over when the server ends it (its status came with the trailers).
    if (!this.session.isServer) {
      if (this.localEnded) this.close();
      else this.reset(H2_NO_ERROR);
    }
  }

  /** @internal */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.held = [];
    this.heldBytes = 0;
    this.heldFlushed = [];
    this.trailers = undefined;
    this.session.forget(this);
    // As node's streams: 'close' comes after what the current turn is doing.
    if (this.onclose) process.nextTick(this.onclose);
  }
}

/**
 * One connection, either side. `socket` is the raw connection (a net.Socket, or a TLS socket
 * after its handshake); the session reads and writes it, and destroys it when done.
 */
export class Http2Session {
  /** The peer's initial stream window and largest frame (its SETTINGS). */
  peerInitialWindow = DEFAULT_WINDOW;
  peerMaxFrame = MAX_FRAME;
  /** Bytes this side may still send on the connection. */
  sendWindow = DEFAULT_WINDOW;
  /** Streams with data held back for want of connection window. */
  readonly blocked = new Set<SessionStream>();
  /** Reads so far (the idle probe watches it). */
  private reads = 0;
  /** The read count the idle probe last saw, and since when it has not changed. */
  private probeReads = -1;
  private quietSince = 0;
  /** Set while a PING of the idle probe is unanswered. */
  private probeSentAt = 0;
  /** Cached Common Name of a client certificate (null: none). */
  commonName: string | null | undefined;

  protected readonly streams = new Map<number, SessionStream>();
  private readonly decoder = new HeaderDecoder();
  private pending: Buffer = EMPTY;
  /** Bytes of the client's preface still to come (a server reads one first). */
  private prefaceLeft: number;
  private settingsSeen = false;
  /** The highest stream id opened (by the client: a server's peer, or this client). */
  protected lastStreamId = 0;
  /** A header block spread over CONTINUATION frames. */
  private continued: { id: number; endStream: boolean; parts: Buffer[]; size: number } | undefined;
  /** This side's receive windows: each stream's initial one and the connection's. */
  readonly streamWindow: number;
  private readonly connectionWindow: number;
  private recvWindow: number;
  /** Set once this side sent GOAWAY: the last stream it serves. */
  private goawayLast: number | undefined;
  private out: Buffer[] = [];
  private outBytes = 0;
  /** Callbacks of writes in `out`, called when the socket has taken it. */
  private outFlushed: (() => void)[] = [];
  private dead = false;

  protected constructor(
    readonly socket: net.Socket,
    readonly isServer: boolean,
    window: { stream: number; connection: number },
    private readonly handler: SessionHandler | undefined,
  ) {
    this.prefaceLeft = isServer ? PREFACE.length : 0;
    this.streamWindow = window.stream;
    this.connectionWindow = this.recvWindow = window.connection;
    socket.setNoDelay?.(true);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('error', () => this.destroy());
    socket.on('close', () => this.destroy());
  }

  /** @internal `flushed` is called once what is queued now has been handed to the socket. */
  onFlush(flushed: () => void): void {
    if (this.dead) return;
    if (this.out.length === 0 && this.outFlushed.length === 0) process.nextTick(flushSoon, this);
    this.outFlushed.push(flushed);
  }

  get closed(): boolean {
    return this.dead || this.goawayLast !== undefined;
  }

  get destroyed(): boolean {
    return this.dead;
  }

  /**
   * The idle probe, called now and then by the session's owner: a connection with no reads for
   * `idleMs` is sent a PING, and one that has not answered `timeoutMs` later is destroyed (a
   * peer that vanished without closing: a host gone, a half-open connection, an HTTP/2 layer
   * that stopped reading). Every HTTP/2 implementation answers PINGs below its application, so
   * a live idle peer costs one PING round per `idleMs`, and a busy one the whole timeout.
   */
  probe(now: number, idleMs: number, timeoutMs: number): void {
    if (this.reads !== this.probeReads) {
      this.probeReads = this.reads;
      this.quietSince = now;
      this.probeSentAt = 0;
    } else if (this.probeSentAt === 0 && now - this.quietSince >= idleMs) {
      this.probeSentAt = now;
      this.frame(T_PING, 0, 0, Buffer.alloc(8));
    } else if (this.probeSentAt !== 0 && now - this.probeSentAt >= timeoutMs) {
      this.destroy();
    }
  }

  /**
   * Graceful close (GOAWAY NO_ERROR): the streams open now are served, later ones refused, and
   * the connection ends when the last one closes.
   */
  close(): void {
    if (this.dead || this.goawayLast !== undefined) return;
    this.goawayLast = this.lastStreamId;
    // Its last-stream-id names the last stream the *peer* opened that this side serves: a
    // server's last request; a client's peer opens none.
    this.frame(T_GOAWAY, 0, 0, u32Pair(this.isServer ? this.lastStreamId : 0, H2_NO_ERROR));
    this.endIfIdle();
  }

  /** Ends the connection at once; open streams are closed (their calls cancelled). */
  destroy(): void {
    if (this.dead) return;
    this.dead = true;
    this.out = [];
    this.outFlushed = [];
    for (const s of [...this.streams.values()]) s.close();
    this.socket.destroy();
    this.handler?.onClose(this);
  }

  /** @internal queues one frame for the next flush. */
  frame(type: number, flags: number, stream: number, payload: Buffer): void {
    this.frameRaw(frameHeader(payload.length, type, flags, stream));
    if (payload.length) this.frameRaw(payload);
  }

  protected frameRaw(bytes: Buffer): void {
    if (this.dead) return;
    if (this.out.length === 0 && this.outFlushed.length === 0) process.nextTick(flushSoon, this);
    this.out.push(bytes);
    this.outBytes += bytes.length;
  }

  /** @internal writes what the current turn queued, in one write when it is small. */
  flush(): void {
    const out = this.out;
    const cbs = this.outFlushed;
    if ((out.length === 0 && cbs.length === 0) || this.dead) return;
    this.out = [];
    this.outFlushed = [];
    const bytes = this.outBytes;
    this.outBytes = 0;
    const done = cbs.length ? () => cbs.forEach(call) : undefined;
    if (out.length === 0) done?.();
    else if (out.length === 1) this.socket.write(out[0], done);
    else if (bytes <= JOIN_LIMIT) this.socket.write(Buffer.concat(out, bytes), done);
    else {
      this.socket.cork();
      for (let i = 0; i < out.length; i++) this.socket.write(out[i], i === out.length - 1 ? done : undefined);
      this.socket.uncork();
    }
  }

  /** @internal a stream closed. */
  forget(s: SessionStream): void {
    this.streams.delete(s.id);
    this.blocked.delete(s);
    this.endIfIdle();
  }

  private endIfIdle(): void {
    if (this.goawayLast === undefined || this.streams.size || this.dead) return;
    this.flush();
    this.socket.end();
    // A client that never closes its side does not hold the descriptor.
    setTimeout(() => this.destroy(), 1000).unref();
  }

  /** A connection error (RFC 9113 5.4.1): GOAWAY with the code, then the connection is closed. */
  private fail(code: number, why: string): void {
    if (this.dead) return;
    this.goawayLast ??= this.lastStreamId;
    this.frame(T_GOAWAY, 0, 0, Buffer.concat([u32Pair(this.isServer ? this.lastStreamId : 0, code), Buffer.from(why)]));
    this.flush();
    const streams = [...this.streams.values()];
    this.dead = true;
    for (const s of streams) s.close();
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
    this.handler?.onClose(this);
  }

  private read(chunk: Buffer): void {
    if (this.dead) return;
    this.reads++;
    let buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    let off = 0;
    if (this.prefaceLeft) {
      const seen = PREFACE.length - this.prefaceLeft;
      const n = Math.min(buf.length, this.prefaceLeft);
      if (!buf.subarray(0, n).equals(PREFACE.subarray(seen, seen + n))) return this.fail(PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
      this.prefaceLeft -= n;
      off = n;
    }
    while (buf.length - off >= 9) {
      const len = (buf[off] << 16) | (buf[off + 1] << 8) | buf[off + 2];
      if (len > MAX_FRAME) return this.fail(FRAME_SIZE_ERROR, `frame of ${len} bytes`);
      if (buf.length - off - 9 < len) break;
      const type = buf[off + 3];
      const flags = buf[off + 4];
      const id = buf.readUInt32BE(off + 5) & 0x7fffffff;
      const payload = buf.subarray(off + 9, off + 9 + len);
      off += 9 + len;
      this.onFrame(type, flags, id, payload);
      if (this.dead) return;
    }
    this.pending = off === buf.length ? EMPTY : buf.subarray(off);
  }

  private onFrame(type: number, flags: number, id: number, p: Buffer): void {
    if (this.continued && type !== T_CONTINUATION) return this.fail(PROTOCOL_ERROR, 'header block not continued');
    if (!this.settingsSeen && type !== T_SETTINGS) return this.fail(PROTOCOL_ERROR, 'first frame is not SETTINGS');
    switch (type) {
      case T_DATA:
        return this.onData(flags, id, p);
      case T_HEADERS:
        return this.onHeaders(flags, id, p);
      case T_CONTINUATION: {
        const c = this.continued;
        if (!c || id !== c.id) return this.fail(PROTOCOL_ERROR, 'CONTINUATION without its HEADERS');
        c.parts.push(p);
        c.size += p.length;
        if (c.size > MAX_HEADER_BLOCK) return this.fail(ENHANCE_YOUR_CALM, 'header block too large');
        if (!(flags & F_END_HEADERS)) return;
        this.continued = undefined;
        return this.onHeaderBlock(c.id, c.endStream, Buffer.concat(c.parts, c.size));
      }
      case T_PRIORITY:
        if (id === 0) return this.fail(PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (p.length !== 5) return this.fail(FRAME_SIZE_ERROR, 'PRIORITY of the wrong size');
        return;
      case T_RST_STREAM: {
        if (id === 0) return this.fail(PROTOCOL_ERROR, 'RST_STREAM on stream 0');
        if (p.length !== 4) return this.fail(FRAME_SIZE_ERROR, 'RST_STREAM of the wrong size');
        if (id > this.lastStreamId) return this.fail(PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
        const s = this.streams.get(id);
        if (s) s.rstCode = p.readUInt32BE(0);
        return s?.close();
      }
      case T_SETTINGS:
        return this.onSettings(flags, id, p);
      case T_PUSH_PROMISE:
        return this.fail(PROTOCOL_ERROR, 'PUSH_PROMISE'); // a client never enables push
      case T_PING:
        if (id !== 0) return this.fail(PROTOCOL_ERROR, 'PING on a stream');
        if (p.length !== 8) return this.fail(FRAME_SIZE_ERROR, 'PING of the wrong size');
        if (flags & F_ACK) this.probeSentAt = 0;
        else this.frame(T_PING, F_ACK, 0, Buffer.from(p));
        return;
      case T_GOAWAY: {
        if (id !== 0) return this.fail(PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (p.length < 8) return this.fail(FRAME_SIZE_ERROR, 'GOAWAY too short');
        // An error: the connection ends now, with nothing after the GOAWAY read. NO_ERROR: the
        // client opens no more streams; what came with the GOAWAY (grpc-js sends requests made
        // in the same turn right behind it) is served, then the connection closes.
        if (p.readUInt32BE(4) !== H2_NO_ERROR) return this.destroy();
        setImmediate(() => this.close());
        return;
      }
      case T_WINDOW_UPDATE:
        return this.onWindowUpdate(id, p);
      default:
        return; // unknown frame types are ignored (RFC 9113 4.1)
    }
  }

  private onSettings(flags: number, id: number, p: Buffer): void {
    if (id !== 0) return this.fail(PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & F_ACK) {
      if (p.length) return this.fail(FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      return;
    }
    if (p.length % 6) return this.fail(FRAME_SIZE_ERROR, 'SETTINGS of the wrong size');
    if (!this.settingsSeen && this.isServer) this.frameRaw(CONNECTION_WINDOW_UPDATE);
    this.settingsSeen = true;
    for (let o = 0; o < p.length; o += 6) {
      const key = p.readUInt16BE(o);
      const value = p.readUInt32BE(o + 2);
      if (key === S_ENABLE_PUSH && value > 1) return this.fail(PROTOCOL_ERROR, 'ENABLE_PUSH not 0 or 1');
      if (key === S_MAX_FRAME_SIZE) {
        if (value < MAX_FRAME || value > 0xffffff) return this.fail(PROTOCOL_ERROR, 'MAX_FRAME_SIZE out of range');
        this.peerMaxFrame = value;
      }
      if (key === S_INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) return this.fail(FLOW_CONTROL_ERROR, 'INITIAL_WINDOW_SIZE above 2^31-1');
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const s of this.streams.values()) {
          s.sendWindow += delta;
          if (s.sendWindow > MAX_WINDOW) return this.fail(FLOW_CONTROL_ERROR, 'stream window above 2^31-1');
        }
        if (delta > 0) for (const s of [...this.streams.values()]) s.pump();
      }
    }
    this.frameRaw(SETTINGS_ACK);
  }

  private onWindowUpdate(id: number, p: Buffer): void {
    if (p.length !== 4) return this.fail(FRAME_SIZE_ERROR, 'WINDOW_UPDATE of the wrong size');
    const inc = p.readUInt32BE(0) & 0x7fffffff;
    if (id === 0) {
      if (inc === 0) return this.fail(PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += inc;
      if (this.sendWindow > MAX_WINDOW) return this.fail(FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
      const waiting = [...this.blocked];
      this.blocked.clear();
      for (const s of waiting) s.pump();
      return;
    }
    if (id > this.lastStreamId) return this.fail(PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
    const s = this.streams.get(id);
    if (!s) return;
    if (inc === 0) return s.reset(PROTOCOL_ERROR);
    s.sendWindow += inc;
    if (s.sendWindow > MAX_WINDOW) return s.reset(FLOW_CONTROL_ERROR);
    s.pump();
  }

  private onHeaders(flags: number, id: number, p: Buffer): void {
    // Streams are the client's, odd-numbered; a server sends HEADERS only on those it was sent.
    if (id === 0 || (id & 1) === 0 || (!this.isServer && id > this.lastStreamId)) return this.fail(PROTOCOL_ERROR, `HEADERS on stream ${id}`);
    if (flags & F_PADDED) {
      if (p.length < 1 || p[0] >= p.length) return this.fail(PROTOCOL_ERROR, 'padding longer than the frame');
      p = p.subarray(1, p.length - p[0]);
    }
    if (flags & F_PRIORITY) {
      if (p.length < 5) return this.fail(FRAME_SIZE_ERROR, 'HEADERS too short for its priority');
      p = p.subarray(5);
    }
    const endStream = (flags & F_END_STREAM) !== 0;
    if (flags & F_END_HEADERS) return this.onHeaderBlock(id, endStream, p);
    this.continued = { id, endStream, parts: [p], size: p.length };
  }

  private onHeaderBlock(id: number, endStream: boolean, block: Buffer): void {
    let headers: RequestHeaders;
    let size: number;
    try {
      ({ headers, size } = this.decoder.decode(block));
    } catch {
      return this.fail(COMPRESSION_ERROR, 'header block does not decode');
    }
    if (!this.isServer) {
      // A response's headers, then its trailers (or trailers only); a closed stream's are dropped.
      const s = this.streams.get(id);
      if (!s || s.remoteEnded) return;
      const first = !s.headersReceived;
      s.headersReceived = true;
      if (!first && !endStream) return s.reset(PROTOCOL_ERROR);
      s.onheaders?.(headers, endStream);
      if (endStream) s.remoteEnd();
      return;
    }
    if (id <= this.lastStreamId) {
      // Trailers of a request (gRPC clients send none, but HTTP/2 allows them) end it.
      const s = this.streams.get(id);
      if (!s || s.remoteEnded) return this.rst(id, STREAM_CLOSED);
      if (!endStream) return s.reset(PROTOCOL_ERROR);
      return s.remoteEnd();
    }
    this.lastStreamId = id;
    if (this.goawayLast !== undefined) return this.rst(id, REFUSED_STREAM);
    const s = new SessionStream(this, id);
    this.streams.set(id, s);
    s.remoteEnded = endStream;
    if (size > MAX_HEADER_LIST || !this.handler) {
      s.respond(HEADER_LIST_TOO_LARGE, true);
      return;
    }
    this.handler.onStream(s, headers);
    if (endStream) s.onend?.();
  }

  private onData(flags: number, id: number, p: Buffer): void {
    if (id === 0) return this.fail(PROTOCOL_ERROR, 'DATA on stream 0');
    if (id > this.lastStreamId) return this.fail(PROTOCOL_ERROR, 'DATA on an idle stream');
    const length = p.length;
    this.recvWindow -= length;
    if (this.recvWindow < 0) return this.fail(FLOW_CONTROL_ERROR, 'DATA beyond the connection window');
    if (this.recvWindow < this.connectionWindow / 2) {
      this.frame(T_WINDOW_UPDATE, 0, 0, u32(this.connectionWindow - this.recvWindow));
      this.recvWindow = this.connectionWindow;
    }
    if (flags & F_PADDED) {
      if (length < 1 || p[0] >= length) return this.fail(PROTOCOL_ERROR, 'padding longer than the frame');
      p = p.subarray(1, length - p[0]);
    }
    const s = this.streams.get(id);
    if (!s) return; // a stream already closed (reset, or answered): its data is dropped
    if (s.remoteEnded) return s.reset(STREAM_CLOSED);
    s.recvWindow -= length;
    if (s.recvWindow < 0) return s.reset(FLOW_CONTROL_ERROR);
    const end = (flags & F_END_STREAM) !== 0;
    // Known before the data is handed over: a call answered from it has nothing more to read.
    if (end) s.remoteEnded = true;
    if (p.length) s.ondata?.(p);
    if (end) return s.remoteEnd();
    if (s.recvWindow < s.window / 2 && !s.closed) {
      this.frame(T_WINDOW_UPDATE, 0, id, u32(s.window - s.recvWindow));
      s.recvWindow = s.window;
    }
  }

  private rst(id: number, code: number): void {
    this.frame(T_RST_STREAM, 0, id, u32(code));
  }
}

/**
 * The flush runs behind the other callbacks queued in the same turn so far: what they write
 * on the connection's other streams leaves in the same socket write (storage writes a batch's
 * feed message, then its answers from a callback queued after, to the gateway on one
 * connection: one wake-up of the gateway, not two).
 */
function flushSoon(s: Http2Session): void {
  process.nextTick(flushSession, s);
}

function flushSession(s: Http2Session): void {
  s.flush();
}

function call(fn: () => void): void {
  fn();
}

/** The server side of a connection: the client's streams go to `handler`. */
export class ServerSession extends Http2Session {
  constructor(socket: net.Socket, handler: SessionHandler) {
    super(socket, true, { stream: STREAM_WINDOW, connection: CONNECTION_WINDOW }, handler);
    this.frameRaw(GREETING);
  }
}

/**
 * The client side of a connection to one of our own servers (an internal Unix socket): it
 * opens streams. `connectionWindow` is how much the server may send ahead of what this side
 * has read in all; each stream's own window is HTTP/2's default, 64 KiB (storage's feed:
 * storage skips a gateway that falls that far behind), unless `request` is given a larger one.
 */
export class ClientSession extends Http2Session {
  private readonly requestBlocks = new Map<string, Buffer>();

  /** `headers`: sent with every request besides gRPC's own (the peer port's leadership epoch). */
  constructor(socket: net.Socket, connectionWindow: number, private readonly headers: Record<string, string> = {}) {
    super(socket, false, { stream: DEFAULT_WINDOW, connection: Math.max(connectionWindow, DEFAULT_WINDOW) }, undefined);
    const greeting = [PREFACE, windowSettings(DEFAULT_WINDOW)];
    if (connectionWindow > DEFAULT_WINDOW) greeting.push(windowUpdate(0, connectionWindow - DEFAULT_WINDOW));
    this.frameRaw(Buffer.concat(greeting));
  }

  /**
   * Opens a gRPC call of `path` (HEADERS sent; the caller sets the stream's callbacks).
   * `window`: the stream's receive window, opened with a WINDOW_UPDATE right behind the
   * HEADERS when larger than the default (a write link's answers never wait for one).
   */
  request(path: string, window = DEFAULT_WINDOW): SessionStream {
    let block = this.requestBlocks.get(path);
    if (!block) {
      block = encodeHeaders({ ':method': 'POST', ':scheme': 'http', ':path': path, ':authority': 'localhost', 'content-type': 'application/grpc', te: 'trailers', ...this.headers });
      this.requestBlocks.set(path, block);
    }
    const id = this.lastStreamId === 0 ? 1 : this.lastStreamId + 2;
    const s = new SessionStream(this, id);
    // A closing or broken connection opens nothing: the stream closes (its caller hears why).
    if (this.closed) {
      s.close();
      return s;
    }
    this.lastStreamId = id;
    this.streams.set(id, s);
    this.frame(T_HEADERS, F_END_HEADERS, id, block);
    if (window > s.window) {
      this.frameRaw(windowUpdate(id, window - s.window));
      s.recvWindow = s.window = window;
    }
    return s;
  }
}

const HEADER_LIST_TOO_LARGE = Buffer.from([0x08, 0x03, 0x34, 0x33, 0x31]); // ":status: 431", literal without indexing
