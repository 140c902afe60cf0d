// The Lease API, differentially: the same requests to a real etcd 3.4 and to kvs, answers
// compared field by field (integration/differential.ts). Only what depends on the clock (the
// remaining TTL) or on the server's choice (an id the server picks) is compared loosely.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { startPair, prefixEnd, rev, encodeRequest, LEASE, type Differ, type Outcome, type Plain } from './differential.js';


function ok(o: Outcome, what: string): Plain {
  if ('error' in o) assert.fail(`${what} failed: ${o.error.code} ${o.error.details}`);
  return o.ok;
}

/** TimeToLive on both: equal but for the remaining TTL (within a second), keys in any order. */
async function timeToLive(d: Differ, ID: number | string, keys = true): Promise<Plain> {
  const { etcd, kvs } = await d.both(LEASE, 'LeaseTimeToLive', { ID, keys });
  const want = ok(etcd, 'etcd TimeToLive');
  const got = ok(kvs, 'kvs TimeToLive');
  assert.ok(Math.abs(Number(got.TTL) - Number(want.TTL)) <= 1, `remaining TTL: kvs ${got.TTL}, etcd ${want.TTL}`);
  assert.ok(Number(got.TTL) <= Number(got.grantedTTL), 'remaining TTL within the granted one');
  const norm = (r: Plain) => ({ ...r, TTL: '<remaining>', keys: [...r.keys].sort() });
  assert.deepEqual(norm(got), norm(want));
  return want;
}

test('kvs answers the Lease API as etcd 3.4 does', { timeout: 180_000 }, async (t) => {
  const d: Differ = await startPair(t);
  /** The id each store chose for the same grant. */
  const chosen = { etcd: '', kvs: '' };

  await t.test('grant: explicit id, minimum TTL, too large, duplicate id', async () => {
    const g = await d.ok('LeaseGrant', { ID: 1001, TTL: 60 });
    assert.deepEqual([g.ID, g.TTL], ['1001', '60']);
    // Short leases expire during the test, at slightly different moments on the two servers:
    // later checks leave them out.
    for (const [ID, TTL] of [[1002, 0], [1003, 1], [1004, -5], [1005, 2], [1006, 3]] as const) {
      const r = await d.ok('LeaseGrant', { ID, TTL }, `TTL ${TTL}`);
      assert.equal(r.TTL, String(Math.max(TTL, 2)), 'a TTL below 2 s is raised to 2 s');
    }
    await d.ok('LeaseGrant', { ID: 1009, TTL: 120 });
    await d.ok('LeaseGrant', { ID: -7, TTL: 30 }, 'a negative id');
    await d.ok('LeaseGrant', { ID: '7587869431071446017', TTL: 30 }, 'an id above 2^53');
    await d.ok('LeaseGrant', { ID: 1007, TTL: 9_000_000_000 }, 'the largest TTL');
    await d.fails('LeaseGrant', { ID: 1008, TTL: 9_000_000_001 }, status.OUT_OF_RANGE, 'too large');
    await d.fails('LeaseGrant', { ID: 1001, TTL: 9_000_000_001 }, status.OUT_OF_RANGE, 'too large is checked before the id');
    await d.fails('LeaseGrant', { ID: 1001, TTL: 60 }, status.FAILED_PRECONDITION, 'duplicate id');
    await d.fails('LeaseGrant', { ID: 1001, TTL: 5 }, status.FAILED_PRECONDITION, 'duplicate id, another TTL');
    assert.equal((await timeToLive(d, 1009)).grantedTTL, '120');
  });

  await t.test('grant: a server-chosen id', async () => {
    const first = await d.both(LEASE, 'LeaseGrant', { TTL: 30 });
    const want = ok(first.etcd, 'etcd grant');
    const got = ok(first.kvs, 'kvs grant');
    assert.ok(BigInt(got.ID) > 0n, `a positive id, got ${got.ID}`);
    assert.deepEqual({ ...got, ID: '<id>' }, { ...want, ID: '<id>' });
    const second = await d.both(LEASE, 'LeaseGrant', { TTL: 30 });
    assert.notEqual(ok(second.kvs, 'kvs grant').ID, got.ID, 'chosen ids are unique');
    // Each store revokes its own second lease; the first stays, for the lease list below.
    for (const e of [d.etcd, d.kvs]) {
      const r = await e.call('LeaseRevoke', encodeRequest('LeaseRevoke', { ID: ok(second[e.name as 'etcd' | 'kvs'], 'grant').ID }, LEASE), LEASE);
      ok(r, `${e.name} revoke`);
    }
    chosen.etcd = want.ID;
    chosen.kvs = got.ID;
  });

  await t.test('put and txn put attach keys; overwrite and delete detach them', async () => {
    await d.ok('LeaseGrant', { ID: 2001, TTL: 100 });
    await d.ok('LeaseGrant', { ID: 2002, TTL: 100 });
    const p = 'attach/';
    for (const k of ['a', 'b', 'c', 'd', 'e']) await d.put({ key: p + k, value: 'v', lease: 2001 });
    await d.txn({ success: [{ requestPut: { key: `${p}t`, value: 'x', lease: 2001 } }] }, 'txn put with a lease');
    await d.range({ key: p, rangeEnd: prefixEnd(p) }, 'the lease field of each key');
    await d.put({ key: `${p}b`, value: 'no lease' }, 'overwritten without a lease');
    await d.put({ key: `${p}c`, value: 'moved', lease: 2002, prevKv: true }, 'overwritten with another lease');
    await d.put({ key: `${p}d`, ignoreValue: true, ignoreLease: true }, 'ignore_lease keeps the lease');
    await d.del({ key: `${p}e` });
    await d.txn({
      compare: [{ key: `${p}a`, target: 'LEASE', result: 'EQUAL', lease: 2001 }],
      success: [{ requestRange: { key: `${p}a` } }],
    }, 'compare on the lease');
    const ttl = await timeToLive(d, 2001);
    assert.deepEqual([...ttl.keys].sort(), [`${p}a`, `${p}d`, `${p}t`]);
    assert.deepEqual((await timeToLive(d, 2002)).keys, [`${p}c`]);
    await timeToLive(d, 2001, false);

    const before = d.revision;
    await d.fails('Put', { key: `${p}x`, value: 'v', lease: 999 }, status.NOT_FOUND, 'unknown lease');
    await d.fails('Txn', { success: [{ requestPut: { key: `${p}x`, value: 'v', lease: 999 } }] }, status.NOT_FOUND, 'txn put with an unknown lease');
    await d.range({ key: p, rangeEnd: prefixEnd(p) });
    assert.equal(d.revision, before);
  });

  await t.test('keep-alive answers the TTL and writes no revision; unknown leases', async () => {
    const before = d.revision;
    const ka = await d.ok('LeaseKeepAlive', { ID: 2001 });
    assert.equal(ka.TTL, '100');
    await d.ok('LeaseKeepAlive', { ID: 1009 }, 'another lease');
    await d.ok('LeaseKeepAlive', { ID: 424242 }, 'an unknown lease answers TTL 0');
    await d.ok('LeaseTimeToLive', { ID: 424242, keys: true }, 'an unknown lease answers TTL -1');
    assert.equal(rev(await d.range({ key: 'attach/a' })), before, 'keep-alives create no revision');
  });

  await t.test('revoke deletes the attached keys in one revision', async () => {
    const p = 'attach/';
    const before = d.revision;
    const r = await d.ok('LeaseRevoke', { ID: 2001 });
    assert.equal(rev(r), before + 1, 'one revision for all the keys');
    const left = await d.range({ key: p, rangeEnd: prefixEnd(p) });
    assert.deepEqual(left.kvs.map((kv: Plain) => kv.key), [`${p}b`, `${p}c`]);
    await d.range({ key: p, rangeEnd: prefixEnd(p), revision: before }, 'the keys are in the history before');
    await d.ok('LeaseTimeToLive', { ID: 2001, keys: true }, 'a revoked lease is unknown');
    await d.fails('LeaseRevoke', { ID: 2001 }, status.NOT_FOUND, 'revoked twice');
    await d.fails('LeaseRevoke', { ID: 31337 }, status.NOT_FOUND, 'unknown lease');
    await d.fails('LeaseRevoke', { ID: 0 }, status.NOT_FOUND, 'lease 0');
    const empty = await d.ok('LeaseRevoke', { ID: 1007 }, 'a lease without keys');
    assert.equal(rev(empty), before + 1, 'revoking a lease without keys creates no revision');
    await d.fails('Put', { key: `${p}z`, value: 'v', lease: 2001 }, status.NOT_FOUND, 'put with a revoked lease');
  });

  await t.test('leases lists every lease, earliest expiry first', async () => {
    const { etcd, kvs } = await d.both(LEASE, 'LeaseLeases', {});
    const short = new Set(['1002', '1003', '1004', '1005', '1006']);
    const ids = (r: Plain, mine: string) => ({
      ...r,
      leases: r.leases.map((l: Plain) => (l.ID === mine ? '<chosen>' : l.ID)).filter((id: string) => !short.has(id)),
    });
    assert.deepEqual(ids(ok(kvs, 'kvs leases'), chosen.kvs), ids(ok(etcd, 'etcd leases'), chosen.etcd));
  });
});
