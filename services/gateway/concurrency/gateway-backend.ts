// The Backend of the Lock and Election services inside the gateway: Txn, DeleteRange and
// LeaseGrant go to storage over the gateway's own storage link (as a client's writes do),
// reads come from this process's LMDB view (on a cluster, once it covers the leader's committed
// index, as a client's linearizable Range), and watches are registered on the watch hub. Each
// call's backend checks its operations for the caller (an OpGuard), one by one.
import { encode, decode, bigint, num } from '../../../shared/proto/index.js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import type { Header } from '../../../shared/mvcc/responses.js';
import { range, SortOrder, SortTarget } from '../../../shared/mvcc/range.js';
import type { WriteLink } from '../../../shared/batch-link/link.js';
import type { NodeInfo } from '../node-info.js';
import { Op } from '../../../shared/storage/ops.js';
import { EtcdError } from '../../../shared/errors.js';
import { AuthErrors } from '../../../shared/auth/errors.js';
import type { Backend, KeyValueMessage, OpGuard, RangeRequest, TxnRequest, WatchStream } from './backend.js';

interface HeaderMessage { clusterId: unknown; memberId: unknown; revision: unknown; raftTerm: unknown }

function header(h: HeaderMessage | null | undefined): Header {
  return {
    clusterId: String(h?.clusterId ?? '0'),
    memberId: String(h?.memberId ?? '0'),
    revision: num(h?.revision as number),
    raftTerm: num(h?.raftTerm as number),
  };
}

/** Watches on the hub, as the Backend wants them (set once the watch hub is wired). */
export type WatchFn = (key: Buffer, rangeEnd: Buffer | undefined, fromRev: number) => WatchStream;

/** A write whose check went stale before storage executed it (auth changed) is checked again. */
const STALE_RETRIES = 3;

/**
 * The backend of one call: with `guard`, every operation is checked for the caller first (as
 * etcd's embedded client's requests are), and writes carry the auth revision they were checked at.
 * Without it (and for `cleanup`), nothing is checked.
 */
export type BackendFor = (guard?: OpGuard) => Backend;

export function gatewayBackend(db: MvccDb, node: NodeInfo, link: WriteLink, watch: WatchFn): BackendFor {
  /**
   * Runs a permission check; a refusal is checked once more after the wait the guard names (on
   * a cluster, until this node has what the leader had committed: a grant made through the
   * leader a moment ago counts, as it does for etcd, which checks the recipe's requests when it
   * applies them).
   */
  const check = async <T>(guard: OpGuard, fn: () => T): Promise<T> => {
    try {
      return fn();
    } catch (err) {
      const wait = guard.recheckAfter(err);
      if (!wait) throw err;
      await wait.catch(() => {
        throw err; // no leader to catch up with: the refusal stands
      });
      return fn();
    }
  };
  const write = async (op: number, kind: 'txn' | 'deleteRange', body: Buffer, guard: OpGuard | undefined): Promise<Buffer> => {
    for (let attempt = 0; ; attempt++) {
      const revision = guard ? await check(guard, () => guard.write(kind, body)) : 0;
      try {
        return await link.call(op, body, revision);
      } catch (err) {
        if (guard && attempt < STALE_RETRIES && err instanceof EtcdError && err.message === AuthErrors.authOldRevision.message) continue;
        throw err;
      }
    }
  };
  const make = (guard: OpGuard | undefined, unchecked: () => Backend): Backend => ({
    get cleanup() {
      return unchecked();
    },
    async txn(req: TxnRequest) {
      const res = decode<{ header: HeaderMessage; succeeded: boolean; responses: { responseRange?: { kvs: KeyValueMessage[] } }[] }>(
        'etcdserverpb.TxnResponse',
        await write(Op.TXN, 'txn', encode('etcdserverpb.TxnRequest', req), guard),
      );
      return { header: header(res.header), succeeded: res.succeeded, ranges: res.responses.map((r) => r.responseRange?.kvs ?? []) };
    },
    async deleteKey(key: Buffer) {
      const body = encode('etcdserverpb.DeleteRangeRequest', { key });
      const res = decode<{ header: HeaderMessage }>('etcdserverpb.DeleteRangeResponse', await write(Op.DELETE_RANGE, 'deleteRange', body, guard));
      return header(res.header);
    },
    async get(req: RangeRequest) {
      // etcd's embedded client reads linearizably: on a follower (or a leader that may have been
      // replaced) the local view can lag the write this recipe just made through the leader.
      if (node.mustLinearize(false)) await node.cluster!.linearize();
      db.env.resetReadTxn();
      guard?.read(req.key, req.rangeEnd);
      const rr = range(db, {
        key: req.key,
        rangeEnd: req.rangeEnd ?? Buffer.alloc(0),
        limit: req.limit ?? 0,
        revision: 0,
        sortOrder: req.sortOrder ?? SortOrder.NONE,
        sortTarget: req.sortTarget ?? SortTarget.KEY,
        keysOnly: false,
        countOnly: false,
        minModRevision: 0,
        maxModRevision: 0,
        minCreateRevision: 0,
        maxCreateRevision: req.maxCreateRevision ?? 0,
      });
      return { header: node.header(rr.revision), kvs: rr.kvs.map((kv) => decode<KeyValueMessage>('mvccpb.KeyValue', kv)) };
    },
    async grantLease(ttl: number) {
      if (guard) await check(guard, () => guard.grantLease());
      const res = decode<{ ID: unknown }>('etcdserverpb.LeaseGrantResponse', await link.call(Op.LEASE_GRANT, encode('etcdserverpb.LeaseGrantRequest', { TTL: ttl, ID: 0 })));
      return bigint(res.ID as number);
    },
    watch(key: Buffer, rangeEnd: Buffer | undefined, fromRev: number) {
      guard?.read(key, rangeEnd);
      return watch(key, rangeEnd, fromRev);
    },
  });
  const unchecked: Backend = make(undefined, () => unchecked);
  return (guard) => (guard ? make(guard, () => unchecked) : unchecked);
}
