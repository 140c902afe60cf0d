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
import { decodeNext, unmarshal, kindName, JsonSyntaxError, type JsonValue } from './json-text.js';

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

/** Go's base64.StdEncoding.Decode, with its error's byte offset. */
export function decodeBase64(s: string): Uint8Array {
  const text = s.replace(/[\r\n]/g, ''); // Go's decoder skips newlines
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) {
    // Go reports the first byte it cannot use: an invalid character, or a quantum cut short.
    const bad = /[^A-Za-z0-9+/=]/.exec(text);
    const eq = text.indexOf('=');
    let at: number;
    if (bad && (eq === -1 || bad.index < eq)) at = bad.index;
    else if (eq !== -1) at = badPadding(text, eq);
    else at = text.length - (text.length % 4);
    throw new JsonRequestError(`illegal base64 data at input byte ${at}`);
  }
  const eq = text.indexOf('=');
  if (eq !== -1 && (eq % 4 < 2 || (eq % 4 === 2 && text[eq + 1] !== '='))) throw new JsonRequestError(`illegal base64 data at input byte ${badPadding(text, eq)}`);
  return Buffer.from(text, 'base64');
}

/** Where Go's decoder stops at padding that is not where a quantum may end. */
function badPadding(text: string, eq: number): number {
  const inQuantum = eq % 4;
  if (inQuantum < 2) return eq;
  if (inQuantum === 2) {
    if (text[eq + 1] !== '=') return eq + 1 >= text.length ? eq : eq + 1;
    return eq + 2 < text.length ? eq + 2 : eq;
  }
  return eq + 1 < text.length ? eq + 1 : eq;
}

/** The value of one scalar field from its JSON value (jsonpb's unmarshalValue). */
function scalar(field: protobuf.Field, v: JsonValue): unknown {
  const type = field.type;
  if (field.resolvedType instanceof protobuf.Enum) {
    const e = field.resolvedType;
    if (v.t === 'string') {
      // jsonpb drops the quotes without unescaping: enum names need no escapes.
      const n = e.values[v.raw];
      if (n === undefined) throw new JsonRequestError(`unknown value ${JSON.stringify(v.raw)} for enum ${goName(e)}`);
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
  const take = (f: protobuf.Field): JsonValue | undefined => v.v.get(f.name) ?? v.v.get(camel(f.name));
  // Fields in the order they are declared, oneof members among them: the first error in that
  // order is the one reported, as jsonpb walks the Go struct.
  for (const f of type.fieldsArray) {
    const jv = take(f);
    if (jv === undefined || jv.t === 'null') continue;
    f.resolve();
    if (f.repeated) {
      if (jv.t !== 'array') throw cannot(jv, '[]json.RawMessage');
      out[f.name] = jv.v.map((e) => (f.resolvedType instanceof protobuf.Type ? message(f.resolvedType, e, depth + 1) : scalar(f, e)));
      continue;
    }
    const value = f.resolvedType instanceof protobuf.Type ? message(f.resolvedType, jv, depth + 1) : scalar(f, jv);
    if (value !== undefined) out[f.name] = value;
  }
  return out;
}

const camelNames = new Map<string, string>();
/** protoc's JSON name: lowerCamelCase of the name as written (field names only: one entry each). */
function camel(name: string): string {
  let c = camelNames.get(name);
  if (c === undefined) {
    c = name.replace(/_([a-z0-9])/g, (_, ch: string) => ch.toUpperCase());
    camelNames.set(name, c);
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

/** A decoded message as JSON text, fields at their defaults left out. */
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
