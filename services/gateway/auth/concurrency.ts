// Checks of the Maintenance, Lock and Election services while auth is enabled.
//
// Maintenance follows etcd's later releases: Status and listing alarms need a user, the rest
// (Defragment, Hash, HashKV, MoveLeader, Snapshot, alarm changes) the root role.
//
// Lock and Election run etcd's recipes in the gateway
// (docs/architecture.md#lock-and-election-servicesgatewayconcurrency). etcd 3.4 runs them
// on an embedded client that carries the caller's token (v3lock, v3election), so every Txn,
// DeleteRange, Range and watch a recipe makes is checked on its own, as if the caller had sent
// it, when it is made: a write-only user may Unlock (a delete) but not Lock (a Txn comparing
// its key); a user with read and write on its own contender key only wins a Campaign's Txn
// (the key is written) and is then refused the Range over the election's prefix. recipeGuard
// makes the same checks in the same order, with the rules of kvs's KV service for each request
// (shared/auth/requests.ts: a Txn's puts also need write on the keys of their lease, as in
// etcd's later releases). A request etcd's validation refuses (an empty key) is left to
// storage, which answers it as etcd does, before the token is even looked at.
import type { ServerCall } from '../../../shared/grpc/server.js';
import type { AuthGate, Caller } from './gate.js';
import type { CallLike } from './credentials.js';
import type { OpGuard } from '../concurrency/backend.js';
import { decode } from '../../../shared/proto/index.js';
import { Errors } from '../../../shared/errors.js';
import { checkDeleteRange, checkTxn } from '../../../shared/auth/requests.js';
import { checkIntervals, checkTxnRequest } from '../../../shared/mvcc/request-checks.js';
import type { DeleteRangeRequest, TxnRequest } from '../../../shared/mvcc/requests.js';

type Check = (caller: Caller, call: ServerCall<any, any>) => void;

export const maintenanceChecks: Record<string, Check> = {
  Status: (c) => c.requireUser(),
  Alarm: (c, call) => (call.request?.action ? c.admin() : c.requireUser()),
  Defragment: (c) => c.admin(),
  Hash: (c) => c.admin(),
  HashKV: (c) => c.admin(),
  MoveLeader: (c) => c.admin(),
  Snapshot: (c) => c.admin(),
};

/** The OpGuard of one Lock or Election call: its caller's checks, each made when the recipe gets there. */
export function recipeGuard(gate: AuthGate, call: CallLike): OpGuard {
  /** The caller as of now (undefined while auth is disabled), and the auth revision. */
  const now = (): { caller: Caller | undefined; revision: number } => {
    gate.db.env.resetReadTxn();
    const meta = gate.meta();
    return { caller: meta.enabled ? gate.identify(call, meta.revision) : undefined, revision: meta.revision };
  };
  return {
    write(kind, body) {
      const request = validated(kind, body);
      if (!request) {
        gate.db.env.resetReadTxn();
        return gate.meta().revision;
      }
      const { caller, revision } = now();
      if (caller) {
        if (request.txn) checkTxn(caller, request.txn);
        else checkDeleteRange(caller, request.deleteRange!);
      }
      return revision;
    },
    grantLease() {
      // LeaseGrant needs a user, as in etcd's later releases (3.4.23 grants the session's lease
      // without one, then refuses the recipe's first request with the same error).
      now().caller?.requireUser();
    },
    read(key, rangeEnd) {
      now().caller?.read(key, rangeEnd ?? NONE);
    },
    recheckAfter: (err) => gate.recheckAfter(err),
  };
}

const NONE = new Uint8Array(0);

/** The decoded request, or undefined when etcd's validation refuses it (storage answers that). */
function validated(kind: 'txn' | 'deleteRange', body: Buffer): { txn?: TxnRequest; deleteRange?: DeleteRangeRequest } | undefined {
  try {
    if (kind === 'txn') {
      const txn = decode<TxnRequest>('etcdserverpb.TxnRequest', body);
      checkTxnRequest(txn);
      checkIntervals(txn.success);
      checkIntervals(txn.failure);
      return { txn };
    }
    const deleteRange = decode<DeleteRangeRequest>('etcdserverpb.DeleteRangeRequest', body);
    if (deleteRange.key.length === 0) throw Errors.emptyKey;
    return { deleteRange };
  } catch {
    return undefined;
  }
}
