// What must hold after a fuzz run: the same processes (same pids, no restarts), and the same
// stored data. A known data set is written first (with some history: overwrites and a
// delete); after the run every node must still show, outside the scratch prefix, the same keys
// and values now, the same keys and values at the revision the data set ended at, the same
// HashKV at that revision, and the same users and roles outside the scratch names. Writes the
// fuzzer made inside the scratch prefix come after that revision and are left out.
import * as grpc from '@grpc/grpc-js';
import { decode, encode } from '../../shared/proto/index.js';
import { status, type KvsNode } from '../../testkit/harness.js';
import { AUTH_SCRATCH, inScratch } from './scratch-guard.js';
import { SEED_PREFIX } from './client-cases.js';

/** One unary etcd call with encoded bodies, 10 s deadline. */
function call<T>(endpoint: string, path: string, reqType: string, resType: string, req: object): Promise<T> {
  const ch = new grpc.Client(endpoint, grpc.credentials.createInsecure());
  return new Promise<T>((resolve, reject) => {
    ch.makeUnaryRequest(path, () => encode(reqType, req), (b: Buffer) => decode<T>(resType, b), null, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err, res) => {
      ch.close();
      if (err) reject(new Error(`${path} on ${endpoint}: ${err.message}`));
      else resolve(res!);
    });
  });
}

interface KeyValue {
  key: Uint8Array;
  value: Uint8Array;
  createRevision: unknown;
  modRevision: unknown;
  version: unknown;
  lease: unknown;
}

async function rangeAll(endpoint: string, revision = 0): Promise<string[]> {
  const r = await call<{ kvs: KeyValue[] }>(endpoint, '/etcdserverpb.KV/Range', 'etcdserverpb.RangeRequest', 'etcdserverpb.RangeResponse', {
    key: Buffer.from([0]),
    rangeEnd: Buffer.from([0]),
    revision,
  });
  return r.kvs
    .filter((kv) => !inScratch(kv.key))
    .map((kv) => `${Buffer.from(kv.key).toString('hex')}=${Buffer.from(kv.value).toString('hex')} c${kv.createRevision} m${kv.modRevision} v${kv.version} l${kv.lease}`);
}

/** The data set, written through `endpoint`; resolves with the revision after it. */
export async function writeDataSet(endpoint: string): Promise<number> {
  const put = (k: string, v: string) => call<{ header: { revision: unknown } }>(endpoint, '/etcdserverpb.KV/Put', 'etcdserverpb.PutRequest', 'etcdserverpb.PutResponse', { key: Buffer.from(k), value: Buffer.from(v) });
  for (let i = 0; i < 40; i++) await put(`${SEED_PREFIX}${String(i).padStart(2, '0')}`, `value-${i}-${'x'.repeat(i * 5)}`);
  for (let i = 0; i < 10; i++) await put(`${SEED_PREFIX}${String(i).padStart(2, '0')}`, `overwritten-${i}`);
  await put('other', 'outside the seed prefix');
  await call(endpoint, '/etcdserverpb.KV/DeleteRange', 'etcdserverpb.DeleteRangeRequest', 'etcdserverpb.DeleteRangeResponse', { key: Buffer.from(`${SEED_PREFIX}39`) });
  const last = await put(`${SEED_PREFIX}last`, 'the end of the data set');
  return Number(last.header.revision);
}

/** A node's stored data as the oracle compares it. */
export interface DataView {
  current: string[];
  atDataSet: string[];
  hashKV: string;
  users: string[];
  roles: string[];
}

export async function dataView(endpoint: string, dataSetRevision: number): Promise<DataView> {
  const hash = await call<{ hash: unknown }>(endpoint, '/etcdserverpb.Maintenance/HashKV', 'etcdserverpb.HashKVRequest', 'etcdserverpb.HashKVResponse', { revision: dataSetRevision });
  const users = await call<{ users: string[] }>(endpoint, '/etcdserverpb.Auth/UserList', 'etcdserverpb.AuthUserListRequest', 'etcdserverpb.AuthUserListResponse', {});
  const roles = await call<{ roles: string[] }>(endpoint, '/etcdserverpb.Auth/RoleList', 'etcdserverpb.AuthRoleListRequest', 'etcdserverpb.AuthRoleListResponse', {});
  const outside = (names: string[] = []) => names.filter((n) => !n.startsWith(AUTH_SCRATCH)).sort();
  return {
    current: await rangeAll(endpoint),
    atDataSet: await rangeAll(endpoint, dataSetRevision),
    hashKV: String(hash.hash),
    users: outside(users.users),
    roles: outside(roles.roles),
  };
}

/** What differs between two views (empty: the same). */
export function diffViews(before: DataView, after: DataView): string[] {
  const out: string[] = [];
  for (const k of ['current', 'atDataSet', 'users', 'roles'] as const) {
    const a = new Set(before[k]);
    const b = new Set(after[k]);
    const gone = [...a].filter((x) => !b.has(x));
    const added = [...b].filter((x) => !a.has(x));
    if (gone.length || added.length) out.push(`${k}: ${gone.length} gone (${gone.slice(0, 3).join(', ')}), ${added.length} new (${added.slice(0, 3).join(', ')})`);
  }
  if (before.hashKV !== after.hashKV) out.push(`HashKV at the data set's revision: ${before.hashKV} -> ${after.hashKV}`);
  return out;
}

/** Each component of a node: pid, restarts, state. */
export async function processes(node: KvsNode): Promise<Record<string, string>> {
  const s = await status(node);
  return Object.fromEntries(s.components.map((c) => [c.name, `pid ${c.pid}, ${c.restarts} restarts, ${c.state}`]));
}

/** The components that changed pid or restarted (crashed) between two looks. */
export function crashed(before: Record<string, string>, after: Record<string, string>): string[] {
  return Object.keys({ ...before, ...after })
    .filter((name) => before[name]?.replace(/, \w+$/, '') !== after[name]?.replace(/, \w+$/, ''))
    .map((name) => `${name}: ${before[name]} -> ${after[name]}`);
}
