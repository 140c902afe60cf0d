// Which permissions a KV request needs: etcd's etcdserver/apply_auth.go (checkPutAuth,
// checkTxnAuth, checkTxnReqsPermission), with nested Txns checked as later etcd releases do.
// Pure: the checks themselves (and their errors) are the caller's.
import type protobuf from 'protobufjs';

type Int64 = number | protobuf.Long | bigint;
interface KeyRange { key: Uint8Array; rangeEnd: Uint8Array }
export interface PutLike { key: Uint8Array; lease: Int64; prevKv: boolean }
export interface DeleteLike extends KeyRange { prevKv: boolean }
export interface OpLike { requestRange?: KeyRange | null; requestPut?: PutLike | null; requestDeleteRange?: DeleteLike | null; requestTxn?: TxnLike | null }
export interface TxnLike { compare: KeyRange[]; success: OpLike[]; failure: OpLike[] }

const NONE = new Uint8Array(0);

/** The checks a request needs; each throws its error when the caller lacks the permission. */
export interface Checks {
  read(key: Uint8Array, rangeEnd: Uint8Array): void;
  write(key: Uint8Array, rangeEnd: Uint8Array): void;
  /** Write on every key attached to the lease (a key put with it could be revoked by the caller). */
  leaseKeys(lease: Int64): void;
}

export function checkPut(c: Checks, r: PutLike): void {
  c.write(r.key, NONE);
  c.leaseKeys(r.lease);
  if (r.prevKv) c.read(r.key, NONE);
}

export function checkDeleteRange(c: Checks, r: DeleteLike): void {
  c.write(r.key, r.rangeEnd);
  if (r.prevKv) c.read(r.key, r.rangeEnd);
}

export function checkTxn(c: Checks, t: TxnLike): void {
  for (const cmp of t.compare) c.read(cmp.key, cmp.rangeEnd);
  checkOps(c, t.success);
  checkOps(c, t.failure);
}

function checkOps(c: Checks, ops: OpLike[]): void {
  for (const op of ops) {
    if (op.requestRange) c.read(op.requestRange.key, op.requestRange.rangeEnd);
    else if (op.requestPut) checkPut(c, op.requestPut);
    else if (op.requestDeleteRange) {
      // etcd checks a txn's delete in this order (read first), unlike a plain DeleteRange.
      const d = op.requestDeleteRange;
      if (d.prevKv) c.read(d.key, d.rangeEnd);
      c.write(d.key, d.rangeEnd);
    } else if (op.requestTxn) checkTxn(c, op.requestTxn);
  }
}
