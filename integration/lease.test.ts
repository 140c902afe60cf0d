// Leases on a running node: expiry deletes the keys in one revision, keep-alives hold a lease
// past its TTL without writing, and leases survive a storage restart and a kill -9 of the node.
// Then the etcd3 npm client's leases, against kvs and etcd alike, and across a gateway restart.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { Etcd3, Lease } from 'etcd3';
import { encode } from '../shared/proto/index.js';
import { client, pollUntil, startEtcd, startKvs } from '../testkit/harness.js';

async function revision(c: Etcd3): Promise<number> {
  return Number((await c.get('\0no-such-key').exec()).header.revision);
}

/** Waits until the lease's keys are gone, and checks they went in one revision. */
async function awaitExpiry(c: Etcd3, prefix: string, keys: number): Promise<void> {
  const before = await revision(c);
  assert.equal(await c.getAll().prefix(prefix).count(), keys);
  await pollUntil(`the keys under ${prefix} to expire`, async () => ((await c.getAll().prefix(prefix).count()) === 0 ? true : undefined));
  const gone = await revision(c);
  assert.equal(gone, before + 1, 'all the keys of the lease are deleted in one revision');
  assert.equal(await c.getAll().prefix(prefix).revision(gone - 1).count(), keys);
}

/** Resolves after `n` successful keep-alives of `lease`. */
function keepAlives(lease: Lease, n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let seen = 0;
    const ok = () => {
      if (++seen < n) return;
      lease.off('keepaliveSucceeded', ok);
      resolve();
    };
    lease.on('keepaliveSucceeded', ok);
    lease.once('lost', reject);
  });
}

test('a lease expires: its keys disappear in one revision, and expiry is written like a revoke', { timeout: 120_000 }, async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  const lease = c.lease(2, { autoKeepAlive: false });
  const id = await lease.grant();
  await lease.put('exp/leased/a').value('1');
  await lease.put('exp/leased/b').value('2');
  await c.put('exp/keep').value('no lease');
  await awaitExpiry(c, 'exp/leased/', 2);
  assert.equal(await c.get('exp/keep').string(), 'no lease');
  // The expired lease is gone from the list and unknown to TimeToLive.
  const listed = (await c.leaseClient.leaseLeases({})).leases.map((l) => l.ID);
  assert.ok(!listed.includes(id), `${id} still listed`);
  const gone = await c.leaseClient.leaseTimeToLive({ ID: id });
  assert.equal(gone.TTL, '-1');
});

test('keep-alives hold a lease past its TTL and write no revision', { timeout: 120_000 }, async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  const lease = c.lease(2); // keep-alive every 2/3 s
  await lease.put('held').value('v');
  const before = await revision(c);
  await keepAlives(lease, 6); // about 4 s: twice the TTL
  assert.equal(await c.get('held').string(), 'v');
  assert.equal(await revision(c), before, 'keep-alives create no revision');
  await lease.revoke();
  assert.equal(await c.get('held').string(), null);
  assert.equal(await revision(c), before + 1);
});

test('leases survive kvs ctl restart storage and kill -9 of the node; expiry works afterwards', { timeout: 180_000 }, async (t) => {
  const node = await startKvs(t);
  let c = client(t, node.endpoint);
  const long = c.lease(600, { autoKeepAlive: false });
  const longId = await long.grant();
  await long.put('long/a').value('1');
  const short = c.lease(3, { autoKeepAlive: false });
  await short.grant();
  await short.put('short/a').value('1');
  await short.put('short/b').value('1');

  const r = await node.ctl(['restart', 'storage']);
  assert.equal(r.exitCode, 0, r.stderr);
  await awaitExpiry(c, 'short/', 2);
  const ttl = await c.leaseClient.leaseTimeToLive({ ID: longId, keys: true });
  assert.equal(ttl.grantedTTL, '600');
  assert.ok(Number(ttl.TTL) > 500 && Number(ttl.TTL) <= 600, `remaining ${ttl.TTL}`);
  assert.deepEqual(ttl.keys.map(String), ['long/a']);

  // kill -9: the node restarts from its WAL; the lease is there, with at most its full TTL.
  const short2 = c.lease(3, { autoKeepAlive: false });
  await short2.grant();
  await short2.put('short2/a').value('1');
  c.close();
  await node.kill9();
  await node.restart();
  c = client(t, node.endpoint);
  const after = await c.leaseClient.leaseTimeToLive({ ID: longId, keys: true });
  assert.ok(Number(after.TTL) > 500 && Number(after.TTL) <= 600, `remaining ${after.TTL}`);
  assert.deepEqual(after.keys.map(String), ['long/a']);
  assert.equal((await c.leaseClient.leaseKeepAlive().then(async (s) => {
    const res = new Promise<{ TTL: string }>((resolve) => s.on('data', resolve));
    s.write({ ID: longId });
    const out = await res;
    s.end();
    return out;
  })).TTL, '600');
  await awaitExpiry(c, 'short2/', 1);
  await c.leaseClient.leaseRevoke({ ID: longId });
  assert.equal(await c.get('long/a').string(), null);
});

test('the etcd3 client keeps a lease across kvs ctl restart gateway', { timeout: 120_000 }, async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  const lease = c.lease(3);
  await lease.put('gw/a').value('1');
  await keepAlives(lease, 1);
  const lost = new Promise((_, reject) => lease.once('lost', reject));
  // A keep-alive stream open when the gateway stops is ended at once with UNAVAILABLE (and the
  // client reconnects), not held until the stop's grace period cuts it.
  const raw = new grpc.Client(node.endpoint, grpc.credentials.createInsecure());
  t.after(() => raw.close());
  const stream = raw.makeBidiStreamRequest('/etcdserverpb.Lease/LeaseKeepAlive', (b: Buffer) => b, (b: Buffer) => b);
  const ended = new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
  stream.on('data', () => {});
  const answered = new Promise((resolve) => stream.once('data', resolve));
  stream.write(encode('etcdserverpb.LeaseKeepAliveRequest', { ID: await lease.grant() }));
  await answered;
  const r = await node.ctl(['restart', 'gateway']);
  const err = await ended;
  assert.deepEqual([err.code, err.details], [grpc.status.UNAVAILABLE, 'kvs: gateway is shutting down']);
  assert.equal(r.exitCode, 0, r.stderr);
  // The client opens a new keep-alive stream to the new gateway and goes on renewing.
  await Promise.race([keepAlives(lease, 6), lost]);
  assert.equal(await c.get('gw/a').string(), '1');
  await lease.revoke();
  assert.equal(await c.get('gw/a').string(), null);
});

for (const backend of ['kvs', 'etcd'] as const) {
  test(`etcd3 client leases against ${backend}: grant, keep-alive, put through the lease, revoke`, { timeout: 60_000 }, async (t: TestContext) => {
    const node = backend === 'kvs' ? await startKvs(t) : await startEtcd(t);
    const c = client(t, node.endpoint);
    const lease = c.lease(10);
    const id = await lease.grant();
    await lease.put('app/one').value('1');
    await lease.put('app/two').value('2');
    const kv = (await c.get('app/one').exec()).kvs[0]!;
    assert.equal(kv.lease, id, 'the key carries the lease id');
    await keepAlives(lease, 1);
    const ttl = await c.leaseClient.leaseTimeToLive({ ID: id, keys: true });
    assert.equal(ttl.grantedTTL, '10');
    assert.deepEqual(ttl.keys.map(String).sort(), ['app/one', 'app/two']);
    const before = await revision(c);
    await lease.revoke();
    assert.equal(lease.revoked(), true);
    assert.equal(await c.getAll().prefix('app/').count(), 0);
    assert.equal(await revision(c), before + 1);
    // A put through a lease that is gone fails with the lease error.
    const dead = c.lease(10, { autoKeepAlive: false });
    const deadId = await dead.grant();
    await c.leaseClient.leaseRevoke({ ID: deadId });
    await assert.rejects(c.put('app/three').value('3').lease(deadId).exec(), /requested lease not found/);
  });
}
