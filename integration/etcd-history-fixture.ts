// A history written to a real etcd 3.4 for the import tests (etcd-import.test.ts): puts,
// overwrites, deletions (one key, a range), Txns of several operations, a key deleted and
// created again, values larger than a bbolt page, enough keys for branch pages in etcd's
// `key` bucket, a compaction with history above it, leases with keys (one key moved off its
// lease), users and roles with permissions, and auth enabled last.
import assert from 'node:assert/strict';
import { Etcd3 } from 'etcd3';
import { TEST_CALL_OPTIONS, TEST_FAULT_HANDLING, etcdctl, onCleanup, type Ctx } from '../testkit/harness.js';

export const ROOT_PASSWORD = 'rootpw';
export const READER = { name: 'reader', password: 'readpw' };

export interface EtcdHistory {
  /** The revision compacted to. */
  compact: number;
  /** The newest revision. */
  head: number;
  /** The lease ids granted (decimal), and their TTLs. */
  leases: Map<string, number>;
}

function rev(r: { header: { revision: string | number } }): number {
  return Number(r.header.revision);
}

export async function writeEtcdHistory(t: Ctx, endpoint: string): Promise<EtcdHistory> {
  const c = new Etcd3({ hosts: `http://${endpoint}`, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING });
  onCleanup(t, () => c.close());
  // Before the compaction: 300 keys (several leaf pages), some overwritten twice.
  for (let i = 0; i < 300; i++) await c.put(`k/${String(i).padStart(3, '0')}`).value(`first ${i} `.padEnd(80, '.'));
  for (let i = 0; i < 300; i += 7) await c.put(`k/${String(i).padStart(3, '0')}`).value(`second ${i}`);
  for (let i = 0; i < 300; i += 21) await c.put(`k/${String(i).padStart(3, '0')}`).value(`third ${i}`);
  await c.delete().key('k/001');
  await c.kv.deleteRange({ key: Buffer.from('k/010'), range_end: Buffer.from('k/020') });
  await c.put('big/1').value(Buffer.alloc(20_000, 'b'));
  await c.put('gone').value('soon');
  await c.delete().key('gone');
  const txn1 = await c.kv.txn({
    compare: [],
    success: [
      { request_put: { key: Buffer.from('txn/a'), value: Buffer.from('1') } },
      { request_put: { key: Buffer.from('txn/b'), value: Buffer.from('2') } },
      { request_delete_range: { key: Buffer.from('k/002') } },
    ],
  });
  assert.ok(txn1.succeeded);
  // Granted raw: the client's lease objects would keep them alive.
  const grant = async (ttl: number) => (await c.leaseClient.leaseGrant({ TTL: ttl })).ID;
  const putOn = (key: string, value: string, lease: string) => c.kv.put({ key: Buffer.from(key), value: Buffer.from(value), lease });
  const idA = await grant(600);
  const idB = await grant(900);
  await putOn('lease/a1', 'a1', idA);
  await putOn('lease/a2', 'a2', idA);
  await putOn('lease/b1', 'b1', idB);
  const compact = rev(await c.put('k/003').value('at the compaction'));
  await c.kv.compact({ revision: compact, physical: true });

  // Above the compaction.
  for (let i = 100; i < 160; i++) await c.put(`k/${String(i).padStart(3, '0')}`).value(`after ${i}`);
  await c.kv.deleteRange({ key: Buffer.from('k/150'), range_end: Buffer.from('k/155') });
  await c.put('gone').value('back again');
  await c.put('lease/a2').value('off its lease');
  await putOn('lease/a3', 'a3', idA);
  const idC = await grant(300);
  await c.kv.txn({
    compare: [{ key: Buffer.from('txn/a'), target: 'Value', result: 'Equal', value: Buffer.from('1') }],
    success: [
      { request_put: { key: Buffer.from('txn/a'), value: Buffer.from('one') } },
      { request_delete_range: { key: Buffer.from('txn/b') } },
      { request_put: { key: Buffer.from('txn/c'), value: Buffer.from('3') } },
    ],
    failure: [],
  });
  await c.put('big/2').value(Buffer.alloc(9_000, 'c'));
  await c.delete().key('k/299');

  // Users and roles, then auth (etcdctl: the etcd3 client has no role-permission helpers for ranges).
  const ctl = async (args: string[]) => {
    const r = await etcdctl(endpoint, args);
    assert.equal(r.exitCode, 0, `etcdctl ${args.join(' ')}: ${r.stderr}`);
  };
  await ctl(['user', 'add', `root:${ROOT_PASSWORD}`]);
  await ctl(['user', 'grant-role', 'root', 'root']);
  await ctl(['role', 'add', 'readers']);
  await ctl(['role', 'grant-permission', 'readers', 'read', 'k/', '--prefix']);
  await ctl(['role', 'grant-permission', 'readers', 'readwrite', 'txn/a']);
  await ctl(['role', 'add', 'empty']);
  await ctl(['user', 'add', `${READER.name}:${READER.password}`]);
  await ctl(['user', 'grant-role', READER.name, 'readers']);
  await ctl(['user', 'grant-role', READER.name, 'empty']);
  await ctl(['auth', 'enable']);
  const head = rev(await c.get('k/003').exec().catch(async () => {
    // With auth on, an unauthenticated read fails: ask as root.
    const r = await etcdctl(endpoint, ['--user', `root:${ROOT_PASSWORD}`, 'get', 'k/003', '-w', 'json']);
    return JSON.parse(r.stdout) as { header: { revision: number } };
  }));
  return { compact, head, leases: new Map([[String(idA), 600], [String(idB), 900], [String(idC), 300]]) };
}
