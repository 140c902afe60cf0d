// A thin etcd v3 client for the load generator: its own connection per client, requests
// encoded with protobufjs from shared/proto (method paths from service()), responses left as
// bytes. Two channels: 'h2' (default, unary-grpc-channel.ts, the cheapest per call) and
// 'grpc-js' (the library every kvs process uses; `--client grpc-js` to cross-check).
// After authenticate(), every request carries the token in the `token` metadata (as etcd's
// clients send it); without one, nothing about a request changes.
import * as grpc from '@grpc/grpc-js';
import { bigint, decode, encode, service } from '../shared/proto/index.js';
import { UnaryGrpcChannel } from './unary-grpc-channel.js';

export type ClientKind = 'h2' | 'grpc-js';
export const CLIENT_KINDS: readonly ClientKind[] = ['h2', 'grpc-js'];

interface Channel {
  connect(timeoutMs: number): Promise<void>;
  /** `token`: sent as the `token` metadata when given. */
  unary(path: string, body: Buffer, deadlineMs: number, token?: string): Promise<Buffer>;
  close(): void;
}

class GrpcJsChannel implements Channel {
  private readonly client: grpc.Client;

  constructor(endpoint: string) {
    this.client = new grpc.Client(endpoint, grpc.credentials.createInsecure(), {
      // Without this, channels to the same target share one subchannel (one TCP connection).
      'grpc.use_local_subchannel_pool': 1,
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
    });
  }

  connect(timeoutMs: number): Promise<void> {
    return new Promise((resolve, reject) =>
      this.client.waitForReady(Date.now() + timeoutMs, (err) => (err ? reject(err) : resolve())),
    );
  }

  unary(path: string, body: Buffer, deadlineMs: number, token?: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const done = (err: grpc.ServiceError | null, res?: Buffer) => (err ? reject(err) : resolve(res!));
      if (token === undefined) {
        this.client.makeUnaryRequest(path, raw, raw, body, { deadline: Date.now() + deadlineMs }, done);
        return;
      }
      // A fresh Metadata per call: grpc-js's filters add headers to the object they are given.
      const metadata = new grpc.Metadata();
      metadata.set('token', token);
      this.client.makeUnaryRequest(path, raw, raw, body, metadata, { deadline: Date.now() + deadlineMs }, done);
    });
  }

  close(): void {
    this.client.close();
  }
}

const KV = service('etcdserverpb.KV');
const MAINTENANCE = service('etcdserverpb.Maintenance');
const AUTH = service('etcdserverpb.Auth');
const raw = (b: Buffer): Buffer => b;

const PATH = {
  range: KV.Range!.path,
  put: KV.Put!.path,
  deleteRange: KV.DeleteRange!.path,
  txn: KV.Txn!.path,
  status: MAINTENANCE.Status!.path,
  hashKv: MAINTENANCE.HashKV!.path,
};

export interface RangeOptions {
  rangeEnd?: Buffer;
  limit?: number;
  countOnly?: boolean;
}

export class KvClient {
  private readonly channel: Channel;
  /** Set by authenticate(): sent with every request from then on. */
  private token: string | undefined;
  private credentials: { name: string; password: string } | undefined;
  private relogin: Promise<void> | undefined;
  /** Logins after the first, each after a request was refused with `invalid auth token`. */
  relogins = 0;

  constructor(
    readonly endpoint: string,
    kind: ClientKind = 'h2',
  ) {
    this.channel = kind === 'h2' ? new UnaryGrpcChannel(endpoint) : new GrpcJsChannel(endpoint);
  }

  /** Resolves once the connection is up (or rejects after `timeoutMs`). */
  connect(timeoutMs = 10_000): Promise<void> {
    return this.channel.connect(timeoutMs);
  }

  /** Sends already-encoded request bytes; resolves with the encoded response. */
  call(path: string, body: Buffer, deadlineMs = 30_000): Promise<Buffer> {
    return this.token === undefined ? this.channel.unary(path, body, deadlineMs) : this.callWithToken(path, body, deadlineMs);
  }

  /**
   * Logs in (Auth.Authenticate) and sends the token with every later request. A request refused
   * with `invalid auth token` (an etcd simple token expires after 300 s without use) logs in
   * again and is sent once more, as etcd's clients do.
   */
  async authenticate(name: string, password: string, deadlineMs = 30_000): Promise<void> {
    this.credentials = { name, password };
    const res = decode('etcdserverpb.AuthenticateResponse', await this.channel.unary(AUTH.Authenticate!.path, encode('etcdserverpb.AuthenticateRequest', { name, password }), deadlineMs));
    if (!res.token) throw new Error(`Authenticate as ${name} at ${this.endpoint} returned no token`);
    this.token = res.token as string;
  }

  private async callWithToken(path: string, body: Buffer, deadlineMs: number): Promise<Buffer> {
    const token = this.token;
    try {
      return await this.channel.unary(path, body, deadlineMs, token);
    } catch (err) {
      const creds = this.credentials;
      if (!creds || !/invalid auth token/.test((err as Error).message)) throw err;
      // Concurrent calls refused with the same token share one login.
      if (this.token === token && !this.relogin) {
        this.relogins++;
        this.relogin = this.authenticate(creds.name, creds.password, deadlineMs).finally(() => (this.relogin = undefined));
      }
      await this.relogin;
      return this.channel.unary(path, body, deadlineMs, this.token);
    }
  }

  /** An Auth service call by method name (e.g. 'UserAdd'); resolves with the decoded response. */
  async authCall(method: string, req: object, deadlineMs = 30_000): Promise<unknown> {
    const m = AUTH[method];
    if (!m) throw new Error(`no Auth method ${method}`);
    return m.responseDeserialize(await this.call(m.path, m.requestSerialize(req) as Buffer, deadlineMs));
  }

  put(key: Buffer, value: Buffer, deadlineMs?: number): Promise<Buffer> {
    return this.call(PATH.put, encode('etcdserverpb.PutRequest', { key, value }), deadlineMs);
  }

  range(key: Buffer, opts: RangeOptions = {}, deadlineMs?: number): Promise<Buffer> {
    return this.call(PATH.range, encode('etcdserverpb.RangeRequest', { key, ...opts }), deadlineMs);
  }

  deleteRange(key: Buffer, rangeEnd: Buffer): Promise<Buffer> {
    return this.call(PATH.deleteRange, encode('etcdserverpb.DeleteRangeRequest', { key, rangeEnd }));
  }

  /** One Txn with no compares whose success branch puts all `pairs`. */
  putMany(pairs: [Buffer, Buffer][]): Promise<Buffer> {
    const success = pairs.map(([key, value]) => ({ requestPut: { key, value } }));
    return this.call(PATH.txn, encode('etcdserverpb.TxnRequest', { success }));
  }

  /** Number of keys in [key, rangeEnd). */
  async count(key: Buffer, rangeEnd: Buffer): Promise<number> {
    const res = decode('etcdserverpb.RangeResponse', await this.range(key, { rangeEnd, countOnly: true }));
    return Number(res.count);
  }

  /** Maintenance.Status; `leader` and `memberId` as decimal strings ('0': no leader known). */
  async status(deadlineMs = 2000): Promise<{ version: string; dbSize: number; leader: string; memberId: string }> {
    const res = decode('etcdserverpb.StatusResponse', await this.call(PATH.status, encode('etcdserverpb.StatusRequest', {}), deadlineMs));
    return { version: res.version, dbSize: Number(res.dbSize), leader: bigint(res.leader).toString(), memberId: bigint(res.header?.memberId).toString() };
  }

  /** Maintenance.HashKV: the hash of the MVCC history through `revision` (0: the latest). */
  async hashKv(revision: number, deadlineMs = 10_000): Promise<{ hash: number; revision: number }> {
    const res = decode('etcdserverpb.HashKVResponse', await this.call(PATH.hashKv, encode('etcdserverpb.HashKVRequest', { revision }), deadlineMs));
    return { hash: Number(res.hash), revision: Number(res.header?.revision ?? 0) };
  }

  close(): void {
    this.channel.close();
  }
}
