// A small client of an etcd v3 cluster over gRPC, for kvs's own commands that talk to etcd
// (`kvs migrate`): endpoints, TLS and user/password as etcdctl takes them, the token sent with
// every call and fetched again when etcd says it expired, and the next endpoint tried when one
// is unreachable. Requests and responses are protobufjs objects of the repo's etcd protos.
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { service } from './proto/index.js';

export interface EtcdClientOptions {
  /** `host:port`, `http://host:port` or `https://host:port`, as etcdctl's --endpoints. */
  endpoints: string[];
  /** PEM files, as etcdctl's --cacert, --cert, --key. A CA file alone turns TLS on. */
  cacert?: string;
  cert?: string;
  key?: string;
  /** `name` or `name:password` (etcdctl's --user); the password may come separately. */
  user?: string;
  password?: string;
  /** How long to wait for a connection to an endpoint (etcdctl's --dial-timeout). */
  dialTimeoutMs?: number;
  /**
   * TLS without verifying the server's certificate (etcdctl's --insecure-skip-tls-verify): for a
   * node's own console dialing its cluster's client URLs, whose CA it has no file for.
   */
  insecureSkipTlsVerify?: boolean;
}

type Unary = (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: any) => void) => grpc.ClientUnaryCall;
type Client = grpc.Client & Record<string, any>;

const SERVICES = ['KV', 'Watch', 'Lease', 'Auth', 'Maintenance', 'Cluster'] as const;
type ServiceName = (typeof SERVICES)[number];
const CTORS = Object.fromEntries(SERVICES.map((s) => [s, grpc.makeGenericClientConstructor(service(`etcdserverpb.${s}`), s)])) as Record<ServiceName, grpc.ServiceClientConstructor>;

/** etcd's answer when a token is unknown or expired (auth/store.go ErrInvalidAuthToken). */
const INVALID_TOKEN = 'etcdserver: invalid auth token';
export const USER_EMPTY = 'etcdserver: user name is empty';
const AUTH_NOT_ENABLED = 'etcdserver: authentication is not enabled';

/** An endpoint as grpc-js's target and whether it wants TLS. */
export function parseEndpoint(endpoint: string): { target: string; tls: boolean } {
  const m = /^(?:(https?|unixs?):\/\/)?(.+)$/.exec(endpoint.trim());
  if (!m || !m[2]) throw new Error(`bad endpoint ${JSON.stringify(endpoint)}: want host:port, http://host:port or https://host:port`);
  const scheme = m[1];
  if (scheme === 'unix' || scheme === 'unixs') throw new Error(`endpoint ${endpoint}: unix sockets are not supported; use host:port`);
  const target = m[2].replace(/\/+$/, '');
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:/[\]]+):\d{1,5}$/.test(target)) throw new Error(`bad endpoint ${JSON.stringify(endpoint)}: want host:port`);
  return { target, tls: scheme === 'https' };
}

export class EtcdClient {
  private clients = new Map<ServiceName, Client>();
  private endpointIndex = 0;
  private token: string | undefined;
  private readonly targets: { target: string; tls: boolean }[];
  private readonly credentials: grpc.ChannelCredentials;
  private readonly user?: { name: string; password: string };

  constructor(private readonly opts: EtcdClientOptions) {
    if (!opts.endpoints.length) throw new Error('no etcd endpoint given');
    this.targets = opts.endpoints.map(parseEndpoint);
    const tls = this.targets.some((t) => t.tls) || opts.cacert !== undefined || opts.cert !== undefined;
    if ((opts.cert === undefined) !== (opts.key === undefined)) throw new Error('--cert and --key go together');
    const read = (what: string, file?: string) => {
      if (file === undefined) return undefined;
      try {
        return fs.readFileSync(file);
      } catch (err) {
        throw new Error(`cannot read ${what} ${file}: ${(err as Error).message}`);
      }
    };
    const noVerify = opts.insecureSkipTlsVerify ? { rejectUnauthorized: false, checkServerIdentity: () => undefined } : undefined;
    this.credentials = tls
      ? grpc.credentials.createSsl(read('CA file', opts.cacert) ?? null, read('key file', opts.key) ?? null, read('certificate file', opts.cert) ?? null, noVerify)
      : grpc.credentials.createInsecure();
    if (opts.user !== undefined) {
      const i = opts.user.indexOf(':');
      const name = i < 0 ? opts.user : opts.user.slice(0, i);
      const password = i < 0 ? opts.password : opts.user.slice(i + 1);
      if (!name) throw new Error('--user: the user name is empty');
      if (password === undefined) throw new Error(`--user ${name}: no password (give --user name:password or --password)`);
      this.user = { name, password };
    }
  }

  get endpoint(): string {
    return this.targets[this.endpointIndex]!.target;
  }

  client(name: ServiceName): Client {
    let c = this.clients.get(name);
    if (!c) {
      c = new CTORS[name](this.endpoint, this.credentials, {
        'grpc.max_receive_message_length': -1,
        'grpc.max_send_message_length': 16 * 1024 * 1024,
        // etcdctl's keepalive defaults: a dead connection is noticed without a write.
        'grpc.keepalive_time_ms': 30_000,
        'grpc.keepalive_timeout_ms': 10_000,
      }) as Client;
      this.clients.set(name, c);
    }
    return c;
  }

  /** Moves to the next endpoint (after one became unreachable); returns its target. */
  failover(): string {
    this.close();
    this.endpointIndex = (this.endpointIndex + 1) % this.targets.length;
    return this.endpoint;
  }

  /**
   * The metadata of a call: the auth token when a user was given (fetched on first use; none
   * while etcd has auth disabled, which refuses to authenticate then).
   */
  async metadata(): Promise<grpc.Metadata> {
    if (this.user) this.token ??= await this.authenticate();
    return tokenMetadata(this.user ? this.token : undefined);
  }

  private async authenticate(): Promise<string> {
    try {
      const res = await this.raw<{ token: string }>('Auth', 'Authenticate', { name: this.user!.name, password: this.user!.password }, new grpc.Metadata());
      return res.token;
    } catch (err) {
      if ((err as grpc.ServiceError).details === AUTH_NOT_ENABLED) return '';
      throw err;
    }
  }

  /** A unary call without a token, whatever user was given. */
  anonymous<T = any>(svc: ServiceName, method: string, req: object, timeoutMs?: number): Promise<T> {
    return this.raw<T>(svc, method, req, new grpc.Metadata(), timeoutMs);
  }

  /**
   * A unary call with a token the caller holds (the console passes each user's own), or none;
   * an expired token is the caller's to renew.
   */
  withToken<T = any>(token: string | undefined, svc: ServiceName, method: string, req: object, timeoutMs?: number): Promise<T> {
    return this.raw<T>(svc, method, req, tokenMetadata(token), timeoutMs);
  }

  private raw<T>(svc: ServiceName, method: string, req: object, md: grpc.Metadata, timeoutMs = 30_000): Promise<T> {
    const c = this.client(svc);
    const fn = c[method[0]!.toLowerCase() + method.slice(1)] as Unary | undefined;
    if (!fn) throw new Error(`etcdserverpb.${svc} has no method ${method}`);
    return new Promise<T>((resolve, reject) => {
      fn.call(c, req, md, { deadline: Date.now() + timeoutMs }, (err, res) => (err ? reject(err) : resolve(res as T)));
    });
  }

  /** A unary call; a token etcd no longer knows is fetched again once. */
  async call<T = any>(svc: ServiceName, method: string, req: object, timeoutMs?: number): Promise<T> {
    try {
      return await this.raw<T>(svc, method, req, await this.metadata(), timeoutMs);
    } catch (err) {
      const details = (err as grpc.ServiceError).details;
      // A token etcd forgot, or auth turned on after we found it off.
      if (this.user && (details === INVALID_TOKEN || (details === USER_EMPTY && this.token === ''))) {
        this.token = undefined;
        return this.raw<T>(svc, method, req, await this.metadata(), timeoutMs);
      }
      throw err;
    }
  }

  /** Waits until the current endpoint's channel is connected, or rejects after the dial timeout. */
  async connect(): Promise<void> {
    const c = this.client('KV');
    const deadline = Date.now() + (this.opts.dialTimeoutMs ?? 5_000);
    await new Promise<void>((resolve, reject) =>
      c.waitForReady(deadline, (err) => (err ? reject(new Error(`cannot reach etcd at ${this.endpoint}: ${err.message}`)) : resolve())),
    );
  }

  close(): void {
    for (const c of this.clients.values()) c.close();
    this.clients.clear();
  }
}

/** Call metadata carrying `token`, when there is one. */
export function tokenMetadata(token: string | undefined): grpc.Metadata {
  const md = new grpc.Metadata();
  if (token) md.set('token', token);
  return md;
}

/** Whether a gRPC error means the endpoint is gone (try another, or again later). */
export function isUnavailable(err: unknown): boolean {
  const code = (err as grpc.ServiceError)?.code;
  return code === grpc.status.UNAVAILABLE || code === grpc.status.DEADLINE_EXCEEDED || code === grpc.status.CANCELLED;
}
