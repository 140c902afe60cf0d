// Enforcement on the KV and Lease services' forwarded writes. With auth disabled a write goes
// on undecoded, as before, tagged with the auth revision it was read at; with auth enabled it is
// decoded for the check only (etcd's validation errors come first, so a request that fails
// them goes on to storage, which answers them), and still forwarded as the client's bytes.
import type { ServerCall, UnaryCallback } from '../../../shared/grpc/server.js';
import { decode } from '../../../shared/proto/index.js';
import { EtcdError, Errors, MAX_REQUEST_BYTES } from '../../../shared/errors.js';
import { AuthErrors } from '../../../shared/auth/errors.js';
import { checkDeleteRange, checkPut, checkTxn } from '../../../shared/auth/requests.js';
import { checkIntervals, checkPutRequest, checkTxnRequest } from '../../../shared/mvcc/request-checks.js';
import type { DeleteRangeRequest, PutRequest, TxnRequest } from '../../../shared/mvcc/requests.js';
import type { WriteLink } from '../../../shared/batch-link/link.js';
import { toServiceError } from '../service-error.js';
import type { AuthGate, Caller } from './gate.js';
import type { GatewaySpans } from '../spans.js';

/** Checks a decoded request for `caller` (throws its error); undefined = nothing to check. */
export type WriteCheck = (body: Buffer, caller: Caller) => void;

const STALE_RETRIES = 3;

/** Decodes for the check; a body that does not decode, or fails etcd's validation, is left to storage. */
function decoded<T>(typeName: string, body: Buffer, validate?: (r: T) => void): T | undefined {
  try {
    const r = decode<T>(typeName, body);
    validate?.(r);
    return r;
  } catch {
    return undefined;
  }
}

export const writeChecks = {
  put: ((body, c) => {
    const r = decoded<PutRequest>('etcdserverpb.PutRequest', body, checkPutRequest);
    if (r) checkPut(c, r);
  }) as WriteCheck,
  deleteRange: ((body, c) => {
    const r = decoded<DeleteRangeRequest>('etcdserverpb.DeleteRangeRequest', body, (d) => {
      if (d.key.length === 0) throw Errors.emptyKey;
    });
    if (r) checkDeleteRange(c, r);
  }) as WriteCheck,
  txn: ((body, c) => {
    const r = decoded<TxnRequest>('etcdserverpb.TxnRequest', body, (t) => {
      checkTxnRequest(t);
      checkIntervals(t.success);
      checkIntervals(t.failure);
    });
    if (r) checkTxn(c, r);
  }) as WriteCheck,
  /** Compact, LeaseGrant: any authenticated user (etcd's later releases; 3.4.23 asked nothing). */
  user: ((_body, c) => c.requireUser()) as WriteCheck,
  leaseRevoke: ((body, c) => {
    c.requireUser();
    const r = decoded<{ ID: unknown }>('etcdserverpb.LeaseRevokeRequest', body);
    if (r) c.leaseKeys(r.ID);
  }) as WriteCheck,
};

/**
 * A unary write forwarded to storage as the client's bytes, after `check` when auth is enabled.
 * A write whose check went stale before storage executed it (auth changed) is checked again.
 * With `spans` (tracing on) the call gets its write span, which storage's WAL span joins.
 */
export function guardedForward(link: WriteLink, op: number, gate: AuthGate, check: WriteCheck, spans?: GatewaySpans) {
  const handler = guarded(link, op, gate, check);
  if (!spans) return (call: ServerCall<Buffer, Buffer>, cb: UnaryCallback<Buffer>) => handler(call, cb, undefined);
  return (call: ServerCall<Buffer, Buffer>, cb: UnaryCallback<Buffer>) => {
    const span = spans.write(call, op);
    handler(call, spans.ending(span, cb), spans.traceParent(span));
  };
}

function guarded(link: WriteLink, op: number, gate: AuthGate, check: WriteCheck) {
  return (call: ServerCall<Buffer, Buffer>, cb: UnaryCallback<Buffer>, traceParent: string | undefined) => {
    const body = call.request;
    if (body.length > MAX_REQUEST_BYTES) return cb(toServiceError(Errors.requestTooLarge));
    const attempt = (n: number, caughtUp = false): void => {
      let revision: number;
      try {
        // A retry (auth changed under the first check) reads auth afresh.
        const meta = n === 0 && !caughtUp ? gate.writeMeta() : gate.freshMeta();
        revision = meta.revision;
        if (meta.enabled) check(body, gate.identify(call, meta.revision));
      } catch (err) {
        // A follower's view may lag what the leader granted a moment ago: check again once caught up.
        const wait = caughtUp ? undefined : gate.recheckAfter(err);
        if (wait) return void wait.then(() => attempt(n, true), () => cb(toServiceError(err)));
        return cb(toServiceError(err));
      }
      link.call(op, body, revision, traceParent).then(
        (res) => cb(null, res),
        (err) => {
          if (err instanceof EtcdError && err.message === AuthErrors.authOldRevision.message && n < STALE_RETRIES) {
            // Auth changed since this node's view: on a follower, check again once it has applied
            // what the leader had committed (else the retry could see the same old view).
            const again = () => attempt(n + 1);
            const wait = gate.catchUp();
            return wait ? void wait.then(again, again) : again();
          }
          cb(toServiceError(err));
        },
      );
    };
    attempt(0);
  };
}
