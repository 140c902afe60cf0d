// HPACK (RFC 7541) for the client port's HTTP/2 server (session.ts).
//
// Decoding keeps the connection's dynamic table, so it is hpack.js's (spdy's HPACK, a
// dependency: Huffman codes, table size updates). Encoding is ours and needs no table: the
// server's header blocks are few and small (":status 200", content-type, grpc-status,
// grpc-message), so each field goes out as a literal without indexing, and the constant
// blocks are encoded once at start-up.
import { createRequire } from 'node:module';

export interface HeaderField {
  name: string;
  value: string;
}
interface Decompressor {
  write(block: Buffer): void;
  execute(): void;
  read(): HeaderField | null;
}
const hpack = createRequire(import.meta.url)('hpack.js') as {
  decompressor: { create(o: { table: { size: number } }): Decompressor };
};

/** HPACK's default dynamic table size, which the server's SETTINGS leave as it is. */
export const TABLE_SIZE = 4096;

/** Request headers as node:http2 gives them: lower-case names; a repeated name's values in an array. */
export type RequestHeaders = Record<string, string | string[] | undefined>;

export class HeaderDecoder {
  private readonly d = hpack.decompressor.create({ table: { size: TABLE_SIZE } });

  /**
   * Decodes one complete header block (it updates the connection's table, so every block must
   * be decoded in order, even a refused stream's). Throws on a block that is not valid HPACK.
   * `size` is the header list size as RFC 9113 counts it (names, values, 32 per field).
   */
  decode(block: Buffer): { headers: RequestHeaders; size: number } {
    this.d.write(block);
    this.d.execute();
    const headers: RequestHeaders = Object.create(null);
    let size = 0;
    for (let f = this.d.read(); f; f = this.d.read()) {
      size += f.name.length + f.value.length + 32;
      const had = headers[f.name];
      if (had === undefined) headers[f.name] = f.value;
      else if (Array.isArray(had)) had.push(f.value);
      else headers[f.name] = [had, f.value];
    }
    return { headers, size };
  }
}

/** The static table's index of ":status: 200" (RFC 7541 Appendix A). */
const STATUS_200 = 8;

/** A header block of literal fields without indexing (names lower-case ASCII, values as UTF-8). */
export function encodeHeaders(fields: Record<string, string | number>): Buffer {
  const out: number[] = [];
  for (const [name, raw] of Object.entries(fields)) {
    const value = String(raw);
    if (name === ':status' && value === '200') {
      out.push(0x80 | STATUS_200);
      continue;
    }
    if (name === ':status') {
      integer(out, STATUS_200, 4, 0x00); // literal without indexing, name ":status" from the static table
    } else {
      out.push(0x00);
      literal(out, Buffer.from(name, 'latin1'));
    }
    literal(out, Buffer.from(value, 'utf8'));
  }
  return Buffer.from(out);
}

function literal(out: number[], bytes: Buffer): void {
  integer(out, bytes.length, 7, 0x00); // H = 0: not Huffman-coded
  for (const b of bytes) out.push(b);
}

/** RFC 7541 5.1: an integer with an N-bit prefix, the byte's other bits `flags`. */
function integer(out: number[], value: number, bits: number, flags: number): void {
  const max = (1 << bits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  value -= max;
  while (value >= 128) {
    out.push((value % 128) + 128);
    value = Math.floor(value / 128);
  }
  out.push(value);
}
