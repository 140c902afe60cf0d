// Differential testing against real etcd: the same KV request goes to an etcd 3.4 and a kvs
// node over raw gRPC (our own protos), and the decoded responses — or the errors — must be
// the same, field by field. Only the header's cluster_id, member_id and raft_term may differ.
//
// Requests are written as plain objects in protobufjs's camelCase, with strings for bytes
// fields (taken byte for byte, latin1), numbers for int64s and names or numbers for enums.
// Responses come back as plain objects: bytes as latin1 strings, int64s as decimal strings.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { root, service } from '../shared/proto/index.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';
import { onCleanup, startEtcd, startKvs, type Ctx } from '../testkit/harness.js';
import { prng } from '../testkit/prng.js';
import { prefixRangeEnd } from '../shared/bytes.js';

export type Method = 'Range' | 'Put' | 'DeleteRange' | 'Txn' | 'Compact' | LeaseMethod;
/** Lease methods; LeaseKeepAlive is sent as one request on a fresh stream. */
export type LeaseMethod = 'LeaseGrant' | 'LeaseRevoke' | 'LeaseTimeToLive' | 'LeaseLeases' | 'LeaseKeepAlive';

/** A call's result: the decoded response, or the gRPC error (code and message text). */
export type Outcome = { ok: Plain } | { error: { code: number; details: string } };

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Plain = any;

const HEADER = 'etcdserverpb.ResponseHeader';
/** Header fields that legitimately differ between the two servers. */
const IDENTITY_FIELDS = new Set(['clusterId', 'memberId', 'raftTerm']);

const KV = 'etcdserverpb.KV';
export const LEASE = 'etcdserverpb.Lease';

/** The service of a `Method`. */
function serviceOf(method: Method): string {
  return method.startsWith('Lease') ? LEASE : KV;
}

/** Request and response types of a method of `serviceName` (KV unless told). */
function methodTypes(method: string, serviceName = KV): { req: protobuf.Type; res: protobuf.Type } {
  const m = root.lookupService(serviceName).methods[method]!;
  m.resolve();
  return { req: m.resolvedRequestType!, res: m.resolvedResponseType! };
}

/** Strings in bytes fields become Buffers (latin1), recursively; the rest is left to fromObject. */
function toWire(t: protobuf.Type, obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(obj)) {
    const f = t.fields[name];
    if (!f) throw new Error(`${t.fullName} has no field ${name}`);
    f.resolve();
    const one = (x: unknown): unknown => {
      if (f.type === 'bytes' && typeof x === 'string') return Buffer.from(x, 'latin1');
      if (f.resolvedType instanceof protobuf.Type && x && typeof x === 'object') return toWire(f.resolvedType, x as Record<string, unknown>);
      return x;
    };
    out[name] = f.repeated && Array.isArray(v) ? v.map(one) : one(v);
  }
  return out;
}

export function encodeRequest(method: string, req: object, serviceName = KV): protobuf.Message {
  const { req: t } = methodTypes(method, serviceName);
  return t.fromObject(toWire(t, req as Record<string, unknown>));
}

function scalar(f: protobuf.Field, v: unknown): unknown {
  if (f.type === 'bytes') return Buffer.from(v as Uint8Array).toString('latin1');
  if (['int64', 'uint64', 'sint64', 'fixed64', 'sfixed64'].includes(f.type)) {
    if (v == null) return '0';
    return typeof v === 'number' ? String(v) : (v as protobuf.Long).toString();
  }
  return v;
}

/**
 * A decoded message as a plain object with every field present (defaults included), set
 * oneof members only, and without the identity fields of response headers.
 */
export function plain(t: protobuf.Type, msg: Record<string, unknown>): Plain {
  const out: Record<string, unknown> = {};
  for (const f of t.fieldsArray) {
    if (t.fullName === `.${HEADER}` && IDENTITY_FIELDS.has(f.name)) continue;
    f.resolve();
    const v = msg[f.name];
    if (f.partOf && (v == null || !Object.prototype.hasOwnProperty.call(msg, f.name))) continue;
    const one = (x: unknown): unknown =>
      f.resolvedType instanceof protobuf.Type ? (x == null ? null : plain(f.resolvedType, x as Record<string, unknown>)) : scalar(f, x);
    out[f.name] = f.repeated ? ((v as unknown[] | undefined) ?? []).map(one) : one(v);
  }
  return out;
}

type GenericClient = grpc.Client & Record<string, (req: unknown, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: unknown) => void) => void>;

const WatchClient = grpc.makeGenericClientConstructor(service('etcdserverpb.Watch'), 'Watch');
const watchRequest = root.lookupType('etcdserverpb.WatchRequest');
const watchResponse = root.lookupType('etcdserverpb.WatchResponse');

export class Endpoint {
  /** One client per etcd service and address, made on first use. */
  private readonly clients = new Map<string, GenericClient>();
  private readonly addresses: string[];

  /**
   * `address`: one server, or the nodes of a kvs cluster, of which every request (and every
   * watch stream) goes to one picked by `pick` (a seeded generator: a failure can be replayed).
   */
  constructor(private readonly t: Ctx, readonly name: string, address: string | string[], private readonly pick: () => number = () => 0) {
    this.addresses = Array.isArray(address) ? address : [address];
  }

  get address(): string {
    return this.addresses[Math.floor(this.pick() * this.addresses.length)]!;
  }

  private client(serviceName: string, address = this.address): GenericClient {
    let c = this.clients.get(`${serviceName} ${address}`);
    if (!c) {
      const Ctor = grpc.makeGenericClientConstructor(service(serviceName), serviceName);
      const made = new Ctor(address, grpc.credentials.createInsecure()) as unknown as GenericClient;
      onCleanup(this.t, () => made.close());
      this.clients.set(`${serviceName} ${address}`, (c = made));
    }
    return c;
  }

  /** A new Watch stream; its responses arrive as plain objects in `inbox`. */
  watch(t: Ctx): ResponseQueue {
    const address = this.address;
    const client = new WatchClient(address, grpc.credentials.createInsecure()) as unknown as Record<string, () => grpc.ClientDuplexStream<unknown, unknown>> & grpc.Client;
    const call = client.Watch!();
    // On a cluster node, each request waits until the node caught up (see call()): a watch's
    // headers carry the node's revision, which may lag another node's acknowledged write.
    const sync = this.addresses.length > 1 ? () => this.sync(address) : undefined;
    const inbox = new ResponseQueue(this.name, call, sync);
    onCleanup(t, () => {
      call.cancel();
      client.close();
    });
    return inbox;
  }

  /** One LeaseKeepAlive request on a fresh stream, and its first answer. */
  keepAlive(msg: protobuf.Message): Promise<Outcome> {
    const { res } = methodTypes('LeaseKeepAlive', LEASE);
    const lease = this.client(LEASE) as unknown as Record<string, (o: grpc.CallOptions) => grpc.ClientDuplexStream<unknown, unknown>>;
    return new Promise((resolve) => {
      const stream = lease.LeaseKeepAlive!({ deadline: Date.now() + 10_000 });
      stream.once('data', (out) => {
        resolve({ ok: plain(res, out as Record<string, unknown>) });
        stream.end();
      });
      stream.on('error', (err: grpc.ServiceError) => resolve({ error: { code: err.code, details: err.details } }));
      stream.write(msg);
    });
  }

  /** A unary call to `method` of `serviceName` (KV unless told). */
  async call(method: string, msg: protobuf.Message, serviceName = KV): Promise<Outcome> {
    const { res } = methodTypes(method, serviceName);
    const address = this.address;
    // A serializable read on a cluster node may lag what another node acknowledged, as on an
    // etcd follower: the node first catches up (a linearizable read), then serves it.
    if (this.addresses.length > 1 && method === 'Range' && (msg as unknown as { serializable?: boolean }).serializable) await this.sync(address);
    return this.callOn(address, method, msg, serviceName, res);
  }

  /** A linearizable read on `address`: the node has applied everything acknowledged before. */
  private async sync(address: string): Promise<void> {
    await this.callOn(address, 'Range', encodeRequest('Range', { key: '\0kvs-differential-sync' }), KV);
  }

  private callOn(address: string, method: string, msg: protobuf.Message, serviceName: string, res = methodTypes(method, serviceName).res): Promise<Outcome> {
    return new Promise((resolve) => {
      // Generous: a slow answer under load (a HashKV of 600,000 revisions) is not what is tested.
      this.client(serviceName, address)[method]!(msg, { deadline: Date.now() + 30_000 }, (err, out) => {
        if (err) resolve({ error: { code: err.code, details: err.details } });
        else resolve({ ok: plain(res, out as Record<string, unknown>) });
      });
    });
  }
}

function describe(req: object): string {
  return JSON.stringify(req, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v));
}

/** An etcd and a kvs node side by side; every request goes to both and must get the same answer. */
export class Differ {
  /** The current revision, as the last successful response reported it. */
  revision = 1;
  /** The revision of the last successful compaction (0: none yet). */
  compacted = 0;

  /** How many requests got different answers. */
  differences = 0;

  constructor(readonly etcd: Endpoint, readonly kvs: Endpoint, private readonly kvsLog: () => string = () => '') {}

  /** The kvs node's log (its last 16 KiB), for a failure report. */
  kvsOutput(): string {
    return this.kvsLog().slice(-16 * 1024);
  }

  /** Sends `req` to `method` of `serviceName` on both and returns both outcomes, unchecked. */
  async both(serviceName: string, method: string, req: object): Promise<{ etcd: Outcome; kvs: Outcome }> {
    const msg = encodeRequest(method, req, serviceName);
    const send = (e: Endpoint) => (method === 'LeaseKeepAlive' ? e.keepAlive(msg) : e.call(method, msg, serviceName));
    const [etcd, kvs] = await Promise.all([send(this.etcd), send(this.kvs)]);
    return { etcd, kvs };
  }

  /** Sends `req` to both; asserts the outcomes are equal; returns etcd's. */
  async same(method: Method, req: object, context = ''): Promise<Outcome> {
    const { etcd: want, kvs: got } = await this.both(serviceOf(method), method, req);
    try {
      assert.deepStrictEqual(got, want);
    } catch (err) {
      this.differences++;
      (err as Error).message = `kvs and etcd differ on ${method} ${describe(req)}${context ? ` (${context})` : ''}\n${(err as Error).message}`;
      throw err;
    }
    if ('ok' in want && want.ok.header) {
      const rev = Number(want.ok.header.revision);
      if (rev > 0) this.revision = rev;
    }
    if (method === 'Compact' && 'ok' in want) this.compacted = Number((req as { revision?: number }).revision ?? 0);
    return want;
  }

  /** Like `same`, and both must have succeeded: returns the (common) response. */
  async ok(method: Method, req: object, context = ''): Promise<Plain> {
    const out = await this.same(method, req, context);
    if ('error' in out) assert.fail(`${method} ${describe(req)} failed on both: ${out.error.code} ${out.error.details}`);
    return out.ok;
  }

  /** Like `same`, and both must have failed with gRPC status `code`: returns the message. */
  async fails(method: Method, req: object, code: grpc.status, context = ''): Promise<string> {
    const out = await this.same(method, req, context);
    if ('ok' in out) assert.fail(`${method} ${describe(req)} succeeded on both, expected status ${code}`);
    assert.equal(out.error.code, code, `${method} ${describe(req)}: ${out.error.details}`);
    return out.error.details;
  }

  range(req: object, context?: string): Promise<Plain> { return this.ok('Range', req, context); }
  put(req: object, context?: string): Promise<Plain> { return this.ok('Put', req, context); }
  del(req: object, context?: string): Promise<Plain> { return this.ok('DeleteRange', req, context); }
  txn(req: object, context?: string): Promise<Plain> { return this.ok('Txn', req, context); }
  compact(req: object, context?: string): Promise<Plain> { return this.ok('Compact', req, context); }

  /** A Watch stream on each server. */
  watch(t: Ctx): WatchPair {
    return new WatchPair(this, this.etcd.watch(t), this.kvs.watch(t));
  }
}

/** Responses of one Watch stream, taken per watch id in arrival order. */
export class ResponseQueue {
  private readonly got: Plain[] = [];
  private wake: (() => void) | undefined;
  private ended: string | undefined;

  private chain: Promise<void> = Promise.resolve();

  constructor(readonly name: string, readonly call: grpc.ClientDuplexStream<unknown, unknown>, private readonly sync?: () => Promise<void>) {
    call.on('data', (m: unknown) => {
      this.got.push(plain(watchResponse, m as Record<string, unknown>));
      this.wake?.();
    });
    call.on('error', (err: grpc.ServiceError) => {
      this.ended = `stream failed: ${err.code} ${err.details}`;
      this.wake?.();
    });
    call.on('end', () => {
      this.ended ??= 'stream ended';
      this.wake?.();
    });
  }

  send(msg: protobuf.Message): void {
    if (!this.sync) {
      this.call.write(msg);
      return;
    }
    const sync = this.sync;
    this.chain = this.chain.then(sync).then(() => void this.call.write(msg));
  }

  /** Responses received and not taken yet. */
  pending(): Plain[] {
    return this.got.slice();
  }

  /**
   * The next counts[id] responses of each watch id, in arrival order; fails (rather than
   * hangs) after `timeoutMs`, naming what came.
   */
  async take(counts: Record<string, number>, timeoutMs = 30_000): Promise<Record<string, Plain[]>> {
    const deadline = Date.now() + timeoutMs;
    const have = (id: string) => this.got.filter((r) => r.watchId === id).length;
    const missing = () => Object.entries(counts).filter(([id, n]) => have(id) < n);
    while (missing().length) {
      const describe = () => `${this.name}: waiting for ${JSON.stringify(Object.fromEntries(missing()))} responses by watch id; have ${JSON.stringify(this.got.map((r) => abbreviate(r)))}`;
      if (this.ended) throw new Error(`${describe()}; ${this.ended}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`${describe()} after ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = undefined;
    }
    const out: Record<string, Plain[]> = {};
    for (const [id, n] of Object.entries(counts)) {
      out[id] = [];
      for (let i = 0; i < this.got.length && out[id]!.length < n; ) {
        if (this.got[i].watchId === id) out[id]!.push(...this.got.splice(i, 1));
        else i++;
      }
    }
    return out;
  }
}

/** Long strings (large values) as their length and digest, so a difference report stays readable. */
function abbreviate(v: Plain): Plain {
  if (typeof v === 'string') return v.length > 1024 ? `<${v.length} bytes, sha1 ${createHash('sha1').update(v, 'latin1').digest('hex')}>` : v;
  if (Array.isArray(v)) return v.map(abbreviate);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, abbreviate(x)]));
  return v;
}

/** The same Watch stream on both servers: requests go to both, responses are compared. */
export class WatchPair {
  constructor(private readonly d: Differ, readonly etcd: ResponseQueue, readonly kvs: ResponseQueue) {}

  send(req: object): void {
    const msg = watchRequest.fromObject(toWire(watchRequest, req as Record<string, unknown>));
    this.etcd.send(msg);
    this.kvs.send(msg);
  }

  /**
   * The next responses of each watch id (counts: id -> how many), compared between the servers.
   * Only each watcher's own order is fixed: how different watchers' responses interleave is
   * not (etcd catches up past-revision watchers 100 ms later, in map order). Returns etcd's.
   */
  async expect(counts: Record<string | number, number>, context = ''): Promise<Record<string, Plain[]>> {
    const c = Object.fromEntries(Object.entries(counts).map(([id, n]) => [String(id), n]));
    const [want, got] = await Promise.all([this.etcd.take(c), this.kvs.take(c)]);
    const ab = (x: Record<string, Plain[]>) => Object.fromEntries(Object.entries(x).map(([id, rs]) => [id, rs.map(abbreviate)]));
    try {
      assert.deepStrictEqual(ab(got), ab(want));
    } catch (err) {
      this.d.differences++;
      (err as Error).message = `kvs and etcd watch responses differ${context ? ` (${context})` : ''}\n${(err as Error).message}`;
      throw err;
    }
    return want;
  }

  /** Neither server sent anything not yet taken: call after a response that must come last. */
  nothingElse(context = ''): void {
    assert.deepEqual(this.etcd.pending().map(abbreviate), [], `etcd sent more${context ? ` (${context})` : ''}`);
    assert.deepEqual(this.kvs.pending().map(abbreviate), [], `kvs sent more${context ? ` (${context})` : ''}`);
  }
}

/**
 * Starts etcd and kvs (in parallel) for `t`; both are stopped when `t` ends. With
 * KVS_DIFFERENTIAL_CLUSTER=N in the environment, kvs is a cluster of N nodes and every request
 * goes to a node picked at random (seed: KVS_DIFFERENTIAL_SEED, default 1).
 */
export async function startPair(t: Ctx, args: { etcd?: string[]; kvs?: string[] } = {}): Promise<Differ> {
  const clusterSize = Number(process.env.KVS_DIFFERENTIAL_CLUSTER ?? 0);
  if (clusterSize > 0) {
    const [etcd, cluster] = await Promise.all([startEtcd(t, args.etcd), startCluster(t, clusterSize, { args: args.kvs })]);
    await waitForLeader(cluster.nodes);
    const output = () => cluster.nodes.map((n) => `--- ${n.id}\n${n.kvs.output().slice(-8 * 1024)}`).join('\n');
    const pick = prng(Number(process.env.KVS_DIFFERENTIAL_SEED ?? 1));
    return new Differ(new Endpoint(t, 'etcd', etcd.endpoint), new Endpoint(t, 'kvs', cluster.nodes.map((n) => n.endpoint), pick), output);
  }
  const [etcd, kvs] = await Promise.all([startEtcd(t, args.etcd), startKvs(t, { args: args.kvs })]);
  const d = new Differ(new Endpoint(t, 'etcd', etcd.endpoint), new Endpoint(t, 'kvs', kvs.endpoint), () => kvs.output());
  // Registered after the nodes, so it runs before they are stopped.
  onCleanup(t, () => {
    if (d.differences) process.stderr.write(`--- kvs output (${d.differences} differences) ---\n${d.kvsOutput()}\n`);
  });
  return d;
}

/** The revision in a response's header. */
export const rev = (r: Plain): number => Number(r.header.revision);

/** Fresh key prefixes, `name/1/`, `name/2/`, ...: no case sees another's keys unless it ranges past its prefix on purpose. */
export function freshPrefixes(): (name: string) => string {
  let seq = 0;
  return (name) => `${name}/${++seq}/`;
}

/** The range_end that covers every key starting with `prefix` (etcd's GetPrefixRangeEnd). */
export function prefixEnd(prefix: string): string {
  return prefixRangeEnd(Buffer.from(prefix, 'latin1')).toString('latin1');
}

