// etcdserverpb.KV. Range reads LMDB in this process (a fresh read snapshot per request, so a
// read issued after a write was acknowledged sees it); writes go to storage as the client's
// own bytes, and storage's encoded response comes back as is.
import type { ServerCall, UnaryCallback } from '../../shared/grpc/server.js';
import { service } from '../../shared/proto/index.js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { encodedRange } from '../../shared/mvcc/range.js';
import { rangeResponseRecycler } from '../../shared/mvcc/responses.js';
import { Errors, MAX_REQUEST_BYTES } from '../../shared/errors.js';
import { rangeParams, type RangeRequest } from '../../shared/mvcc/requests.js';
import type { WriteLink } from '../../shared/batch-link/link.js';
import type { NodeInfo } from './node-info.js';
import { Op } from '../../shared/storage/ops.js';
import type { GatewaySpans } from './spans.js';
import type { AuthGate } from './auth/gate.js';
import { guardedForward, writeChecks } from './auth/guard.js';
import { headerRevision } from './cluster-view.js';
import { toServiceError } from './service-error.js';
import { Stage, monotonicMicros, type StageTrace } from '../../shared/stages.js';

type Unary<Req> = (call: ServerCall<Req, Buffer>, cb: UnaryCallback<Buffer>) => void;

/** A unary call whose request bytes go to storage as they came, and whose answer comes back as is. */
export function forward(link: WriteLink, op: number): Unary<Buffer> {
  return (call, cb) => {
    if (call.request.length > MAX_REQUEST_BYTES) return cb(toServiceError(Errors.requestTooLarge));
    link.call(op, call.request).then(
      (res) => cb(null, res),
      (err) => cb(toServiceError(err)),
    );
  };
}

type RawUnary = (call: ServerCall<Buffer, Buffer>, cb: UnaryCallback<Buffer>) => void;

/**
 * With a stage trace (KVS_STAGE_TRACE, shared/stages.ts): a Put's arrival, its answer from
 * storage and the answer handed to the client's stream, keyed by the answer's revision (the
 * arrival is kept in the call's closure until then). Without one, the handler as it is.
 */
function stagedPut(handler: RawUnary, trace: StageTrace | undefined): RawUnary {
  if (!trace) return handler;
  return (call, cb) => {
    const received = monotonicMicros();
    handler(call, (err, res) => {
      const answered = monotonicMicros();
      cb(err, res);
      const sent = monotonicMicros();
      if (err || !res) return;
      const revision = headerRevision(res);
      trace.stamp(Stage.GATEWAY_RECEIVE, revision, received);
      trace.stamp(Stage.GATEWAY_ANSWER_RECEIVED, revision, answered);
      trace.stamp(Stage.GATEWAY_ANSWER_SENT, revision, sent);
    });
  };
}

/** etcd's KV service, checking callers once auth is enabled; `spans` only while tracing is on. */
export function kvService(db: MvccDb, link: WriteLink, node: NodeInfo, gate: AuthGate, spans?: GatewaySpans, stages?: StageTrace) {
  const def = service('etcdserverpb.KV', { rawRequests: ['Put', 'DeleteRange', 'Txn', 'Compact'] });
  const Range = (call: ServerCall<RangeRequest, Buffer>, cb: UnaryCallback<Buffer>) => {
    // A follower in cluster mode: first what the leader had committed (docs/cluster.md).
    if (node.mustLinearize(call.request.serializable)) {
      node.cluster!.linearize().then(() => read(call, cb), (err) => cb(toServiceError(err)));
      return;
    }
    read(call, cb);
  };
  const read = (call: ServerCall<RangeRequest, Buffer>, cb: UnaryCallback<Buffer>) => {
    try {
      db.env.resetReadTxn();
      // With auth enabled: read on the whole range (an empty key is refused by encodedRange() first, as etcd).
      if (call.request.key.length) gate.caller(call)?.read(call.request.key, call.request.rangeEnd);
      const body = encodedRange(db, rangeParams(call.request), (revision) => node.header(revision));
      // A large response's buffer serves a later Range once its bytes are in the socket.
      cb(null, body, rangeResponseRecycler(body));
    } catch (err) {
      cb(toServiceError(err));
    }
  };
  const impl = {
    Range: spans ? spans.range(Range) : Range,
    Put: stagedPut(guardedForward(link, Op.PUT, gate, writeChecks.put, spans), stages),
    DeleteRange: guardedForward(link, Op.DELETE_RANGE, gate, writeChecks.deleteRange, spans),
    Txn: guardedForward(link, Op.TXN, gate, writeChecks.txn, spans),
    Compact: guardedForward(link, Op.COMPACT, gate, writeChecks.user, spans),
  };
  return { def, impl };
}
