// A thin etcd v3 client for the load generator: its own connection per client, requests
// encoded with protobufjs from shared/proto (method paths from service()), responses left as
// bytes. Two channels: 'h2' (default, bench/h2-channel.ts, the cheapest per call) and
// 'grpc-js' (the library every kvs process uses; `--client grpc-js` to cross-check).
import * as grpc from '@grpc/grpc-js';
import { decode, encode, service } from '../shared/proto/index.js';
import { H2Channel } from './h2-channel.js';

export type ClientKind = 'h2' | 'grpc-js';
export const CLIENT_KINDS: readonly ClientKind[] = ['h2', 'grpc-js'];

interface Channel {
  connect(timeoutMs: number): Promise<void>;
  unary(path: string, body: Buffer, deadlineMs: number): Promise<Buffer>;
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

  unary(path: string, body: Buffer, deadlineMs: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(path, raw, raw, body, { deadline: Date.now() + deadlineMs }, (err, res) =>
        err ? reject(err) : resolve(res!),
      );
    });
  }

  close(): void {
    this.client.close();
  }
}

const KV = service('etcdserverpb.KV');
const MAINTENANCE = service('etcdserverpb.Maintenance');
const raw = (b: Buffer): Buffer => b;

const PATH = {
  range: KV.Range!.path,
  put: KV.Put!.path,
  deleteRange: KV.DeleteRange!.path,
  txn: KV.Txn!.path,
  status: MAINTENANCE.Status!.path,
};

export interface RangeOptions {
  rangeEnd?: Buffer;
  limit?: number;
  countOnly?: boolean;
}

export class KvClient {
  private readonly channel: Channel;

  constructor(
    readonly endpoint: string,
    kind: ClientKind = 'h2',
  ) {
    this.channel = kind === 'h2' ? new H2Channel(endpoint) : new GrpcJsChannel(endpoint);
  }

  /** Resolves once the connection is up (or rejects after `timeoutMs`). */
  connect(timeoutMs = 10_000): Promise<void> {
    return this.channel.connect(timeoutMs);
  }

  /** Sends already-encoded request bytes; resolves with the encoded response. */
  call(path: string, body: Buffer, deadlineMs = 30_000): Promise<Buffer> {
    return this.channel.unary(path, body, deadlineMs);
  }

  put(key: Buffer, value: Buffer): Promise<Buffer> {
    return this.call(PATH.put, encode('etcdserverpb.PutRequest', { key, value }));
  }

  range(key: Buffer, opts: RangeOptions = {}): Promise<Buffer> {
    return this.call(PATH.range, encode('etcdserverpb.RangeRequest', { key, ...opts }));
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

  async status(deadlineMs = 2000): Promise<{ version: string; dbSize: number }> {
    const res = decode('etcdserverpb.StatusResponse', await this.call(PATH.status, encode('etcdserverpb.StatusRequest', {}), deadlineMs));
    return { version: res.version, dbSize: Number(res.dbSize) };
  }

  close(): void {
    this.channel.close();
  }
}
