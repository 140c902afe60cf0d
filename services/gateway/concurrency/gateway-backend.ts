// The Backend of the Lock and Election services inside the gateway: Txn, DeleteRange and
// LeaseGrant go to storage over the gateway's own storage link (as a client's writes do),
// reads come from this process's LMDB view, and watches are registered on the watch hub.
import { encode, decode, bigint, num } from '../../../shared/proto/index.js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import type { Header } from '../../../shared/mvcc/responses.js';
import { range, SortOrder, SortTarget } from '../../../shared/mvcc/range.js';
import type { WriteLink } from '../../../shared/grpc/batch-link.js';
import type { NodeInfo } from '../node-info.js';
import { Op } from '../../storage/engine.js';
import type { Backend, KeyValueMessage, RangeRequest, TxnRequest, WatchStream } from './backend.js';

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

export function gatewayBackend(db: MvccDb, node: NodeInfo, link: WriteLink, watch: WatchFn): Backend {
  return {
    async txn(req: TxnRequest) {
      const res = decode<{ header: HeaderMessage; succeeded: boolean; responses: { responseRange?: { kvs: KeyValueMessage[] } }[] }>(
        'etcdserverpb.TxnResponse',
        await link.call(Op.TXN, encode('etcdserverpb.TxnRequest', req)),
      );
      return { header: header(res.header), succeeded: res.succeeded, ranges: res.responses.map((r) => r.responseRange?.kvs ?? []) };
    },
    async deleteKey(key: Buffer) {
      const res = decode<{ header: HeaderMessage }>('etcdserverpb.DeleteRangeResponse', await link.call(Op.DELETE_RANGE, encode('etcdserverpb.DeleteRangeRequest', { key })));
      return header(res.header);
    },
    get(req: RangeRequest) {
      db.env.resetReadTxn();
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
      const res = decode<{ ID: unknown }>('etcdserverpb.LeaseGrantResponse', await link.call(Op.LEASE_GRANT, encode('etcdserverpb.LeaseGrantRequest', { TTL: ttl, ID: 0 })));
      return bigint(res.ID as number);
    },
    watch,
  };
}
