// Keeps the fuzzers' valid writes inside the scratch prefix, so that the oracle can demand that
// everything else is unchanged. A body is checked exactly as the server will read it: decoded
// by the same protobufjs types (shared/proto). A body that does not decode is safe (the server
// refuses it too); one that decodes into a write outside the scratch space, a compaction (it
// rewrites history the oracle hashes) or enabling auth (it would lock the oracle out) is not,
// and the generator draws another.
import { decode } from '../../shared/proto/index.js';

/** Every key the fuzzers may change starts with this; auth users and roles they may add, with AUTH_SCRATCH. */
export const SCRATCH = 'fuzz/';
export const AUTH_SCRATCH = 'fuzz';
const SCRATCH_START = Buffer.from(SCRATCH);
/** The first key after the scratch space ('/' + 1 = '0'). */
const SCRATCH_END = Buffer.from('fuzz0');

type Bytes = Uint8Array | number[] | null | undefined;
/** (protobufjs's default for an absent bytes field is an empty array, not a Buffer.) */
const buf = (b: Bytes): Buffer => (Buffer.isBuffer(b) ? b : Buffer.from(b ?? []));

export function inScratch(key: Bytes): boolean {
  const k = buf(key);
  return k.length >= SCRATCH_START.length && k.subarray(0, SCRATCH_START.length).equals(SCRATCH_START);
}

/** [key, rangeEnd) as etcd reads it (empty end: the key alone; "\0": to the end) lies in scratch. */
function rangeInScratch(key: Bytes, rangeEnd: Bytes): boolean {
  const end = buf(rangeEnd);
  if (end.length === 0) return inScratch(key);
  return inScratch(key) && Buffer.compare(end, SCRATCH_END) <= 0 && !(end.length === 1 && end[0] === 0);
}

interface RequestOp {
  requestPut?: { key?: Bytes } | null;
  requestDeleteRange?: { key?: Bytes; rangeEnd?: Bytes } | null;
  requestTxn?: Txn | null;
}
interface Txn {
  success?: RequestOp[];
  failure?: RequestOp[];
}

function txnInScratch(t: Txn): boolean {
  return [...(t.success ?? []), ...(t.failure ?? [])].every(
    (op) =>
      (!op.requestPut || inScratch(op.requestPut.key)) &&
      (!op.requestDeleteRange || rangeInScratch(op.requestDeleteRange.key, op.requestDeleteRange.rangeEnd)) &&
      (!op.requestTxn || txnInScratch(op.requestTxn)),
  );
}

const authName = (field: string) => (r: Record<string, unknown>) => String(r[field] ?? '').startsWith(AUTH_SCRATCH);
const never = () => false;

/** Per method that can change state: its request type and when a decoded request is safe. */
const WRITES: Record<string, [string, (r: any) => boolean]> = {
  '/etcdserverpb.KV/Put': ['etcdserverpb.PutRequest', (r) => inScratch(r.key)],
  '/etcdserverpb.KV/DeleteRange': ['etcdserverpb.DeleteRangeRequest', (r) => rangeInScratch(r.key, r.rangeEnd)],
  '/etcdserverpb.KV/Txn': ['etcdserverpb.TxnRequest', txnInScratch],
  '/etcdserverpb.KV/Compact': ['etcdserverpb.CompactionRequest', never],
  '/etcdserverpb.Auth/AuthEnable': ['etcdserverpb.AuthEnableRequest', never],
  '/etcdserverpb.Auth/UserAdd': ['etcdserverpb.AuthUserAddRequest', authName('name')],
  '/etcdserverpb.Auth/UserDelete': ['etcdserverpb.AuthUserDeleteRequest', authName('name')],
  '/etcdserverpb.Auth/UserChangePassword': ['etcdserverpb.AuthUserChangePasswordRequest', authName('name')],
  '/etcdserverpb.Auth/UserGrantRole': ['etcdserverpb.AuthUserGrantRoleRequest', authName('user')],
  '/etcdserverpb.Auth/UserRevokeRole': ['etcdserverpb.AuthUserRevokeRoleRequest', authName('name')],
  '/etcdserverpb.Auth/RoleAdd': ['etcdserverpb.AuthRoleAddRequest', authName('name')],
  '/etcdserverpb.Auth/RoleDelete': ['etcdserverpb.AuthRoleDeleteRequest', authName('role')],
  '/etcdserverpb.Auth/RoleGrantPermission': ['etcdserverpb.AuthRoleGrantPermissionRequest', authName('name')],
  '/etcdserverpb.Auth/RoleRevokePermission': ['etcdserverpb.AuthRoleRevokePermissionRequest', authName('role')],
  '/v3lockpb.Lock/Lock': ['v3lockpb.LockRequest', (r) => inScratch(r.name)],
  '/v3lockpb.Lock/Unlock': ['v3lockpb.UnlockRequest', (r) => inScratch(r.key)],
  '/v3electionpb.Election/Campaign': ['v3electionpb.CampaignRequest', (r) => inScratch(r.name)],
  '/v3electionpb.Election/Proclaim': ['v3electionpb.ProclaimRequest', (r) => inScratch(r.leader?.key)],
  '/v3electionpb.Election/Resign': ['v3electionpb.ResignRequest', (r) => inScratch(r.leader?.key)],
  '/kvs.peer.Peer/Forward': ['kvs.storage.WriteBatch', (r) => (r.requests ?? []).every(forwardedInScratch)],
  '/kvs.peer.Peer/ForwardLease': ['kvs.storage.WriteBatch', (r) => (r.requests ?? []).every(forwardedInScratch)],
};

/** kvs.storage.Op numbers of a forwarded write and the etcd method whose body it carries. */
const FORWARDED_OPS: Record<number, string | 'never' | undefined> = {
  1: '/etcdserverpb.KV/Put',
  2: '/etcdserverpb.KV/DeleteRange',
  3: '/etcdserverpb.KV/Txn',
  4: 'never', // compact
};

function forwardedInScratch(req: { op?: number; body?: Uint8Array }): boolean {
  const op = req.op ?? 0;
  if (op >= 10 && op <= 22) return false; // auth writes, checked by the gateway, never forwarded raw
  const method = FORWARDED_OPS[op];
  if (method === 'never') return false;
  return method === undefined || staysInScratch(method, buf(req.body));
}

/** True when `body`, sent to `path`, cannot change anything outside the scratch space. */
export function staysInScratch(path: string, body: Buffer): boolean {
  const w = WRITES[path];
  if (!w) return true;
  let req: unknown;
  try {
    req = decode(w[0], body);
  } catch {
    return true;
  }
  return w[1](req);
}
