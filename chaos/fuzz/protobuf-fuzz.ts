// Protobuf bodies for the fuzzers: random but well-formed messages of any type of the loaded
// .proto files (every field kind, edge values, unknown enum numbers), and wire-level mutations
// of an encoded body (wrong wire types, unknown fields, huge and overlong varints, lengths
// running past the end, truncation, deep group nesting).
import protobuf from 'protobufjs';
import type { Rand } from './random.js';

/** Values the generator draws bytes and string fields from. */
export interface Pools {
  bytes: readonly Buffer[];
  strings: readonly string[];
}

const INT_EDGES = [0, 1, 2, 7, 100, -1, 0x7fffffff, -0x80000000, 0xffffffff];
const LONG_EDGES = [...INT_EDGES, 2 ** 32, 2 ** 53 - 1, -(2 ** 53 - 1), 1_000_000_007];

function scalar(rand: Rand, type: string, pools: Pools): unknown {
  switch (type) {
    case 'string':
      return rand.chance(0.8) ? rand.pick(pools.strings) : rand.bytes(rand.int(20)).toString('latin1');
    case 'bytes':
      return rand.chance(0.85) ? rand.pick(pools.bytes) : rand.bytes(rand.int(40));
    case 'bool':
      return rand.chance(0.5);
    case 'double':
    case 'float':
      return rand.pick([0, -1, 0.5, 1e300, Number.NaN, Number.POSITIVE_INFINITY]);
    case 'int32':
    case 'sint32':
    case 'sfixed32':
      return rand.chance(0.5) ? rand.int(10) : rand.pick(INT_EDGES) | 0;
    case 'uint32':
    case 'fixed32':
      return rand.chance(0.5) ? rand.int(10) : rand.pick(INT_EDGES) >>> 0;
    default: // 64-bit kinds
      return rand.chance(0.5) ? rand.int(30) : rand.pick(LONG_EDGES);
  }
}

/** A random message object of `type` for protobufjs's encode (fields set or not, nested to `depth`). */
export function randomMessage(rand: Rand, type: protobuf.Type, pools: Pools, depth = 3): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of type.fieldsArray) {
    if (field.map || !rand.chance(0.6)) continue;
    field.resolve();
    const one = (): unknown => {
      const rt = field.resolvedType;
      if (rt instanceof protobuf.Enum) {
        const values = Object.values(rt.values);
        return rand.chance(0.9) ? rand.pick(values) : rand.pick([99, -1, 0x7fffffff]);
      }
      if (rt instanceof protobuf.Type) return depth > 0 ? randomMessage(rand, rt, pools, depth - 1) : {};
      return scalar(rand, field.type, pools);
    };
    out[field.name] = field.repeated ? Array.from({ length: rand.int(4) }, one) : one();
  }
  return out;
}

export function encodeMessage(type: protobuf.Type, value: object): Buffer {
  return Buffer.from(type.encode(type.fromObject(value)).finish());
}

// ---------------------------------------------------------------- wire-level mutation

function varint(value: bigint): Buffer {
  const out: number[] = [];
  let v = BigInt.asUintN(64, value);
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.from(out);
}

function tag(field: number, wireType: number): Buffer {
  return varint((BigInt(field) << 3n) | BigInt(wireType & 7));
}

interface WireField {
  start: number;
  tagEnd: number;
  end: number;
  field: number;
  wireType: number;
}

function readVarint(b: Buffer, off: number): [bigint, number] | undefined {
  let v = 0n;
  for (let shift = 0n, i = off; i < b.length && shift < 70n; i++, shift += 7n) {
    v |= BigInt(b[i]! & 0x7f) << shift;
    if (!(b[i]! & 0x80)) return [v, i + 1];
  }
  return undefined;
}

/** The top-level fields of `body`, as far as they parse. */
function scan(body: Buffer): WireField[] {
  const fields: WireField[] = [];
  for (let off = 0; off < body.length; ) {
    const t = readVarint(body, off);
    if (!t) break;
    const [key, tagEnd] = t;
    const wireType = Number(key & 7n);
    let end: number;
    if (wireType === 0) {
      const v = readVarint(body, tagEnd);
      if (!v) break;
      end = v[1];
    } else if (wireType === 1) end = tagEnd + 8;
    else if (wireType === 5) end = tagEnd + 4;
    else if (wireType === 2) {
      const l = readVarint(body, tagEnd);
      if (!l) break;
      end = l[1] + Number(l[0]);
    } else break;
    if (end > body.length) break;
    fields.push({ start: off, tagEnd, end, field: Number(key >> 3n), wireType });
    off = end;
  }
  return fields;
}

/** The names of the mutations, for the summary of what a run sent. */
export const MUTATIONS = [
  'flip', 'truncate', 'unknown-field', 'huge-varint', 'overlong-varint', 'wrong-wire-type',
  'length-past-end', 'duplicate', 'insert', 'noise', 'deep-groups', 'empty',
] as const;
export type Mutation = (typeof MUTATIONS)[number];

/** `body` changed by one mutation (named in the result). */
export function mutate(rand: Rand, body: Buffer): { body: Buffer; mutation: Mutation } {
  const mutation = rand.pick(MUTATIONS);
  const at = (): number => rand.int(body.length + 1);
  const fields = scan(body);
  const someField = fields.length ? rand.pick(fields) : undefined;
  let out: Buffer;
  switch (mutation) {
    case 'flip': {
      out = Buffer.from(body.length ? body : Buffer.alloc(1));
      for (let n = rand.range(1, 3); n > 0; n--) out[rand.int(out.length)] = rand.int(256);
      break;
    }
    case 'truncate':
      out = body.subarray(0, Math.max(0, at() - 1));
      break;
    case 'unknown-field': {
      const wt = rand.int(8);
      const payload = wt === 0 ? varint(BigInt(rand.int(1 << 30))) : wt === 1 ? rand.bytes(8) : wt === 5 ? rand.bytes(4) : wt === 2 ? Buffer.concat([varint(3n), rand.bytes(3)]) : rand.bytes(rand.int(4));
      out = Buffer.concat([body, tag(rand.pick([15, 100, 1000, 536870911]), wt), payload]);
      break;
    }
    case 'huge-varint':
      // The largest 64-bit value in a field the message has (or field 1), as a varint.
      out = Buffer.concat([body, tag(someField?.field ?? 1, 0), varint(rand.pick([2n ** 64n - 1n, 2n ** 63n, 2n ** 53n + 1n]))]);
      break;
    case 'overlong-varint':
      // Eleven continuation bytes: longer than any varint may be.
      out = Buffer.concat([body, tag(someField?.field ?? 1, 0), Buffer.alloc(11, 0xff), Buffer.from([1])]);
      break;
    case 'wrong-wire-type': {
      if (!someField) {
        out = Buffer.concat([tag(1, 0), varint(5n)]);
        break;
      }
      const others = [0, 1, 2, 3, 4, 5, 6, 7].filter((w) => w !== someField.wireType);
      out = Buffer.concat([body.subarray(0, someField.start), tag(someField.field, rand.pick(others)), body.subarray(someField.tagEnd)]);
      break;
    }
    case 'length-past-end': {
      const f = fields.find((x) => x.wireType === 2);
      const len = varint(BigInt(rand.pick([body.length + 1, 0x7fffffff, 2 ** 40])));
      out = f
        ? Buffer.concat([body.subarray(0, f.tagEnd), len, body.subarray(readVarint(body, f.tagEnd)![1])])
        : Buffer.concat([body, tag(1, 2), len]);
      break;
    }
    case 'duplicate':
      out = Buffer.concat([body, body]);
      break;
    case 'insert': {
      const p = at();
      out = Buffer.concat([body.subarray(0, p), rand.bytes(rand.range(1, 8)), body.subarray(p)]);
      break;
    }
    case 'noise':
      out = rand.bytes(rand.int(64));
      break;
    case 'deep-groups':
      // Start-group tags nested thousands deep: a recursive decoder's stack.
      out = Buffer.concat([Buffer.alloc(rand.pick([100, 5000, 50_000]), 0x0b), body]);
      break;
    case 'empty':
      out = Buffer.alloc(0);
      break;
  }
  return { body: out, mutation };
}
