// HTTP/2 frames built by hand (RFC 9113), so that the fuzzers can send what no HTTP/2 library
// would: frames in the wrong order, lengths that lie, reserved flags and stream ids, broken
// HPACK. Header blocks are literal fields without indexing (no HPACK state to keep in step).

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

/** A frame; `declaredLength` makes the header claim another payload length than it has. */
export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0), declaredLength?: number): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE((declaredLength ?? payload.length) & 0xffffff, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream >>> 0, 5);
  return Buffer.concat([head, payload]);
}

/** SETTINGS entries (id, value); any id and value, valid or not. */
export function settings(entries: readonly (readonly [number, number])[], flags = 0): Buffer {
  const p = Buffer.alloc(entries.length * 6);
  entries.forEach(([id, value], i) => {
    p.writeUInt16BE(id & 0xffff, i * 6);
    p.writeUInt32BE(value >>> 0, i * 6 + 2);
  });
  return frame(FrameType.SETTINGS, flags, 0, p);
}

export function windowUpdate(stream: number, increment: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(increment >>> 0);
  return frame(FrameType.WINDOW_UPDATE, 0, stream, p);
}

export function rstStream(stream: number, code: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(code >>> 0);
  return frame(FrameType.RST_STREAM, 0, stream, p);
}

export function goaway(lastStream: number, code: number): Buffer {
  const p = Buffer.alloc(8);
  p.writeUInt32BE(lastStream >>> 0, 0);
  p.writeUInt32BE(code >>> 0, 4);
  return frame(FrameType.GOAWAY, 0, 0, p);
}

export function priority(stream: number, dependsOn: number, weight: number): Buffer {
  const p = Buffer.alloc(5);
  p.writeUInt32BE(dependsOn >>> 0);
  p[4] = weight & 0xff;
  return frame(FrameType.PRIORITY, 0, stream, p);
}

/** HPACK integer with an `n`-bit prefix whose high bits are `first` (RFC 7541, 5.1). */
function hpackInt(value: number, n: number, first: number): Buffer {
  const max = (1 << n) - 1;
  if (value < max) return Buffer.from([first | value]);
  const out = [first | max];
  for (value -= max; value >= 128; value = Math.floor(value / 128)) out.push((value % 128) | 128);
  out.push(value);
  return Buffer.from(out);
}

/** A header block of literal fields without indexing, names and values not Huffman-coded. */
export function headerBlock(headers: readonly (readonly [string, string])[]): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of headers) {
    const n = Buffer.from(name, 'latin1');
    const v = Buffer.from(value, 'latin1');
    parts.push(Buffer.from([0]), hpackInt(n.length, 7, 0), n, hpackInt(v.length, 7, 0), v);
  }
  return Buffer.concat(parts);
}

/** The request headers of a gRPC call to `path` (`extra` after them). */
export function grpcHeaders(path: string, authority: string, extra: readonly (readonly [string, string])[] = []): [string, string][] {
  return [
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', path],
    [':authority', authority],
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
    ...extra.map(([k, v]) => [k, v] as [string, string]),
  ];
}

/** A gRPC length-prefixed message: flag byte, 4-byte length (possibly a lie), body. */
export function grpcMessage(body: Buffer, opts: { compressed?: boolean; declaredLength?: number } = {}): Buffer {
  const head = Buffer.alloc(5);
  head[0] = opts.compressed ? 1 : 0;
  head.writeUInt32BE((opts.declaredLength ?? body.length) >>> 0, 1);
  return Buffer.concat([head, body]);
}
