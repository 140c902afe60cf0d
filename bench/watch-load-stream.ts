// A Watch stream for the watch workloads (load-generator side): creates watchers one at a
// time (each answered by its created response) and reports each response's events as
// (watch id, revision). Over @grpc/grpc-js, on its own connection; responses are decoded
// with protobufjs, the same cost against either server.
import * as grpc from '@grpc/grpc-js';
import { decode, encode, service, num } from '../shared/proto/index.js';

const PATH = service('etcdserverpb.Watch').Watch!.path;
const raw = (b: Buffer): Buffer => b;

interface Response {
  watchId: number | { high: number; low: number };
  created: boolean;
  canceled: boolean;
  cancelReason: string;
  events: { kv: { modRevision: number | { high: number; low: number } } }[];
}

export class WatchLoadStream {
  private readonly client: grpc.Client;
  private readonly call: grpc.ClientDuplexStream<Buffer, Buffer>;
  private pendingCreate: ((id: number) => void) | undefined;
  private failed: Error | undefined;

  /** `onEvents(watchId, revision)` for each response with events (its last event's revision). */
  constructor(endpoint: string, private readonly onEvents: (watchId: number, revision: number) => void) {
    this.client = new grpc.Client(endpoint, grpc.credentials.createInsecure(), {
      'grpc.use_local_subchannel_pool': 1,
      'grpc.max_receive_message_length': 64 * 1024 * 1024,
    });
    this.call = this.client.makeBidiStreamRequest(PATH, raw, raw);
    this.call.on('data', (b: Buffer) => {
      const r = decode<Response>('etcdserverpb.WatchResponse', b);
      const id = num(r.watchId as number);
      if (r.created) {
        if (r.canceled) this.failed = new Error(`watch create failed: ${r.cancelReason}`);
        this.pendingCreate?.(id);
      } else if (r.events.length) {
        this.onEvents(id, num(r.events[r.events.length - 1]!.kv.modRevision as number));
      }
    });
    this.call.on('error', (err) => (this.failed = err));
  }

  /** Watches the keys in [key, rangeEnd); resolves with the watch id. */
  create(key: Buffer, rangeEnd: Buffer): Promise<number> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.pendingCreate = (id) => {
        this.pendingCreate = undefined;
        if (this.failed) reject(this.failed);
        else resolve(id);
      };
      this.call.write(encode('etcdserverpb.WatchRequest', { createRequest: { key, rangeEnd } }));
    });
  }

  close(): void {
    this.call.cancel();
    this.client.close();
  }
}

/** The revision of an encoded PutResponse. */
export function putRevision(res: Buffer): number {
  return num(decode<{ header: { revision: number } }>('etcdserverpb.PutResponse', res).header.revision);
}
