// etcdserverpb.KV. Range reads LMDB in this process (a fresh read snapshot per request, so a
// read issued after a write was acknowledged sees it); writes go to storage as the client's
// own bytes, and storage's encoded response comes back as is.
import * as grpc from '@grpc/grpc-js';
import type { ServerCall, UnaryCallback } from '../../shared/grpc/http2-server.js';
import { service } from '../../shared/proto/index.js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { range } from '../../shared/mvcc/range.js';
import * as R from '../../shared/mvcc/responses.js';
import { EtcdError, Errors, MAX_REQUEST_BYTES } from '../../shared/errors.js';
import { rangeParams, type RangeRequest } from '../storage/mvcc/execute.js';
import type { StorageLink } from './storage-client.js';
import type { NodeInfo } from './node-info.js';
import { Op } from '../storage/engine.js';
import type { GatewaySpans } from './spans.js';

export function toServiceError(err: unknown): grpc.ServiceError | Partial<grpc.StatusObject> {
  if (err instanceof EtcdError) return { code: err.code, details: err.message };
  return { code: grpc.status.INTERNAL, details: `kvs: ${(err as Error)?.message ?? String(err)}` };
}

type Unary<Req> = (call: ServerCall<Req, Buffer>, cb: UnaryCallback<Buffer>) => void;

/**
 * A unary call whose request bytes go to storage as they came, and whose answer comes back as
 * is. With `spans` (tracing on) the call gets its write span, which storage's WAL span joins;
 * without, the handler is the untraced one: nothing decoded, nothing allocated for tracing.
 */
export function forward(link: StorageLink, op: number, spans?: GatewaySpans): Unary<Buffer> {
  if (spans) {
    return (call, cb) => {
      const span = spans.write(call, op);
      send(link, op, call.request, spans.traceParent(span), spans.ending(span, cb));
    };
  }
  return (call, cb) => send(link, op, call.request, undefined, cb);
}

function send(link: StorageLink, op: number, body: Buffer, traceParent: string | undefined, cb: UnaryCallback<Buffer>): void {
  if (body.length > MAX_REQUEST_BYTES) return cb(toServiceError(Errors.requestTooLarge));
  link.call(op, body, traceParent).then(
    (res) => cb(null, res),
    (err) => cb(toServiceError(err)),
  );
}

/** etcd's KV service; `spans` only while tracing is on. */
export function kvService(db: MvccDb, link: StorageLink, node: NodeInfo, spans?: GatewaySpans) {
  const def = service('etcdserverpb.KV', { rawRequests: ['Put', 'DeleteRange', 'Txn', 'Compact'] });
  const Range = (call: ServerCall<RangeRequest, Buffer>, cb: UnaryCallback<Buffer>) => {
    try {
      db.env.resetReadTxn();
      const rr = range(db, rangeParams(call.request));
      cb(null, R.build((w) => R.rangeResponse(w, node.header(rr.revision), rr.kvs, rr.more, rr.count)));
    } catch (err) {
      cb(toServiceError(err));
    }
  };
  const impl = {
    Range: spans ? spans.range(Range) : Range,
    Put: forward(link, Op.PUT, spans),
    DeleteRange: forward(link, Op.DELETE_RANGE, spans),
    Txn: forward(link, Op.TXN, spans),
    Compact: forward(link, Op.COMPACT, spans),
  };
  return { def, impl };
}
