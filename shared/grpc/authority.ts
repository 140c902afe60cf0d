// Requests whose :authority is a URL ("http://127.0.0.1:3379").
//
// etcdctl 3.4 dials each endpoint of `endpoint status`, `endpoint hashkv` and `defrag` by its
// string as given, so grpc-go sends `http://host:port` as the HTTP/2 :authority. nghttp2 (in
// node's http2) refuses an authority containing '/' with RST_STREAM PROTOCOL_ERROR, and node
// offers no option to turn its HTTP messaging checks off (its option buffer has no such flag);
// grpc-go, in etcd, takes any authority.
//
// So each new connection is looked at before node's http2 gets it: the client's first request
// headers are decoded. The usual client (an authority without '/') is then handed over as is:
// node's http2 reads the native socket, the bytes seen so far replayed first, and nothing of
// this module is on that connection's path any more. Only a connection whose first authority is
// a URL goes through `AuthorityRewriter`, a stream between the socket and the session that
// re-encodes each HEADERS block with the authority made host:port. That costs JavaScript per
// frame, which is fine for the one-call connections etcdctl makes this way.
//
// grpc-go (etcdctl) and grpc-js (etcd3) send their first request only after the server's
// SETTINGS, so while looking, this module sends an empty SETTINGS frame (all defaults) itself,
// drops the client's ACK of it (nghttp2 would take an ACK it had not asked for as a protocol
// error), and answers PINGs. nghttp2's own SETTINGS follow at the handover; HTTP/2 allows a
// server to send settings again at any time.
import type net from 'node:net';
import { Duplex } from 'node:stream';
import { createRequire } from 'node:module';

// hpack.js: RFC 7541 in plain JavaScript (spdy's HPACK); no types of its own.
interface HeaderField {
  name: string;
  value: string;
}
interface Decompressor {
  write(block: Buffer): void;
  execute(): void;
  read(): HeaderField | null;
}
interface Compressor {
  write(fields: HeaderField[]): void;
  read(): Buffer | null;
}
const hpack = createRequire(import.meta.url)('hpack.js') as {
  decompressor: { create(o: { table: { size: number } }): Decompressor };
  compressor: { create(o: { table: { size: number } }): Compressor };
};

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const FRAME_HEADER = 9;
const T_HEADERS = 0x1;
const T_SETTINGS = 0x4;
const T_PING = 0x6;
const T_CONTINUATION = 0x9;
const F_ACK = 0x1;
const F_END_STREAM = 0x1;
const F_END_HEADERS = 0x4;
const F_PADDED = 0x8;
const F_PRIORITY = 0x20;
/** HPACK's default table size, and nghttp2's (node's default SETTINGS_HEADER_TABLE_SIZE). */
const TABLE_SIZE = 4096;
/** The frame size nghttp2 accepts until it has said otherwise (HTTP/2's default). */
const MAX_FRAME = 16_384;
/** Past this much unsent data, or this long without a request, the connection goes to http2 as is. */
const LOOK_LIMIT_BYTES = 64 * 1024;
const LOOK_LIMIT_MS = 5000;

const EMPTY_SETTINGS = frameHeader(0, T_SETTINGS, 0, 0);

function frameHeader(length: number, type: number, flags: number, stream: number): Buffer {
  const h = Buffer.allocUnsafe(FRAME_HEADER);
  h.writeUIntBE(length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream & 0x7fffffff, 5);
  return h;
}

interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
  raw: Buffer;
}

/** Complete frames at the front of `buf`, and where the rest starts. */
function readFrames(buf: Buffer, from: number, out: Frame[]): number {
  let at = from;
  while (buf.length - at >= FRAME_HEADER) {
    const length = buf.readUIntBE(at, 3);
    if (buf.length - at < FRAME_HEADER + length) break;
    const raw = buf.subarray(at, at + FRAME_HEADER + length);
    out.push({ type: raw[3]!, flags: raw[4]!, stream: raw.readUInt32BE(5) & 0x7fffffff, payload: raw.subarray(FRAME_HEADER), raw });
    at += FRAME_HEADER + length;
  }
  return at;
}

/** The header block fragment of a HEADERS frame (padding and priority fields removed). */
function headersFragment(f: Frame): Buffer {
  let p = f.payload;
  let pad = 0;
  if (f.flags & F_PADDED) {
    pad = p[0]!;
    p = p.subarray(1);
  }
  if (f.flags & F_PRIORITY) p = p.subarray(5);
  return p.subarray(0, p.length - pad);
}

function decode(d: Decompressor, block: Buffer): HeaderField[] {
  d.write(block);
  d.execute();
  const fields: HeaderField[] = [];
  for (let f = d.read(); f; f = d.read()) fields.push({ name: f.name, value: f.value });
  return fields;
}

/** An authority nghttp2 takes: `http://host:port/...` becomes `host:port`. */
export function plainAuthority(value: string): string {
  return value.replace(/^[a-z][a-z0-9+.-]*:\/\//i, '').split('/')[0]!;
}

/**
 * Looks at a new connection's first request and hands the connection on: as it is (`native`),
 * or, when its :authority is a URL, through an AuthorityRewriter. `socket` may be a TLS socket
 * (after its handshake). Returns a function that abandons the look (server shutdown).
 */
export function routeConnection(socket: net.Socket, handOver: (transport: net.Socket | Duplex) => void): () => void {
  const seen: Buffer[] = []; // what nghttp2 must still get, in order
  let pending: Buffer = Buffer.alloc(0);
  let prefaceDone = false;
  let settingsSent = false;
  let ackDropped = false;
  let block: Buffer[] | undefined; // a header block spread over CONTINUATION frames
  let authority: string | undefined;
  let done = false;

  const finish = (rewrite: boolean) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    socket.off('data', onData);
    socket.off('error', onError);
    socket.pause();
    const replay = Buffer.concat([...seen, pending]);
    if (rewrite) return handOver(new AuthorityRewriter(socket, replay));
    if (replay.length) socket.unshift(replay);
    handOver(socket);
  };
  const onError = () => {
    done = true;
    clearTimeout(timer);
    socket.destroy();
  };

  function onData(chunk: Buffer): void {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    if (!prefaceDone) {
      const n = Math.min(pending.length, PREFACE.length);
      // Not HTTP/2 with prior knowledge: nghttp2 says so to the client as usual.
      if (!pending.subarray(0, n).equals(PREFACE.subarray(0, n))) return finish(false);
      if (pending.length < PREFACE.length) return;
      seen.push(pending.subarray(0, PREFACE.length));
      pending = pending.subarray(PREFACE.length);
      prefaceDone = true;
    }
    const frames: Frame[] = [];
    const rest = readFrames(pending, 0, frames);
    pending = pending.subarray(rest);
    // Not HTTP/2 as a client speaks it (the first frame is SETTINGS; no frame is longer than
    // the default maximum until the server allows more): nghttp2 refuses it at once.
    const next = pending.length >= FRAME_HEADER ? pending.readUIntBE(0, 3) : 0;
    const first = frames[0] ?? (pending.length >= FRAME_HEADER ? { type: pending[3] } : undefined);
    if (next > MAX_FRAME || (!settingsSent && first && first.type !== T_SETTINGS)) return finish(false);
    for (const f of frames) {
      if (f.type === T_SETTINGS && f.flags & F_ACK && settingsSent && !ackDropped) {
        ackDropped = true; // the ACK of our settings: nghttp2 sent none
        continue;
      }
      if (f.type === T_PING && !(f.flags & F_ACK)) {
        socket.write(Buffer.concat([frameHeader(8, T_PING, F_ACK, 0), f.payload]));
        continue;
      }
      seen.push(f.raw);
      if (f.type === T_SETTINGS && !(f.flags & F_ACK) && !settingsSent) {
        settingsSent = true;
        socket.write(EMPTY_SETTINGS);
      } else if (authority === undefined && (f.type === T_HEADERS || (f.type === T_CONTINUATION && block))) {
        (block ??= []).push(f.type === T_HEADERS ? headersFragment(f) : f.payload);
        if (f.flags & F_END_HEADERS) {
          try {
            const fields = decode(hpack.decompressor.create({ table: { size: TABLE_SIZE } }), Buffer.concat(block));
            authority = fields.find((h) => h.name === ':authority')?.value ?? '';
          } catch {
            authority = ''; // not valid HPACK: nghttp2 will say so
          }
          block = undefined;
        }
      }
    }
    if (authority !== undefined && (ackDropped || !settingsSent)) return finish(authority.includes('/'));
    if (pending.length + seen.reduce((n, b) => n + b.length, 0) > LOOK_LIMIT_BYTES) finish(false);
  }

  const timer = setTimeout(() => finish(false), LOOK_LIMIT_MS);
  timer.unref();
  socket.on('data', onData);
  socket.on('error', onError);
  return () => {
    if (!done) onError();
  };
}

/**
 * The client's bytes with each HEADERS block re-encoded, its :authority made host:port; the
 * server's bytes unchanged. It decodes with the client's HPACK table and encodes with a table
 * of its own towards nghttp2, so both tables stay consistent whatever the client indexes.
 */
export class AuthorityRewriter extends Duplex {
  private readonly decoder = hpack.decompressor.create({ table: { size: TABLE_SIZE } });
  private readonly encoder = hpack.compressor.create({ table: { size: TABLE_SIZE } });
  private pending: Buffer = Buffer.alloc(0);
  private prefaceDone = false;
  private block: { stream: number; flags: number; parts: Buffer[] } | undefined;

  constructor(
    readonly socket: net.Socket,
    replay: Buffer,
  ) {
    super({ allowHalfOpen: false });
    socket.on('data', (chunk: Buffer) => this.fromClient(chunk));
    socket.on('end', () => this.push(null));
    socket.on('error', (err) => this.destroy(err));
    socket.on('close', () => this.destroy());
    if (replay.length) this.fromClient(replay);
    socket.resume();
  }

  get remoteAddress(): string | undefined {
    return this.socket.remoteAddress;
  }

  get remotePort(): number | undefined {
    return this.socket.remotePort;
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.socket.write(chunk, cb);
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.socket.end(cb);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.socket.destroy();
    cb(err);
  }

  private fromClient(chunk: Buffer): void {
    let buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: Buffer[] = [];
    if (!this.prefaceDone) {
      if (buf.length < PREFACE.length) {
        this.pending = buf;
        return;
      }
      out.push(buf.subarray(0, PREFACE.length));
      buf = buf.subarray(PREFACE.length);
      this.prefaceDone = true;
    }
    const frames: Frame[] = [];
    this.pending = buf.subarray(readFrames(buf, 0, frames));
    for (const f of frames) {
      if (f.type === T_HEADERS) {
        this.block = { stream: f.stream, flags: f.flags, parts: [headersFragment(f)] };
      } else if (f.type === T_CONTINUATION && this.block) {
        this.block.parts.push(f.payload);
      } else {
        out.push(f.raw);
        continue;
      }
      if (!(f.flags & F_END_HEADERS)) continue;
      try {
        out.push(...this.reencode(this.block));
      } catch (err) {
        return void this.destroy(err as Error); // not valid HPACK: the connection cannot go on
      }
      this.block = undefined;
    }
    if (out.length && !this.push(out.length === 1 ? out[0] : Buffer.concat(out))) this.socket.pause();
  }

  private reencode(b: { stream: number; flags: number; parts: Buffer[] }): Buffer[] {
    const fields = decode(this.decoder, Buffer.concat(b.parts));
    for (const h of fields) if (h.name === ':authority' || h.name === 'host') h.value = plainAuthority(h.value);
    this.encoder.write(fields);
    const chunks: Buffer[] = [];
    for (let c = this.encoder.read(); c; c = this.encoder.read()) chunks.push(c);
    const block = Buffer.concat(chunks);
    const out: Buffer[] = [];
    for (let at = 0, first = true; first || at < block.length; first = false) {
      const part = block.subarray(at, at + MAX_FRAME);
      at += part.length;
      const last = at >= block.length;
      const flags = (first ? b.flags & F_END_STREAM : 0) | (last ? F_END_HEADERS : 0);
      out.push(frameHeader(part.length, first ? T_HEADERS : T_CONTINUATION, flags, b.stream), part);
    }
    return out;
  }
}
