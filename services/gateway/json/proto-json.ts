// Protobuf messages as etcd's gateway writes and reads them in JSON: grpc-gateway's JSONPb
// with OrigName (golang/protobuf's jsonpb). Requests are read with jsonpb's rules and words
// (field names as the .proto writes them or in lowerCamelCase; int64 as a number or a string;
// bytes as standard base64; enums by name or number; null means unset; unknown fields are
// ignored, as etcd's gateway allows them). Responses carry the names as written, int64 as
// strings, bytes as base64 and enums by name, and leave out fields at their default value.
//
// Both directions go through the wire format: a request becomes the bytes a gRPC client would
// have sent, and a response is read from the bytes the service would have sent, so the
// services see exactly what they see from gRPC, and no second set of names is kept in sync.
import protobuf from 'protobufjs';
import { rootAsWritten } from '../../../shared/proto/index.js';
import { decodeNext, goQuote, unmarshal, kindName, JsonSyntaxError, type JsonValue } from './json-text.js';

/** A request that does not read as its message; `message` is what jsonpb would have said. */
export class JsonRequestError extends Error {}

/** `etcdserverpb.RangeRequest.SortOrder` → Go's `etcdserverpb.RangeRequest_SortOrder`. */
function goName(t: protobuf.ReflectionObject): string {
  const parts = t.fullName.replace(/^\./, '').split('.');
  // The package is the leading lower-case parts; nested names join with '_'.
  let i = 0;
  while (i < parts.length - 1 && /^[a-z]/.test(parts[i])) i++;
  return `${parts.slice(0, i).join('.')}.${parts.slice(i).join('_')}`;
}

const cannot = (v: JsonValue | string, goType: string) =>
  new JsonRequestError(`json: cannot unmarshal ${typeof v === 'string' ? v : kindName(v)} into Go value of type ${goType}`);

const INT_RANGES: Record<string, [bigint, bigint]> = {
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  sint64: [-(2n ** 63n), 2n ** 63n - 1n],
  sfixed64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
  fixed64: [0n, 2n ** 64n - 1n],
  int32: [-(2n ** 31n), 2n ** 31n - 1n],
  sint32: [-(2n ** 31n), 2n ** 31n - 1n],
  sfixed32: [-(2n ** 31n), 2n ** 31n - 1n],
  uint32: [0n, 2n ** 32n - 1n],
  fixed32: [0n, 2n ** 32n - 1n],
};
const GO_INT_NAMES: Record<string, string> = { sint64: 'int64', sfixed64: 'int64', fixed64: 'uint64', sint32: 'int32', sfixed32: 'int32', fixed32: 'uint32' };

/** Go's strconv.ParseInt/ParseUint over a JSON number's text: an integer, or undefined. */
function parseInteger(raw: string, type: string): bigint | undefined {
  if (!/^-?\d+$/.test(raw)) return undefined;
  const n = BigInt(raw);
  const [lo, hi] = INT_RANGES[type];
  return n < lo || n > hi ? undefined : n;
}

const B64 = new Int16Array(256).fill(-1);
for (const [i, c] of [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'].entries()) B64[c.charCodeAt(0)] = i;
const EQ = 0x3d;
const isNewline = (b: number | undefined) => b === 0x0a || b === 0x0d;

/**
 * Go's base64.StdEncoding.Decode of a string's UTF-8 bytes (encoding/json's []byte), with its
 * error: "illegal base64 data at input byte N", N a byte offset as Go's decodeQuantum gives it
 * (newlines are skipped, and counted).
 */
export function decodeBase64(s: string): Uint8Array {
  const src = Buffer.from(s, 'utf8');
  const out: number[] = [];
  const corrupt = (at: number) => new JsonRequestError(`illegal base64 data at input byte ${at}`);
  let si = 0;
  while (si < src.length) {
    const q = [0, 0, 0, 0];
    let dlen = 4;
    let trailing = -1;
    for (let j = 0; j < 4; j++) {
      if (si === src.length) {
        if (j === 0) return Uint8Array.from(out);
        // StdEncoding pads: a quantum cut short is corrupt where it began (newlines aside).
        throw corrupt(si - j);
      }
      const c = src[si++]!;
      if (B64[c]! >= 0) {
        q[j] = B64[c]!;
        continue;
      }
      if (isNewline(c)) {
        j--;
        continue;
      }
      if (c !== EQ || j < 2) throw corrupt(si - 1);
      if (j === 2) {
        // "==" is expected, the first "=" is already consumed.
        while (si < src.length && isNewline(src[si])) si++;
        if (si === src.length) throw corrupt(src.length);
        if (src[si] !== EQ) throw corrupt(si - 1);
        si++;
      }
      while (si < src.length && isNewline(src[si])) si++;
      if (si < src.length) trailing = si;
      dlen = j;
      break;
    }
    const val = (q[0]! << 18) | (q[1]! << 12) | (q[2]! << 6) | q[3]!;
    const bytes = [(val >> 16) & 0xff, (val >> 8) & 0xff, val & 0xff];
    out.push(...bytes.slice(0, dlen - 1));
    if (trailing !== -1) throw corrupt(trailing);
    if (dlen < 4) break;
  }
  return Uint8Array.from(out);
}

/** The value of one scalar field from its JSON value (jsonpb's unmarshalValue). */
function scalar(field: protobuf.Field, v: JsonValue): unknown {
  const type = field.type;
  if (field.resolvedType instanceof protobuf.Enum) {
    const e = field.resolvedType;
    if (v.t === 'string') {
      // jsonpb drops the quotes without unescaping: enum names need no escapes. (protobufjs's
      // `values` inherits the names by number: only its own keys are names.)
      const n = Object.hasOwn(e.values, v.raw) ? e.values[v.raw] : undefined;
      if (n === undefined) throw new JsonRequestError(`unknown value ${goQuote(v.raw)} for enum ${goName(e)}`);
      return n;
    }
    if (v.t !== 'number') throw cannot(v, goName(e));
    const n = parseInteger(v.raw, 'int32');
    if (n === undefined) throw cannot(`number ${v.raw}`, goName(e));
    return Number(n);
  }
  if (type in INT_RANGES) {
    const goType = GO_INT_NAMES[type] ?? type;
    // Integers may come quoted: jsonpb strips the quotes and reads what is left as JSON.
    const inner = v.t === 'string' ? unmarshalInner(v.raw) : v;
    if (inner.t === 'null') return undefined;
    if (inner.t !== 'number') throw cannot(inner, goType);
    const n = parseInteger(inner.raw, type);
    if (n === undefined) throw cannot(`number ${inner.raw}`, goType);
    // protobufjs encodes a 64-bit field from its decimal text.
    if (type.endsWith('64')) return n.toString();
    return Number(n);
  }
  if (type === 'double' || type === 'float') {
    const inner = v.t === 'string' ? unmarshalInner(v.raw) : v;
    if (inner.t === 'null') return undefined;
    if (inner.t !== 'number') throw cannot(inner, type === 'double' ? 'float64' : 'float32');
    return Number(inner.raw);
  }
  if (type === 'bool') {
    if (v.t !== 'bool') throw cannot(v, 'bool');
    return v.v;
  }
  if (type === 'string') {
    if (v.t !== 'string') throw cannot(v, 'string');
    return v.v;
  }
  if (type === 'bytes') {
    if (v.t === 'array') return bytesFromArray(v);
    if (v.t !== 'string') throw cannot(v, '[]uint8');
    return decodeBase64(v.v);
  }
  throw new JsonRequestError(`kvs: field ${field.name} of type ${type} cannot be read from JSON`);
}

/** Go also reads a []byte from an array of numbers. */
function bytesFromArray(v: { t: 'array'; v: JsonValue[] }): Uint8Array {
  return Uint8Array.from(
    v.v.map((e) => {
      if (e.t === 'null') return 0;
      if (e.t !== 'number') throw cannot(e, 'uint8');
      const n = /^\d+$/.test(e.raw) ? Number(e.raw) : NaN;
      if (!(n <= 255)) throw cannot(`number ${e.raw}`, 'uint8');
      return n;
    }),
  );
}

function unmarshalInner(raw: string): JsonValue {
  try {
    return unmarshal(raw);
  } catch (err) {
    if (err instanceof JsonSyntaxError) throw new JsonRequestError(err.message);
    throw err;
  }
}

/**
 * A request nests its messages at most this deep. protobufjs encodes and decodes no deeper
 * than its recursion limit (100, protoc's), and an answer nests one level deeper than its
 * request (a PutResponse's header, a RangeResponse's kvs): the answer to a deeper request
 * would not decode into JSON.
 */
const MAX_REQUEST_DEPTH = protobuf.util.recursionLimit - 1;

/**
 * A message's fields from a JSON value, as the plain object protobufjs encodes. `depth`: how
 * many messages enclose this one. A request nested deeper than MAX_REQUEST_DEPTH (a Txn in a
 * Txn about 50 times) is refused here, as a request that does not read.
 */
function message(type: protobuf.Type, v: JsonValue, depth = 0): Record<string, unknown> {
  if (depth > MAX_REQUEST_DEPTH) throw new JsonRequestError(`kvs: the request nests messages more than ${MAX_REQUEST_DEPTH} deep`);
  if (v.t === 'null') return {};
  if (v.t !== 'object') throw cannot(v, 'map[string]json.RawMessage');
  const out: Record<string, unknown> = {};
  // jsonpb takes both spellings and, given both, the lowerCamelCase one.
  const take = (f: protobuf.Field): JsonValue | undefined => v.v.get(jsonName(f.name)) ?? v.v.get(f.name);
  // jsonpb walks the Go struct: the plain fields in the order they are declared (the first
  // error in that order is the one reported), then the members of oneofs (in Go's map order,
  // which varies; here in declaration order, and of two members of one oneof the later wins).
  for (const f of orderedFields(type)) {
    const jv = take(f);
    if (jv === undefined) continue;
    f.resolve();
    const sub = f.resolvedType instanceof protobuf.Type ? f.resolvedType : undefined;
    if (jv.t === 'null') {
      // Null leaves a field unset, but sets a oneof to its member: a scalar one at its zero
      // value (sent on the wire), a message one to nothing.
      if (!f.partOf) continue;
      for (const other of f.partOf.fieldsArray) delete out[other.name];
      if (!sub) out[f.name] = zeroValue(f);
      continue;
    }
    let value: unknown;
    if (f.repeated) {
      if (jv.t !== 'array') throw cannot(jv, '[]json.RawMessage');
      // A null element is Go's zero value: an empty message (etcd's gateway fails on a nil
      // message element when it encodes it), a zero scalar.
      value = jv.v.map((e) => (sub ? message(sub, e, depth + 1) : e.t === 'null' ? zeroValue(f) : scalar(f, e)));
    } else {
      value = sub ? message(sub, jv, depth + 1) : scalar(f, jv);
    }
    if (value === undefined) continue;
    if (f.partOf) for (const other of f.partOf.fieldsArray) delete out[other.name];
    out[f.name] = value;
  }
  return out;
}

const fieldOrder = new WeakMap<protobuf.Type, protobuf.Field[]>();
function orderedFields(type: protobuf.Type): protobuf.Field[] {
  let fields = fieldOrder.get(type);
  if (!fields) {
    fields = [...type.fieldsArray.filter((f) => !f.partOf), ...type.fieldsArray.filter((f) => f.partOf)];
    fieldOrder.set(type, fields);
  }
  return fields;
}

/** A scalar field's zero value, as protobufjs encodes it. */
function zeroValue(f: protobuf.Field): unknown {
  if (f.resolvedType instanceof protobuf.Enum) return 0;
  if (f.type === 'bool') return false;
  if (f.type === 'string') return '';
  if (f.type === 'bytes') return new Uint8Array(0);
  if (f.type in INT_RANGES && f.type.endsWith('64')) return '0';
  return 0;
}

/** protoc's JSON name of a field: each '_' dropped and the character after it upper-cased. */
const jsonNames = new Map<string, string>();
/** protoc's JSON name (field names only: one entry each, computed once). */
function jsonName(name: string): string {
  let c = jsonNames.get(name);
  if (c === undefined) {
    c = name.includes('_') ? name.replace(/_+(.?)/g, (_, ch: string) => ch.toUpperCase()) : name;
    jsonNames.set(name, c);
  }
  return c;
}

const wireTypes = new Map<string, protobuf.Type>();
/** A message type by full name, with the field names as the .proto files write them. */
export function typeAsWritten(fullName: string): protobuf.Type {
  let t = wireTypes.get(fullName);
  if (!t) {
    t = rootAsWritten().lookupType(fullName);
    wireTypes.set(fullName, t);
  }
  return t;
}

/** A JSON value as the wire bytes of `type` (the request a gRPC client would have sent). */
export function jsonToWire(type: protobuf.Type, v: JsonValue): Buffer {
  return Buffer.from(type.encode(message(type, v)).finish());
}

/**
 * The next request of a body (a stream's bodies hold several, one after another): its wire
 * bytes and where the next starts, or undefined at the end. Syntax errors carry Go's words.
 */
export function readRequest(type: protobuf.Type, text: string, from: number): { wire: Buffer; end: number } | undefined {
  let next;
  try {
    next = decodeNext(text, from);
  } catch (err) {
    if (err instanceof JsonSyntaxError) throw new JsonRequestError(err.message);
    throw err;
  }
  if (!next) return undefined;
  return { wire: jsonToWire(type, next.value), end: next.end };
}

// ---------------------------------------------------------------- responses

const HTML_UNSAFE = /[<>&\u2028\u2029]/g;
const HTML_ESCAPES: Record<string, string> = { '<': '\\u003c', '>': '\\u003e', '&': '\\u0026', '\u2028': '\\u2028', '\u2029': '\\u2029' };
/** Go's encoding/json escapes these in strings; so does etcd's gateway. */
function jsonString(s: string): string {
  const q = JSON.stringify(s);
  return HTML_UNSAFE.test(q) ? q.replace(HTML_UNSAFE, (c) => HTML_ESCAPES[c]) : q;
}

function scalarJson(field: protobuf.Field, value: unknown): string | undefined {
  if (field.resolvedType instanceof protobuf.Enum) {
    const n = value as number;
    if (n === 0) return undefined;
    const name = field.resolvedType.valuesById[n];
    return name === undefined ? String(n) : jsonString(name);
  }
  switch (field.type) {
    case 'int64':
    case 'sint64':
    case 'sfixed64':
    case 'uint64':
    case 'fixed64': {
      const s = typeof value === 'number' ? String(value) : (value as protobuf.Long).toString();
      return s === '0' ? undefined : `"${s}"`;
    }
    case 'bool':
      return value ? 'true' : undefined;
    case 'string':
      return value ? jsonString(value as string) : undefined;
    case 'bytes': {
      const b = value as Uint8Array;
      return b.length ? `"${Buffer.from(b.buffer, b.byteOffset, b.length).toString('base64')}"` : undefined;
    }
    default: {
      const n = value as number;
      return n === 0 ? undefined : String(n);
    }
  }
}

/** A decoded message as JSON text, fields at their defaults left out. */
const fieldKeys = new Map<string, string>();
/** A field's name as a JSON object key, `"name":` (field names only: one entry each). */
function fieldKey(name: string): string {
  let k = fieldKeys.get(name);
  if (k === undefined) {
    k = `${jsonString(name)}:`;
    fieldKeys.set(name, k);
  }
  return k;
}

export function messageJson(type: protobuf.Type, msg: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const f of type.fieldsArray) {
    const value = msg[f.name];
    if (value == null) continue;
    f.resolve();
    const sub = f.resolvedType instanceof protobuf.Type ? f.resolvedType : undefined;
    let text: string | undefined;
    if (f.repeated) {
      const items = value as unknown[];
      if (items.length === 0) continue;
      text = `[${items.map((e) => (sub ? messageJson(sub, e as Record<string, unknown>) : scalarJson(f, e) ?? zeroJson(f))).join(',')}]`;
    } else {
      text = sub ? messageJson(sub, value as Record<string, unknown>) : scalarJson(f, value);
    }
    if (text !== undefined) parts.push(fieldKey(f.name) + text);
  }
  return `{${parts.join(',')}}`;
}

/** An element of a repeated scalar at its default is still written (it holds a place). */
function zeroJson(f: protobuf.Field): string {
  if (f.resolvedType instanceof protobuf.Enum) return jsonString(f.resolvedType.valuesById[0] ?? '0');
  if (f.type === 'bool') return 'false';
  if (f.type === 'string' || f.type === 'bytes') return '""';
  if (f.type.endsWith('64')) return '"0"';
  return '0';
}

/** Wire bytes of `type` as the JSON etcd's gateway writes. */
export function wireToJson(type: protobuf.Type, wire: Uint8Array): string {
  return messageJson(type, type.decode(wire) as unknown as Record<string, unknown>);
}
