// Auth checks in front of services that are not forwarded writes: Watch, the Lease stream
// calls, Maintenance, Lock and Election. Each wrapper runs its check only while auth is
// enabled; with auth disabled the handler runs as before.
import { status } from '@grpc/grpc-js';
import type { ServerCall } from '../../../shared/grpc/server.js';
import { decode } from '../../../shared/proto/index.js';
import { EtcdError } from '../../../shared/errors.js';
import { allLeases } from '../../../shared/mvcc/leases.js';
import { bigint } from '../../../shared/proto/index.js';
import { toServiceError } from '../service-error.js';
import type { AuthGate, Caller } from './gate.js';

type Check = (caller: Caller, call: ServerCall<any, any>) => void;
type AnyHandler = (call: ServerCall<any, any>, cb?: (err: unknown, res?: unknown) => void) => void;

/** grpc-go's text of a status error, as etcd puts it in a watch's cancel_reason. */
const CODE_NAMES: Record<number, string> = {
  [status.INVALID_ARGUMENT]: 'InvalidArgument',
  [status.PERMISSION_DENIED]: 'PermissionDenied',
  [status.UNAUTHENTICATED]: 'Unauthenticated',
  [status.FAILED_PRECONDITION]: 'FailedPrecondition',
};

/** Runs `check` (auth enabled only) before `handler`; a refusal ends the call with its error. */
export function checked(gate: AuthGate, check: Check, handler: AnyHandler): AnyHandler {
  return (call, cb) => {
    const run = (caughtUp: boolean): void => {
      try {
        gate.db.env.resetReadTxn();
        const caller = gate.caller(call);
        if (caller) check(caller, call);
      } catch (err) {
        // A unary call refused on a follower whose view may lag the leader: checked again once
        // caught up (a stream's handler is not delayed: it must attach to the call at once).
        const wait = cb && !caughtUp ? gate.recheckAfter(err) : undefined;
        if (wait) return void wait.then(() => run(true), () => cb!(toServiceError(err)));
        const st = toServiceError(err);
        if (cb) return cb(st);
        return void call.emit('error', st);
      }
      handler(call, cb);
    };
    run(false);
  };
}

/** Wraps the named handlers of a service implementation with `check`. */
export function checkAll<T extends Record<string, unknown>>(gate: AuthGate, impl: T, checks: Partial<Record<keyof T, Check>>): T {
  const out: Record<string, unknown> = { ...impl };
  for (const [name, check] of Object.entries(checks)) {
    if (check) out[name] = checked(gate, check as Check, impl[name] as AnyHandler);
  }
  return out as T;
}

export const Checks = {
  user: ((c) => c.requireUser()) as Check,
  admin: ((c) => c.admin()) as Check,
};

/** The watch check (etcd's isWatchPermitted): the cancel_reason of a refusal, or undefined. */
export function watchAuthorizer(gate: AuthGate) {
  return (call: ServerCall<unknown, unknown>, key: Uint8Array, rangeEnd: Uint8Array): string | undefined => {
    try {
      gate.db.env.resetReadTxn();
      const caller = gate.caller(call);
      // etcd watches from "\0" when no key is given.
      caller?.read(key.length ? key : Buffer.from([0]), rangeEnd);
      return undefined;
    } catch (err) {
      if (!(err instanceof EtcdError)) throw err;
      return `rpc error: code = ${CODE_NAMES[err.code] ?? err.code} desc = ${err.message}`;
    }
  };
}

/** LeaseTimeToLive: a user; with keys, read on each (unless root), as etcd's later releases. */
export const leaseTimeToLiveCheck: Check = (caller, call) => {
  caller.requireUser();
  const r = decodeOr<{ ID: unknown; keys: boolean }>('etcdserverpb.LeaseTimeToLiveRequest', call.request as Buffer);
  if (r?.keys) caller.leaseKeysReadable(bigint(r.ID as number));
};

/** LeaseLeases: read on every key of every lease, unless root. */
export function leaseLeasesCheck(gate: AuthGate): Check {
  return (caller) => {
    caller.requireUser();
    if (caller.isAdmin()) return;
    for (const { id } of allLeases(gate.db)) caller.leaseKeysReadable(id);
  };
}

/** One keep-alive: write on every key of the lease, unless root (etcd's checkLeaseRenew). */
export function keepAliveCheck(gate: AuthGate, call: ServerCall<any, any>, body: Buffer): void {
  gate.db.env.resetReadTxn();
  const caller = gate.caller(call);
  if (!caller) return;
  caller.requireUser();
  const r = decodeOr<{ ID: unknown }>('etcdserverpb.LeaseKeepAliveRequest', body);
  if (r) caller.leaseKeys(r.ID);
}

function decodeOr<T>(typeName: string, body: Buffer): T | undefined {
  try {
    return decode<T>(typeName, body);
  } catch {
    return undefined;
  }
}
