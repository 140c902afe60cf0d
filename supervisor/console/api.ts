// The console's HTTP API under /api/ on --metrics-addr, and its static files. Every data request
// is made to the node's etcd API with the caller's token (etcd.ts), so permissions are the
// API's own. With auth enabled, a request without a token that the node accepts gets 401 and
// no data; actions need the root role. State-changing requests are POSTs that must carry the
// X-Kvs-Console header and a JSON body (a cross-site form or a no-CORS fetch can send neither),
// and an Origin, when sent, must be this address's own.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type http from 'node:http';
import * as grpc from '@grpc/grpc-js';
import type { Config } from '../../shared/config.js';
import { EtcdApi, EtcdError, type KeyValue } from './etcd.js';
import { MetricsSampler } from './sampler.js';
import { activity, roleOf, sumOf, quantile } from './series.js';
import { Durability } from './durability.js';
import { earlierIncarnations, keyHistory, type HistoryQuery } from './history.js';
import { Members } from './members.js';
import { readPeerState } from './peer-state.js';
import { prefixEnd, prefixStart } from './keys.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** console/ at the repository root (this file runs from dist/supervisor/console/). */
export const CONSOLE_DIR = path.resolve(here, '../../../console');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** What the console needs from the supervisor beyond the etcd API. */
export interface NodeFacts {
  metricsJson(): Promise<import('../../shared/metrics.js').MetricsJson>;
  components(): { name: string; state: string; pid: number; restarts: number; lastExit: string; detail: string }[];
  restart(component: string): Promise<void>;
  /** An action taken from the console, for the node's log. */
  logAction(what: string, fields: Record<string, unknown>): void;
}

interface Caller {
  token: string | undefined;
  user: string | undefined;
  roles: string[];
  root: boolean;
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** etcd's gRPC code -> the HTTP status the console answers with (500 for any other). */
const HTTP_STATUS = new Map<number, number>([
  [grpc.status.UNAUTHENTICATED, 401],
  [grpc.status.PERMISSION_DENIED, 403],
  [grpc.status.INVALID_ARGUMENT, 400],
  [grpc.status.OUT_OF_RANGE, 400],
  [grpc.status.FAILED_PRECONDITION, 400],
  [grpc.status.NOT_FOUND, 404],
  [grpc.status.UNAVAILABLE, 503],
  [grpc.status.DEADLINE_EXCEEDED, 503],
]);

function httpStatus(code: number): number {
  return HTTP_STATUS.get(code) ?? 500;
}

const b64 = (b: Buffer): string => b.toString('base64');
/** A value in a history answer at most this big, and all of them together. */
const HISTORY_VALUE_MAX = 256 * 1024;
const HISTORY_VALUE_BUDGET = 16 * 1024 * 1024;
function fromB64(s: string | null, what: string): Buffer {
  if (s === null) return Buffer.alloc(0);
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(s)) throw new HttpError(400, `${what} must be base64, got "${s.slice(0, 40)}"`);
  return Buffer.from(s, 'base64');
}
function intParam(s: string | null, what: string, def: number, min: number, max: number): number {
  if (s === null || s === '') return def;
  if (!/^\d+$/.test(s) || Number(s) < min || Number(s) > max) throw new HttpError(400, `${what} must be a whole number from ${min} to ${max}, got "${s}"`);
  return Number(s);
}

const kvJson = (kv: KeyValue, withValue: boolean) => ({
  key: b64(kv.key),
  // keys_only answers carry no value, hence no size either.
  ...(withValue ? { value: b64(kv.value), size: kv.value.length } : {}),
  createRevision: kv.createRevision,
  modRevision: kv.modRevision,
  version: kv.version,
  lease: kv.lease,
});

export class ConsoleApi {
  readonly etcd: EtcdApi;
  readonly sampler: MetricsSampler;
  private readonly durability: Durability;
  private readonly members: Members;
  private readonly verified = new Map<string, { at: number; caller: Caller }>();
  private authState: { at: number; on: Promise<boolean> } | undefined;

  constructor(
    private readonly cfg: Config,
    private readonly node: NodeFacts,
  ) {
    this.etcd = new EtcdApi(cfg);
    this.sampler = new MetricsSampler(() => node.metricsJson());
    this.durability = new Durability(cfg);
    this.members = new Members(this.etcd, (e) => this.sampler.events.push(e));
  }

  close(): void {
    this.sampler.stop();
    this.etcd.close();
    this.durability.close();
  }

  /** Handles / and /static/* and /api/*; false for a path that is not the console's. */
  handle(req: http.IncomingMessage, res: http.ServerResponse, url: URL): boolean {
    const p = url.pathname;
    if (p === '/' || p === '/index.html') return this.file(res, 'index.html'), true;
    if (p.startsWith('/static/')) return this.file(res, p.slice('/static/'.length)), true;
    if (!p.startsWith('/api/')) return false;
    this.api(req, res, url).catch((err: unknown) => {
      const e = err instanceof HttpError ? err : err instanceof EtcdError ? new HttpError(httpStatus(err.code), err.message) : new HttpError(500, (err as Error).message);
      if (!res.headersSent) sendJson(res, e.status, { error: e.message });
      else res.destroy();
    });
    return true;
  }

  private file(res: http.ServerResponse, name: string): void {
    if (!/^[a-z0-9-]+\.(html|js|css|svg)$/.test(name)) return sendJson(res, 404, { error: `no console file ${name}` });
    fs.readFile(path.join(CONSOLE_DIR, name), (err, body) => {
      if (err) return sendJson(res, 404, { error: `no console file ${name}` });
      res.writeHead(200, {
        'Content-Type': TYPES[path.extname(name)]!,
        'Content-Length': body.length,
        'Cache-Control': 'no-cache',
        // Everything the page loads is its own: no inline script, no other origin.
        'Content-Security-Policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
        'X-Content-Type-Options': 'nosniff',
        'Referrer-Policy': 'no-referrer',
      });
      res.end(res.req.method === 'HEAD' ? undefined : body);
    });
  }

  /**
   * Whether the node enforces auth now: `etcdctl auth enable|disable` changes it at run time,
   * whatever --auth-enabled said at start. An anonymous read tells (etcd refuses it with "user
   * name is empty" while auth is on); asked at most once a second.
   */
  private authOn(): Promise<boolean> {
    if (this.authState && Date.now() - this.authState.at < 1000) return this.authState.on;
    const on = this.etcd.range(undefined, { key: Buffer.from([0]), keysOnly: true, serializable: true }).then(
      () => false,
      (err: unknown) => (err instanceof EtcdError && /user name is empty|invalid auth token|permission denied/.test(err.message) ? true : this.cfg.authEnabled),
    );
    this.authState = { at: Date.now(), on };
    return on;
  }

  private async caller(req: http.IncomingMessage): Promise<Caller> {
    const auth = req.headers.authorization;
    const token = auth?.startsWith('Bearer ') ? auth.slice(7).trim() : undefined;
    const user = typeof req.headers['x-kvs-user'] === 'string' ? req.headers['x-kvs-user'] : undefined;
    if (!(await this.authOn())) return { token: undefined, user: undefined, roles: [], root: true };
    if (!token || !user) throw new HttpError(401, 'log in: this node has auth enabled');
    const cacheKey = `${user}\0${token}`;
    const hit = this.verified.get(cacheKey);
    if (hit && Date.now() - hit.at < 1000) return hit.caller;
    let roles: string[];
    try {
      // The user's own record: allowed to that user (or root) only, with a valid token only.
      roles = await this.etcd.userRoles(token, user);
    } catch (err) {
      if (err instanceof EtcdError && (err.code === grpc.status.UNAUTHENTICATED || err.code === grpc.status.PERMISSION_DENIED || err.code === grpc.status.INVALID_ARGUMENT)) {
        throw new HttpError(401, `log in again: ${err.message}`);
      }
      throw err;
    }
    const caller = { token, user, roles, root: roles.includes('root') };
    if (this.verified.size > 1000) this.verified.clear();
    this.verified.set(cacheKey, { at: Date.now(), caller });
    return caller;
  }

  private async api(req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
    const route = url.pathname.slice('/api/'.length);
    const post = req.method === 'POST';
    if (post) checkCsrf(req);
    else if (req.method !== 'GET') throw new HttpError(405, `method ${req.method} not allowed on ${url.pathname}`);
    const q = url.searchParams;

    if (route === 'session' && !post) return sendJson(res, 200, await this.session(req));
    if (route === 'login' && post) {
      const body = await readJson(req);
      if (!(await this.authOn())) throw new HttpError(400, 'auth is not enabled on this node: no login needed');
      if (typeof body.name !== 'string' || typeof body.password !== 'string') throw new HttpError(400, 'login needs "name" and "password" strings');
      let token: string;
      try {
        token = await this.etcd.authenticate(body.name, body.password);
      } catch (err) {
        if (err instanceof EtcdError && err.code !== grpc.status.UNAVAILABLE) throw new HttpError(401, err.message);
        throw err;
      }
      const roles = await this.etcd.userRoles(token, body.name);
      return sendJson(res, 200, { token, user: body.name, roles, root: roles.includes('root'), ttl: this.cfg.tokenTtl });
    }

    const who = await this.caller(req);
    switch (post ? `POST ${route}` : route) {
      case 'cluster':
        return sendJson(res, 200, await this.cluster(who));
      case 'activity':
        await this.sampler.touch();
        return sendJson(res, 200, this.activity());
      case 'keys':
        return sendJson(res, 200, await this.keys(who, fromB64(q.get('prefix'), 'prefix'), q.has('after') ? fromB64(q.get('after'), 'after') : undefined, intParam(q.get('limit'), 'limit', 100, 1, 1000)));
      case 'key':
        return sendJson(res, 200, await this.key(who, fromB64(q.get('key'), 'key')));
      case 'history': {
        const h = await keyHistory(await this.historyQuery(who, q));
        // Earlier incarnations may lie between the compact revision (or revision 1, the empty
        // store) and this one's creation.
        const before = h.revisions[0]?.createRevision ?? h.revision + 1;
        return sendJson(res, 200, { ...h, revisions: historyJson(h.revisions, { left: HISTORY_VALUE_BUDGET }), earlier: before > Math.max(h.compactRevision, 1) + 1 });
      }
      case 'history/earlier': {
        const h = await earlierIncarnations(await this.historyQuery(who, q));
        const budget = { left: HISTORY_VALUE_BUDGET };
        return sendJson(res, 200, { ...h, incarnations: h.incarnations.map((i) => ({ ...i, revisions: historyJson(i.revisions, budget) })) });
      }
      case 'watch':
        return this.watch(who, req, res, fromB64(q.get('prefix'), 'prefix'));
      case 'durability':
        return sendJson(res, 200, await this.durability.report(intParam(q.get('keep'), 'keep', 3, 1, 1_000_000)));
      case 'POST actions/compact': {
        requireRoot(who, 'compact');
        const body = await readJson(req);
        const rev = Number(body.revision);
        if (!Number.isInteger(rev) || rev < 1) throw new HttpError(400, `revision must be a whole number of at least 1, got ${JSON.stringify(body.revision)}`);
        const revision = await this.etcd.compact(who.token, rev);
        this.node.logAction(`compacted to revision ${rev} from the console`, { user: who.user, revision: rev });
        return sendJson(res, 200, { compacted: rev, revision });
      }
      case 'POST actions/checkpoint':
        requireRoot(who, 'checkpoint');
        await readJson(req);
        if (!this.durability.enabled) throw new HttpError(400, 'this node has no object store (--s3-bucket): there is nothing to checkpoint to');
        const cp = await this.durability.checkpoint();
        this.node.logAction(cp.unchanged ? `checkpoint from the console: no change since ${cp.key}` : `checkpoint ${cp.key} from the console`, { user: who.user });
        return sendJson(res, 200, cp);
      case 'POST actions/restart': {
        requireRoot(who, 'restart a component');
        const body = await readJson(req);
        const names = this.node.components().map((c) => c.name);
        if (typeof body.component !== 'string' || !names.includes(body.component)) {
          throw new HttpError(400, `no component ${JSON.stringify(body.component)}; components: ${names.join(', ')}`);
        }
        this.node.logAction(`restart of ${body.component} requested from the console`, { user: who.user, child: body.component });
        await this.node.restart(body.component);
        return sendJson(res, 200, { restarted: body.component, components: this.node.components() });
      }
      default:
        throw new HttpError(404, `no console API ${req.method} ${url.pathname}`);
    }
  }

  private async session(req: http.IncomingMessage): Promise<object> {
    const authEnabled = await this.authOn();
    const base = { authEnabled, nodeId: this.cfg.nodeId, listen: this.cfg.listen, tokenTtl: this.cfg.tokenTtl, objectStore: !!this.cfg.s3Bucket };
    if (!authEnabled) return { ...base, user: null, root: true, permissions: 'all' };
    let who: Caller;
    try {
      who = await this.caller(req);
    } catch {
      return { ...base, user: null, root: false, permissions: [] };
    }
    const permissions: { role: string; type: string; key: string; rangeEnd: string }[] = [];
    for (const role of who.roles) {
      if (role === 'root') continue;
      for (const p of await this.etcd.rolePerms(who.token, role).catch(() => [])) {
        permissions.push({ role, type: ['read', 'write', 'readwrite'][p.permType] ?? String(p.permType), key: b64(p.key), rangeEnd: b64(p.rangeEnd) });
      }
    }
    return { ...base, user: who.user, roles: who.roles, root: who.root, permissions: who.root ? 'all' : permissions };
  }

  /** ?key=&limit= of a history request, with the compact revision (sampled again if it moved). */
  private async historyQuery(who: Caller, q: URLSearchParams): Promise<HistoryQuery> {
    return {
      etcd: this.etcd,
      token: who.token,
      key: fromB64(q.get('key'), 'key'),
      limit: intParam(q.get('limit'), 'limit', 1000, 1, 10_000),
      compactRevision: await this.compactRevision(),
      freshCompact: async () => (await this.sampler.sampleNow(), sumOf(this.sampler.latest()?.m ?? {}, 'kvs_compact_revision')),
    };
  }

  private async compactRevision(): Promise<number> {
    await this.sampler.touch();
    return sumOf(this.sampler.latest()?.m ?? {}, 'kvs_compact_revision');
  }

  private async cluster(who: Caller): Promise<object> {
    await this.sampler.touch();
    const m = this.sampler.latest()?.m ?? {};
    const { self, members: withLag, memberListError } = await this.members.view(who.token);
    const lock = await this.durability.leaderLock().catch((err: Error) => ({ error: err.message }));
    const peer = this.cfg.peerListen ? await readPeerState(this.cfg).catch((err: Error) => ({ error: err.message })) : undefined;
    return {
      nodeId: this.cfg.nodeId,
      mode: this.cfg.peerListen ? 'cluster' : 'single',
      role: roleOf(m) ?? 'unknown',
      self,
      members: withLag,
      memberListError,
      degraded: (m['kvs_replication_degraded'] ?? 0) >= 1,
      peer,
      elections: sumOf(m, 'kvs_elections_total'),
      resyncs: sumOf(m, 'kvs_follower_resyncs_total'),
      leaderLock: lock,
      timeline: this.sampler.events.slice(-100).reverse(),
      components: this.node.components(),
    };
  }

  private activity(): object {
    const points = activity(this.sampler.samples);
    const s = this.sampler.samples;
    const m = s.at(-1)?.m ?? {};
    // The last upload: the interval it fell in, and the median latency of the uploads in it.
    let lastUpload: { t: number; seconds?: number } | undefined;
    for (let i = s.length - 1; i > 0; i--) {
      const d = sumOf(s[i]!.m, 'kvs_wal_upload_duration_seconds_count') - sumOf(s[i - 1]!.m, 'kvs_wal_upload_duration_seconds_count');
      if (d > 0) {
        lastUpload = { t: s[i]!.t, seconds: quantile(s[i - 1]!, s[i]!, 'kvs_wal_upload_duration_seconds', 0.5) };
        break;
      }
    }
    return {
      points,
      intervalMs: s.length > 1 ? s.at(-1)!.t - s.at(-2)!.t : undefined,
      revision: m['kvs_current_revision'],
      compactRevision: m['kvs_compact_revision'],
      watches: m['kvs_watch_active'],
      walUploads: sumOf(m, 'kvs_wal_uploads_total'),
      lastUpload,
    };
  }

  private async keys(who: Caller, prefix: Buffer, after: Buffer | undefined, limit: number): Promise<object> {
    const end = prefixEnd(prefix);
    // The page after `after`: its successor (key + \0) is the smallest key greater than it.
    const start = after ? Buffer.concat([after, Buffer.from([0])]) : prefixStart(prefix);
    const r = await this.etcd.range(who.token, { key: start, rangeEnd: end, limit, keysOnly: true });
    return { revision: r.revision, keys: r.kvs.map((kv) => kvJson(kv, false)), more: r.more, remaining: r.count };
  }

  private async key(who: Caller, key: Buffer): Promise<object> {
    if (key.length === 0) throw new HttpError(400, 'key must not be empty');
    const r = await this.etcd.range(who.token, { key });
    const kv = r.kvs[0];
    if (!kv) return { revision: r.revision, found: false };
    const lease = kv.lease !== '0' ? await this.etcd.leaseTtl(who.token, kv.lease).catch((err: Error) => ({ error: err.message })) : undefined;
    return { revision: r.revision, found: true, kv: kvJson(kv, true), lease };
  }

  private watch(who: Caller, req: http.IncomingMessage, res: http.ServerResponse, prefix: Buffer): void {
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson', 'Cache-Control': 'no-store', 'X-Content-Type-Options': 'nosniff' });
    const write = (o: object) => res.write(JSON.stringify(o) + '\n');
    write({ watching: b64(prefix) });
    const { cancel } = this.etcd.watch(who.token, prefixStart(prefix), prefixEnd(prefix), 0, {
      onEvents: (revision, events) => write({ revision, events: events.map((e) => ({ type: e.type, ...kvJson(e.kv, true) })) }),
      onEnd: (err) => {
        if (err) write({ error: err.message, status: httpStatus(err.code) });
        res.end();
      },
    });
    // The connection closing ends the watch; so does a client that half-closes it (done sending:
    // a browser never does, a script that is done does). A body sent with the GET is read and
    // dropped: left unread, it would hold the socket's end behind it.
    req.resume();
    res.on('close', cancel);
    req.socket.once('end', () => {
      cancel();
      res.end();
    });
  }
}

/**
 * History revisions as JSON. Large values are left out (their size stays): a thousand of them
 * would make an answer no browser wants; the key view shows the live one whole.
 */
function historyJson(kvs: KeyValue[], budget: { left: number }): object[] {
  return kvs.map((kv) => {
    const keep = kv.value.length <= HISTORY_VALUE_MAX && (budget.left -= kv.value.length) >= 0;
    return { ...kvJson(kv, keep), size: kv.value.length, ...(keep ? {} : { valueOmitted: true }) };
  });
}

function requireRoot(who: Caller, what: string): void {
  if (!who.root) throw new HttpError(403, `${what} needs the root role; ${who.user} does not have it`);
}

function checkCsrf(req: http.IncomingMessage): void {
  if (req.headers['x-kvs-console'] !== '1') throw new HttpError(403, 'state-changing requests need the X-Kvs-Console: 1 header (sent by the console)');
  if (!(req.headers['content-type'] ?? '').startsWith('application/json')) throw new HttpError(415, 'state-changing requests take a JSON body (Content-Type: application/json)');
  const origin = req.headers.origin;
  if (origin !== undefined) {
    const host = req.headers.host;
    let ok = false;
    try {
      ok = new URL(origin).host === host;
    } catch {
      ok = false;
    }
    if (!ok) throw new HttpError(403, `cross-origin request refused: Origin ${origin} is not ${host}`);
  }
}

const MAX_BODY = 64 * 1024;
function readJson(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new HttpError(413, `request body over ${MAX_BODY} bytes`));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('error', reject);
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (text.trim() === '') return resolve({});
      try {
        const v = JSON.parse(text);
        if (v === null || typeof v !== 'object' || Array.isArray(v)) return reject(new HttpError(400, 'request body must be a JSON object'));
        resolve(v as Record<string, unknown>);
      } catch (err) {
        reject(new HttpError(400, `request body is not JSON: ${(err as Error).message}`));
      }
    });
  });
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-store', 'X-Content-Type-Options': 'nosniff' });
  res.end(res.req.method === 'HEAD' ? undefined : text);
}
