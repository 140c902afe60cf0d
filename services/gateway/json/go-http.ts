// What etcd's JSON gateway answers with, copied from the Go code it runs: etcd's accessController
// (CORS headers), grpc-gateway (HTTP status of a gRPC code, error bodies, Grpc-Timeout) and Go's
// net/http (plain-text errors, redirects, path unescaping and cleaning). Pure functions of their
// arguments, apart from the three that write an answer to an exchange.
import { status as Status } from '@grpc/grpc-js';
import type { StatusLike } from '../../../shared/grpc/server.js';
import type { HttpExchange } from './exchange.js';

export const CORS = {
  'Access-Control-Allow-Headers': 'accept, content-type, authorization',
  'Access-Control-Allow-Methods': 'POST, GET, OPTIONS, PUT, DELETE',
  'Access-Control-Allow-Origin': '*',
};
export const JSON_HEADERS = { ...CORS, 'Content-Type': 'application/json' };
export const GRPC_MD = { 'Grpc-Metadata-Content-Type': 'application/grpc' };

/** grpc-gateway's HTTPStatusFromCode (500 for any other code). */
const HTTP_STATUS = new Map<number, number>([
  [Status.OK, 200],
  [Status.CANCELLED, 408],
  [Status.INVALID_ARGUMENT, 400],
  [Status.OUT_OF_RANGE, 400],
  [Status.DEADLINE_EXCEEDED, 504],
  [Status.NOT_FOUND, 404],
  [Status.ALREADY_EXISTS, 409],
  [Status.ABORTED, 409],
  [Status.PERMISSION_DENIED, 403],
  [Status.UNAUTHENTICATED, 401],
  [Status.RESOURCE_EXHAUSTED, 429],
  [Status.FAILED_PRECONDITION, 412],
  [Status.UNIMPLEMENTED, 501],
  [Status.UNAVAILABLE, 503],
]);

export function httpStatusOf(code: number): number {
  return HTTP_STATUS.get(code) ?? 500;
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  408: 'Request Timeout',
  409: 'Conflict',
  412: 'Precondition Failed',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

const quote = (s: string) => JSON.stringify(s).replace(/[<>&]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
export const errorBody = (code: number, message: string) => `{"error":${quote(message)},"message":${quote(message)},"code":${code}}`;
export const streamErrorBody = (code: number, message: string) => {
  const http = httpStatusOf(code);
  return `{"error":{"grpc_code":${code},"http_code":${http},"message":${quote(message)},"http_status":${quote(STATUS_TEXT[http] ?? '')}}}`;
};

/** Go's http.Error: plain text and a newline. */
export function plainError(ex: HttpExchange, status: number, text: string, extra: Record<string, string> = {}, cors = true): void {
  ex.discardBody();
  const body = `${text}\n`;
  ex.respond(status, { ...(cors ? CORS : {}), ...extra, 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff', 'Content-Length': String(Buffer.byteLength(body)) });
  ex.end(body);
}

/** Go's server on a request line it cannot read (here: a path that does not unescape). */
export function badRequest(ex: HttpExchange): void {
  ex.discardBody();
  ex.respond(400, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
  ex.end('400 Bad Request');
}

/** Go's http.Redirect with 301, as its ServeMux sends it. */
export function redirect(ex: HttpExchange, location: string): void {
  ex.discardBody();
  const headers: Record<string, string> = { ...CORS, Location: location };
  let body = '';
  if (ex.method === 'GET' || ex.method === 'HEAD') headers['Content-Type'] = 'text/html; charset=utf-8';
  if (ex.method === 'GET') body = `<a href="${htmlEscape(location)}">Moved Permanently</a>.\n\n`;
  headers['Content-Length'] = String(Buffer.byteLength(body));
  ex.respond(301, headers);
  ex.end(body);
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&#34;', "'": '&#39;' };
const htmlEscape = (s: string) => s.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!);

/** Go's url.PathUnescape of a request path, as a byte string; undefined if an escape is bad. */
export function unescapePath(raw: string): string | undefined {
  if (!raw.includes('%')) return raw;
  if (/%(?![0-9A-Fa-f]{2})/.test(raw)) return undefined;
  return raw.replace(/%([0-9A-Fa-f]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));
}

/** Go's cleanPath (net/http): path.Clean, keeping a trailing slash. */
export function cleanPath(p: string): string {
  if (p === '') return '/';
  if (p[0] !== '/') p = `/${p}`;
  const out: string[] = [];
  for (const part of p.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') out.pop();
    else out.push(part);
  }
  let np = `/${out.join('/')}`;
  if (p.endsWith('/') && np !== '/') np += '/';
  return np;
}

/** Go's URL.EscapedPath of a clean path (a byte string). */
export function escapePath(p: string): string {
  return p.replace(/[^A-Za-z0-9\-_.~$&+,/:;=@]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}

const TIMEOUT_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/**
 * grpc-gateway's timeoutDecode of Grpc-Timeout: an integer (strconv.ParseInt: a sign allowed,
 * 64 bits) and a unit, in ms; 'invalid' for anything else; undefined without the header or
 * for 0.
 */
export function gatewayTimeout(value: string | undefined): number | 'invalid' | undefined {
  if (value === undefined || value === '') return undefined;
  const m = /^([+-]?\d+)([HMSmun])$/.exec(value);
  if (!m) return 'invalid';
  const n = BigInt(m[1]!);
  if (n > 2n ** 63n - 1n || n < -(2n ** 63n)) return 'invalid';
  // 0 is no deadline at all (grpc-gateway sets one only for a timeout other than 0).
  return n === 0n ? undefined : Number(n) * TIMEOUT_UNIT_MS[m[2]!]!;
}

/**
 * A request target's path (Go's URL.Path: percent-escapes undone, /v3beta/ rewritten to /v3/)
 * and query; undefined if the path does not unescape. A target in absolute form
 * (http://host/path, as proxies send it) names the path after its authority.
 */
export function requestTarget(raw: string): { path: string; query: string } | undefined {
  const url = raw.replace(/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/, '');
  const q = url.indexOf('?');
  const path = unescapePath(q === -1 ? url : url.slice(0, q));
  if (path === undefined) return undefined;
  return { path: path.startsWith('/v3beta/') ? `/v3/${path.slice(8)}` : path, query: q === -1 ? '' : url.slice(q + 1) };
}

export function tooLarge(size: number, max: number): StatusLike {
  return { code: Status.RESOURCE_EXHAUSTED, details: `grpc: received message larger than max (${size} vs. ${max})` };
}
