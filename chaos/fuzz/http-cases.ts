// Fuzz cases for the JSON gateway on the client port (etcd's grpc-gateway over HTTP/1.x,
// services/gateway/json): one TCP connection each, its bytes written raw. Requests go to every
// route of routes.ts (and /v3beta/, /version, /health, /metrics, unknown paths), well-formed
// or broken: in the request line, the headers (missing, duplicate, oversized, lying), the body's
// framing (Content-Length short and long, malformed chunked encoding, none), Expect:
// 100-continue, HTTP/1.0, pipelining, and in the JSON (truncation, byte flips, wrong value
// types, deep nesting, huge numbers, invalid base64, unknown fields). The streamed routes
// (Watch, LeaseKeepAlive) get several requests in one body. Some connections are plain
// garbage. The bytes are cut into writes at random places, sometimes with a short stall between
// two; then the client half-closes. Every connection is checked as a whole by the scratch guard
// (http-guard.ts) before it is sent, and drawn again if a write could leave the scratch space.
import type protobuf from 'protobufjs';
import { ROUTES } from '../../services/gateway/json/routes.js';
import type { Case, CaseResult } from './cases.js';
import { CLIENT_POOLS } from './client-cases.js';
import { connectionStaysInScratch, gatewayRoute, type GatewayRoute } from './http-guard.js';
import { randomMessage } from './protobuf-fuzz.js';
import type { Rand } from './random.js';
import { SCRATCH } from './scratch-guard.js';
import { exchange, outcomeOf, type Plan, type Write } from './http1-exchange.js';

/** How long the server has to close a connection once the client has half-closed it. */
export const HTTP_ANSWER_MS = 5000;

// ---------------------------------------------------------------- JSON

/** A JSON value as the fuzzer writes it: numbers and odd bits as their raw text, objects as pairs (a key may repeat). */
type J = null | boolean | string | Raw | J[] | Obj;
class Raw {
  constructor(readonly text: string) {}
}
class Obj {
  constructor(readonly fields: [string, J][]) {}
}

function jsonText(j: J, rand: Rand, spaced: boolean): string {
  const sp = spaced ? () => rand.pick([' ', '\n', '\t', '  ', '\r\n']) : () => '';
  if (j === null) return 'null';
  if (typeof j === 'boolean') return String(j);
  if (typeof j === 'string') return JSON.stringify(j);
  if (j instanceof Raw) return j.text;
  if (Array.isArray(j)) return `[${j.map((e) => sp() + jsonText(e, rand, spaced)).join(',')}${sp()}]`;
  return `{${j.fields.map(([k, v]) => `${sp()}${JSON.stringify(k)}${sp()}:${sp()}${jsonText(v, rand, spaced)}`).join(',')}${sp()}}`;
}

const camel = (name: string) => name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64');
const num = (v: unknown) => new Raw(String(v));

/** A random message as an etcd client would write it: names as written (or camelCase), int64 as strings (or numbers), bytes as base64, enums by name (or number). */
function messageJ(rand: Rand, type: protobuf.Type, obj: Record<string, unknown>): Obj {
  const fields: [string, J][] = [];
  for (const f of type.fieldsArray) {
    const v = obj[f.name];
    if (v === undefined) continue;
    f.resolve();
    const one = (e: unknown): J => {
      const rt = f.resolvedType;
      if (rt && 'fieldsArray' in rt) return messageJ(rand, rt as protobuf.Type, e as Record<string, unknown>);
      if (rt && 'values' in rt) {
        const name = (rt as protobuf.Enum).valuesById[e as number];
        return name !== undefined && rand.chance(0.8) ? name : num(e);
      }
      switch (f.type) {
        case 'bool':
          return e as boolean;
        case 'string':
          return e as string;
        case 'bytes':
          return b64(e as Uint8Array);
        case 'double':
        case 'float':
          return Number.isFinite(e) ? num(e) : String(e);
        default:
          return f.type.endsWith('64') && rand.chance(0.8) ? String(e) : num(e);
      }
    };
    fields.push([rand.chance(0.85) ? f.name : camel(f.name), f.repeated ? (v as unknown[]).map(one) : one(v)]);
  }
  return new Obj(fields);
}

const HUGE_NUMBERS = ['99999999999999999999999999', '-9223372036854775809', '18446744073709551616', '1e400', '-1e-400', '1.5', '-0', '0.0', '1E2', '00', '01', '-', '0x10', '+1', '.5', 'NaN', 'Infinity', '9'.repeat(5000)];
const BAD_BASE64 = ['Zm9v!', 'Zm9', 'Zg=', 'Z===', '====', 'Zm9vYg==Zm9v', 'Zm 9v', 'Zm9v\nYmFy', '\u00e9', 'Zm9vYg=', '-_-_'];
const ODD_STRINGS = ['\\u0000', '\\ud800', '\\udc00x', '\\x41', '\\u12', '\\', '\u0001', '\u2028<>&'];

/** A value of some other JSON kind than a field expects. */
function wrongValue(rand: Rand): J {
  return rand.pick<() => J>([
    () => null,
    () => rand.chance(0.5),
    () => 'not-a-number',
    () => num(rand.pick(HUGE_NUMBERS)),
    () => [],
    () => [num(1), 'x', null],
    () => new Obj([]),
    () => new Obj([['key', 'Zm9v']]),
    () => rand.pick(BAD_BASE64),
    () => new Raw(`"${rand.pick(ODD_STRINGS)}"`),
  ])();
}

/** A value nested `depth` levels deep in arrays or objects. */
function deep(rand: Rand, depth: number, inner: J): Raw {
  const obj = rand.chance(0.5);
  const open = obj ? '{"a":' : '[';
  const close = obj ? '}' : ']';
  // Sometimes never closed: the parser meets the end of the body that deep.
  return new Raw(open.repeat(depth) + jsonText(inner, rand, false) + (rand.chance(0.8) ? close.repeat(depth) : ''));
}

/** Nested transactions `depth` levels deep (the nesting a real message can have), the innermost empty, or with a read or a write. */
function deepTxn(rand: Rand, depth: number): Raw {
  let s = rand.pick(['{}', `{"success":[{"request_put":{"key":"${b64(Buffer.from(`${SCRATCH}deep`))}"}}]}`, `{"success":[{"request_range":{"key":"${b64(Buffer.from('seed/'))}","range_end":"${b64(Buffer.from('seed0'))}"}}]}`]);
  for (let i = 0; i < depth; i++) s = `{"success":[{"request_txn":${s}}]}`;
  return new Raw(s);
}

const DEPTHS = [10, 100, 1000, 5000, 10_001, 20_000, 100_000];

/** One structural change to a message: the mutation's name. */
function mutateJ(rand: Rand, o: Obj, type: protobuf.Type): string {
  const pickField = () => (o.fields.length ? rand.int(o.fields.length) : -1);
  // (A message with no fields, such as HashRequest, gets unknown ones.)
  const field = (): { name: string; type: string; resolvedType: unknown } => (type.fieldsArray.length ? rand.pick(type.fieldsArray) : { name: 'unknown', type: 'string', resolvedType: null });
  return rand.pick<() => string>([
    () => {
      const i = pickField();
      if (i >= 0) o.fields[i]![1] = wrongValue(rand);
      else o.fields.push([field().name, wrongValue(rand)]);
      return 'wrong-type';
    },
    () => {
      o.fields.push([rand.pick(['no_such_field', 'Key', 'KEY', '', 'key ', '__proto__', 'constructor', '\u0000']), wrongValue(rand)]);
      return 'unknown-field';
    },
    () => {
      const ints = type.fieldsArray.filter((f) => !f.resolvedType && !['bool', 'string', 'bytes'].includes(f.type));
      const f = ints.length ? rand.pick(ints) : field();
      const n = rand.pick(HUGE_NUMBERS);
      o.fields.push([f.name, rand.chance(0.5) ? num(n) : n]);
      return 'huge-number';
    },
    () => {
      const bytes = type.fieldsArray.filter((f) => f.type === 'bytes');
      o.fields.push([(bytes.length ? rand.pick(bytes) : field()).name, rand.pick(BAD_BASE64)]);
      return 'bad-base64';
    },
    () => {
      const depth = rand.pick(DEPTHS);
      o.fields.push([rand.chance(0.5) ? field().name : 'unknown', deep(rand, depth, num(1))]);
      return `deep(${depth})`;
    },
    () => {
      // A repeated key: the last one counts, as in Go's map.
      const i = pickField();
      if (i >= 0) o.fields.push([o.fields[i]![0], wrongValue(rand)]);
      return 'duplicate-key';
    },
    () => {
      const i = pickField();
      if (i >= 0) o.fields[i]![1] = null;
      return 'null-field';
    },
    () => {
      o.fields.push([field().name, new Raw(`"${rand.pick(ODD_STRINGS)}"`)]);
      return 'odd-string';
    },
  ])();
}

/** Changes to the JSON text as bytes. */
function mutateText(rand: Rand, text: Buffer): { body: Buffer; note: string } {
  const at = () => rand.int(text.length + 1);
  return rand.pick<() => { body: Buffer; note: string }>([
    () => ({ body: text.subarray(0, Math.max(0, at() - 1)), note: 'truncated' }),
    () => {
      const b = Buffer.from(text.length ? text : Buffer.from('{}'));
      for (let n = rand.range(1, 3); n > 0; n--) b[rand.int(b.length)] = rand.int(256);
      return { body: b, note: 'byte-flip' };
    },
    () => {
      const p = at();
      return { body: Buffer.concat([text.subarray(0, p), rand.pick([Buffer.from([0xff, 0xfe]), Buffer.from([0xc3]), Buffer.from([0]), rand.bytes(rand.range(1, 6))]), text.subarray(p)]), note: 'bytes-inserted' };
    },
    () => ({ body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), text]), note: 'bom' }),
    () => ({ body: Buffer.concat([text, Buffer.from(rand.pick(['}', ']', 'garbage', ' {"key":"Zm9v"}', '\u0000', '{']))]), note: 'trailing' }),
    () => ({ body: Buffer.from(rand.pick(['', ' ', '\r\n', 'null', '[]', '"x"', '0', 'true', '[{}]', '{"', '{"key"', '{"key":', '{"key":"Zm9v"', '{,}', '{"a":1,}', "{'key':'x'}"])), note: 'other-value' }),
  ])();
}

// ---------------------------------------------------------------- request bodies

interface Route {
  path: string;
  route?: GatewayRoute;
}

const PATHS: Route[] = [...ROUTES.keys()].map((path) => ({ path, route: gatewayRoute(path) }));
const PROBES = ['/version', '/health', '/health?exclude=NOSPACE', '/metrics'];
const UNKNOWN = ['/v3/kv/nosuch', '/v3/', '/v3alpha/kv/range', '/', '/favicon.ico', '/v2/keys/a', '/v3/kv/range/', '//v3/kv/range', '/V3/KV/RANGE', '/v3/kv/%72ange', '/v3/kv/../kv/range'];

/** Makes `o` write inside the scratch prefix where the route writes (most of the time). */
function scratchKeys(rand: Rand, route: GatewayRoute, o: Record<string, unknown>): void {
  const k = () => Buffer.from(`${SCRATCH}${rand.pick(['a', 'b', 'lock', 'e', `${rand.int(100)}`])}`);
  const name = route.grpc.split('/')[2];
  if (name === 'Put' || name === 'Lock' || name === 'Campaign' || name === 'Unlock') {
    o.key = k();
    o.name = k();
  }
  if (name === 'DeleteRange') {
    o.key = k();
    if (rand.chance(0.5)) o.range_end = Buffer.from('fuzz0');
    else delete o.range_end;
  }
  if (name === 'Proclaim' || name === 'Resign') o.leader = { ...(o.leader as object), key: k() };
}

/** One JSON request for `route`, or for a streamed route several: the body's bytes and notes. */
function jsonBody(rand: Rand, route: GatewayRoute, notes: string[]): Buffer {
  const one = (): { j: J; note?: string } => {
    const o = randomMessage(rand, route.requestType, CLIENT_POOLS);
    if (rand.chance(0.7)) scratchKeys(rand, route, o);
    const j = messageJ(rand, route.requestType, o);
    if (route.grpc.endsWith('/Txn') && rand.chance(0.15)) {
      const depth = rand.pick([48, 49, 1000, 3000]);
      return { j: deepTxn(rand, depth), note: `deep-txn(${depth})` };
    }
    if (rand.chance(0.3)) return { j, note: mutateJ(rand, j, route.requestType) };
    return { j };
  };
  const count = route.requestStream ? rand.weighted([[1, 0], [4, 1], [4, 3], [1, 8]] as const) : 1;
  const parts: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const { j, note } = one();
    if (note) notes.push(note);
    parts.push(Buffer.from(jsonText(j, rand, rand.chance(0.2))));
    if (route.requestStream) parts.push(Buffer.from(rand.pick(['', '\n', ' ', '\r\n'])));
  }
  let body: Buffer = Buffer.concat(parts);
  if (rand.chance(0.2)) {
    const m = mutateText(rand, body);
    body = m.body;
    notes.push(m.note);
  }
  if (rand.chance(0.01)) {
    // Past the gateway's body limit (3 x the gRPC message limit), or a message past the gRPC limit.
    body = rand.chance(0.5) ? Buffer.concat([Buffer.alloc(7 * 1024 * 1024, ' '), body]) : Buffer.from(`{"key":"${b64(Buffer.from(`${SCRATCH}big`))}","value":"${b64(Buffer.alloc(2_200_000, 'v'))}"}`);
    notes.push(`oversized(${body.length})`);
  }
  return body;
}

// ---------------------------------------------------------------- HTTP/1.x requests

/** A request as lines and body, before it becomes bytes (the mutations work on this). */
interface Draft {
  method: string;
  target: string;
  version: string;
  /** Header lines ("Name: value"), Content-Length and Transfer-Encoding added from `framing`. */
  headers: string[];
  body: Buffer;
  framing: 'length' | 'chunked' | 'none';
  /** Content-Length written when framing is 'length' (a lie when it differs from body.length). */
  contentLength?: string;
  /** Chunked body as written (undefined: well-formed chunks of body). */
  chunked?: Buffer;
  /** Line ending. */
  eol: string;
}

/** Well-formed chunks of `body`, sometimes with extensions and trailers. */
function chunks(rand: Rand, body: Buffer): Buffer {
  const out: Buffer[] = [];
  for (let off = 0; off < body.length; ) {
    const len = rand.chance(0.5) ? body.length - off : rand.range(1, body.length - off);
    out.push(Buffer.from(`${len.toString(16)}${rand.chance(0.1) ? ';ext=1' : ''}\r\n`), body.subarray(off, off + len), Buffer.from('\r\n'));
    off += len;
  }
  out.push(Buffer.from(`0\r\n${rand.chance(0.1) ? 'X-Trailer: t\r\n' : ''}\r\n`));
  return Buffer.concat(out);
}

/** A broken chunked encoding of `body`. */
function badChunks(rand: Rand, body: Buffer): { bytes: Buffer; note: string } {
  const len = body.length;
  return rand.pick<() => { bytes: Buffer; note: string }>([
    () => ({ bytes: Buffer.concat([Buffer.from('zz\r\n'), body, Buffer.from('\r\n0\r\n\r\n')]), note: 'chunk-size-not-hex' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${rand.pick(['-1', ' 5', '0x5', 'ffffffffffffffffffff', '1'.repeat(40), ''])}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]), note: 'chunk-size-odd' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${(len + rand.range(1, 50)).toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]), note: 'chunk-size-long' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${Math.max(0, len - rand.range(1, 5)).toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]), note: 'chunk-size-short' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${len.toString(16)}\r\n`), body, Buffer.from('0\r\n\r\n')]), note: 'chunk-without-crlf' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${len.toString(16)}\r\n`), body, Buffer.from('\r\n')]), note: 'no-last-chunk' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${len.toString(16)}\n`), body, Buffer.from('\n0\n\n')]), note: 'chunks-lf-only' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${len.toString(16)};${'e'.repeat(rand.pick([100, 20_000]))}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]), note: 'chunk-extension-long' }),
    () => ({ bytes: Buffer.concat([Buffer.from(`${len.toString(16)}\r\n`), body, Buffer.from(`\r\n0\r\n${'X-T: v\r\n'.repeat(rand.pick([1, 3000]))}`)]), note: 'trailers-unterminated' }),
  ])();
}

/** Breaks a draft; returns what it did. */
const HTTP_MUTATIONS: ((rand: Rand, d: Draft) => string)[] = [
  (r, d) => {
    d.method = r.pick(['post', 'GET', 'PUT', 'DELETE', 'HEAD', 'PATCH', 'OPTIONS', 'CONNECT', 'TRACE', 'FOO', '', 'P OST', 'SEARCH']);
    return `method(${d.method})`;
  },
  (r, d) => {
    d.target = r.pick([`${d.target}?a=1&b`, `http://kvs${d.target}`, '*', '', `${d.target} extra`, `${d.target}\u0000`, `${d.target}/\u00e9`, `/${'a'.repeat(r.pick([8000, 70_000]))}`, `${d.target}?${'q'.repeat(20_000)}`, `${d.target}#frag`]);
    return `target(${d.target.length > 40 ? `${d.target.length} chars` : d.target})`;
  },
  (r, d) => {
    d.version = r.pick(['HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0', 'HTTP/0.9', '', 'http/1.1', 'HTTP/1.1 extra', 'HTTP/11', 'HTTP/1.', 'HTTPS/1.1']);
    return `version(${d.version})`;
  },
  (r, d) => {
    d.eol = r.pick(['\n', '\r', '\r\r\n', '\n\r']);
    return `eol(${JSON.stringify(d.eol)})`;
  },
  (r, d) => {
    d.headers = d.headers.filter((h) => !h.startsWith('Host:'));
    if (r.chance(0.5)) d.headers.push('Host: a', 'Host: b');
    return 'host-missing-or-twice';
  },
  (r, d) => {
    if (d.framing !== 'length') return 'none';
    const n = d.body.length;
    d.contentLength = r.pick([String(Math.max(0, n - r.range(1, 20))), String(n + r.range(1, 1000)), '-1', '+5', ' 5', '5 5', 'abc', '0x10', '99999999999999999999', String(n) + ', ' + String(n), '']);
    return `content-length(${d.contentLength} for ${n})`;
  },
  (r, d) => {
    // Two Content-Length headers, equal or not.
    d.headers.push(`Content-Length: ${r.chance(0.5) ? d.body.length : d.body.length + 1}`);
    return 'content-length-twice';
  },
  (r, d) => {
    // Both framings at once (request smuggling's shape).
    if (d.framing === 'length') d.headers.push(`Transfer-Encoding: ${r.pick(['chunked', 'gzip, chunked', 'identity'])}`);
    else d.headers.push(`Content-Length: ${r.int(100)}`);
    return 'length-and-chunked';
  },
  (r, d) => {
    d.headers.push(`Transfer-Encoding: ${r.pick(['gzip', 'xchunked', 'chunked, gzip', 'chunked ', 'CHUNKED'])}`);
    return 'transfer-encoding-odd';
  },
  (r, d) => {
    d.framing = 'chunked';
    const b = badChunks(r, d.body);
    d.chunked = b.bytes;
    return b.note;
  },
  (r, d) => {
    d.framing = 'none';
    return 'no-framing';
  },
  (r, d) => {
    const bad = r.pick(['X-No-Colon', 'Bad Name: x', 'Bad(Name: x', 'Host : x', 'X-Ctl: a\u0001b\u007f', 'X-Ctl: a\rb', ': empty name', 'X-Fold: a\r\n continued', 'X-Utf8: \u00e9\u00ff', ' X-Leading-Space: x']);
    d.headers.push(bad);
    return `bad-header(${JSON.stringify(bad)})`;
  },
  (r, d) => {
    const size = r.pick([8000, 17_000, 100_000]);
    d.headers.push(`${r.pick(['X-Big', 'Authorization', 'Content-Type'])}: ${'h'.repeat(size)}`);
    return `header-oversized(${size})`;
  },
  (r, d) => {
    const n = r.pick([200, 2000]);
    for (let i = 0; i < n; i++) d.headers.push(`X-H${i}: v`);
    return `many-headers(${n})`;
  },
  (r, d) => {
    d.headers.push(`Expect: ${r.pick(['100-continue', '100-Continue', 'something-else'])}`);
    return 'expect';
  },
  (r, d) => {
    d.headers.push(`Connection: ${r.pick(['close', 'keep-alive', 'upgrade', 'close, keep-alive'])}`);
    if (r.chance(0.4)) d.headers.push(`Upgrade: ${r.pick(['h2c', 'websocket', 'HTTP/2.0'])}`);
    return 'connection';
  },
  (r, d) => {
    d.headers = d.headers.filter((h) => !h.startsWith('Content-Type:'));
    if (r.chance(0.7)) d.headers.push(`Content-Type: ${r.pick(['text/plain', 'application/grpc', 'application/json; charset=latin1', 'multipart/form-data; boundary=x', ''])}`);
    return 'content-type';
  },
  (r, d) => {
    d.headers.push(r.pick(['Authorization: garbage', 'Authorization:', 'Authorization: Bearer a.b.c', `Grpc-Timeout: ${r.pick(['1m', '100n', 'abc', '99999999H', '0S', '-1S', '2147483648m'])}`, 'Grpc-Metadata-Token: x', 'Content-Encoding: gzip']));
    return `header(${d.headers.at(-1)})`;
  },
];

function draftFor(rand: Rand, notes: string[]): Draft {
  const kind = rand.weighted([[85, 'route'], [8, 'probe'], [7, 'unknown']] as const);
  const r = kind === 'route' ? rand.pick(PATHS) : undefined;
  let target = kind === 'route' ? r!.path : kind === 'probe' ? rand.pick(PROBES) : rand.pick(UNKNOWN);
  if (kind === 'route' && rand.chance(0.1)) target = target.replace(/^\/v3\//, '/v3beta/');
  const body = r?.route ? jsonBody(rand, r.route, notes) : rand.chance(0.5) ? Buffer.alloc(0) : Buffer.from('{}');
  const headers = ['Host: 127.0.0.1', 'Content-Type: application/json'];
  // A watch or keep-alive body in chunks, as a client streams its requests.
  const framing = r?.route?.requestStream && rand.chance(0.5) ? 'chunked' : rand.chance(0.1) ? 'chunked' : 'length';
  if (r?.route && rand.chance(0.05)) headers.push(`Grpc-Timeout: ${rand.range(1, 1500)}m`);
  return { method: kind === 'probe' ? 'GET' : 'POST', target, version: 'HTTP/1.1', headers, body, framing, eol: '\r\n' };
}

function draftBytes(rand: Rand, d: Draft): Buffer {
  const lines = [`${d.method} ${d.target} ${d.version}`.replace(/ $/, ''), ...d.headers];
  if (d.framing === 'length') lines.push(`Content-Length: ${d.contentLength ?? d.body.length}`);
  if (d.framing === 'chunked') lines.push('Transfer-Encoding: chunked');
  const head = Buffer.from(lines.map((l) => l + d.eol).join('') + d.eol, 'latin1');
  const body = d.framing === 'chunked' ? (d.chunked ?? chunks(rand, d.body)) : d.body;
  return Buffer.concat([head, body]);
}

// ---------------------------------------------------------------- garbage

function garbage(rand: Rand): { bytes: Buffer; note: string } {
  return rand.pick<() => { bytes: Buffer; note: string }>([
    () => ({ bytes: rand.bytes(rand.range(1, 4096)), note: 'random bytes' }),
    () => ({ bytes: Buffer.concat([Buffer.from('P'), rand.bytes(rand.range(0, 64))]), note: "'P' and random bytes" }),
    () => ({ bytes: Buffer.from(rand.pick(['P', 'PO', 'PU', 'G', '\r\n', '\r\n\r\n', ' ', 'GET', 'POST /v3/kv/range HTTP/1.1'])), note: 'a few bytes' }),
    () => ({ bytes: Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, ...rand.bytes(40)]), note: 'a TLS ClientHello on the plaintext port' }),
    () => ({ bytes: Buffer.from(`GET /version HTTP/1.1\r\nHost: x\r\n\r\n${rand.bytes(rand.range(1, 200)).toString('latin1')}`, 'latin1'), note: 'a request, then random bytes' }),
    () => ({ bytes: Buffer.alloc(0), note: 'nothing' }),
    () => ({ bytes: Buffer.from('\r\n'.repeat(rand.pick([1, 100, 5000]))), note: 'empty lines' }),
    () => ({ bytes: Buffer.from('GET / HTTP/1.1\r\n' + 'X: y\r\n'.repeat(5000)), note: 'headers without end' }),
  ])();
}

// ---------------------------------------------------------------- the connection

function plan(rand: Rand): Plan {
  if (rand.chance(0.08)) {
    const g = garbage(rand);
    return { kind: 'http-garbage', describe: `garbage: ${g.note}, ${g.bytes.length} bytes`, bytes: g.bytes };
  }
  // Pipelined requests now and then.
  const count = rand.weighted([[8, 1], [2, 2], [1, 4]] as const);
  const parts: Buffer[] = [];
  const descs: string[] = [];
  let httpMutated = false;
  let jsonMutated = false;
  for (let i = 0; i < count; i++) {
    const notes: string[] = [];
    const d = draftFor(rand, notes);
    if (notes.length) jsonMutated = true;
    const mutations: string[] = [];
    if (rand.chance(0.35)) for (let n = rand.weighted([[4, 1], [1, 2]] as const); n > 0; n--) mutations.push(rand.pick(HTTP_MUTATIONS)(rand, d));
    if (rand.chance(0.03)) {
      d.version = 'HTTP/1.0';
      mutations.push('HTTP/1.0');
    }
    if (mutations.length) httpMutated = true;
    const framing = d.framing === 'chunked' ? 'chunked' : d.framing === 'none' ? 'unframed' : `${d.body.length} bytes`;
    descs.push(`${d.method} ${d.target.length > 60 ? `${d.target.slice(0, 60)}...` : d.target} ${d.version} (${framing}${[...mutations, ...notes].map((m) => `, ${m}`).join('')})`);
    parts.push(draftBytes(rand, d));
  }
  const kind = httpMutated ? 'http-mutated' : jsonMutated ? 'json-mutated' : 'http-wellformed';
  return { kind, describe: descs.join('; '), bytes: Buffer.concat(parts) };
}

/** Cuts `bytes` into writes at random places, sometimes pausing between two (a stalled body). */
function schedule(rand: Rand, bytes: Buffer): { writes: Write[]; stalled: number } {
  const writes: Write[] = [];
  let stalled = 0;
  for (let off = 0; off < bytes.length; ) {
    const len = rand.chance(0.7) ? bytes.length - off : rand.range(1, Math.max(1, bytes.length - off));
    const pauseMs = off > 0 && rand.chance(0.15) ? rand.pick([50, 300, 1200]) : 0;
    stalled += pauseMs;
    writes.push({ bytes: bytes.subarray(off, off + len), pauseMs });
    off += len;
  }
  return { writes, stalled };
}

/** The responses in `buf`, for a replay's report: each status line, and the error's message if it has one. */
function responses(buf: Buffer): string[] {
  const text = buf.toString('latin1');
  return [...text.matchAll(/HTTP\/1\.[01] \d{3}[^\r\n]*/g)].map((m) => {
    const rest = text.slice(m.index! + m[0].length);
    const msg = /"message":("(?:[^"\\]|\\.)*")/.exec(rest.split(/HTTP\/1\.[01] \d{3}/)[0]!);
    return msg ? `${m[0]} ${msg[1]!.slice(0, 120)}` : m[0];
  });
}

/**
 * The case `rand` draws: a connection's bytes that the scratch guard passes (drawn again while
 * it does not, up to 30 times; then a GET /version).
 */
export async function httpCase(rand: Rand): Promise<Case> {
  let p: Plan | undefined;
  for (let tries = 0; tries < 30 && !p; tries++) {
    const candidate = plan(rand);
    if (await connectionStaysInScratch(candidate.bytes)) p = candidate;
  }
  p ??= { kind: 'http-wellformed', describe: 'GET /version (30 draws were unsafe)', bytes: Buffer.from('GET /version HTTP/1.1\r\nHost: x\r\n\r\n') };
  const { writes, stalled } = schedule(rand, p.bytes);
  const halfCloseMs = rand.pick([0, 100, 500, 800]);
  let report = '';
  const plan_ = p;
  return {
    kind: plan_.kind,
    get describe() {
      return `${plan_.describe}; ${plan_.bytes.length} bytes in ${writes.length} writes${stalled ? `, stalled ${stalled} ms` : ''}, half-closed ${halfCloseMs} ms after${report}`;
    },
    writes: writes.map((w) => w.bytes),
    async run(endpoint, answerMs = HTTP_ANSWER_MS): Promise<CaseResult> {
      const r = await exchange(endpoint, writes, halfCloseMs, answerMs);
      report = `; answered ${responses(r.received).join(', ') || `${r.received.length} bytes`}`;
      return outcomeOf(r);
    },
  };
}
