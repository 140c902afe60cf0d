// The v3lockpb.Lock and v3electionpb.Election services against a real etcd 3.4, over raw gRPC
// (integration/differential.ts): the same requests, with leases of the same (client-chosen)
// ids, must write the same keys at the same revisions and answer the same, errors included.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { root, service } from '../shared/proto/index.js';
import { onCleanup, pollUntil } from '../testkit/harness.js';
import { startPair, encodeRequest, plain, prefixEnd, LEASE, type Differ, type Endpoint, type Outcome, type Plain } from './differential.js';

const LOCK = 'v3lockpb.Lock';
const ELECTION = 'v3electionpb.Election';

async function same(d: Differ, serviceName: string, method: string, req: object): Promise<Outcome> {
  const { etcd, kvs } = await d.both(serviceName, method, req);
  assert.deepStrictEqual(kvs, etcd, `${method} ${JSON.stringify(req)}: kvs and etcd differ`);
  return etcd;
}

function ok(o: Outcome): Plain {
  if ('error' in o) assert.fail(`failed: ${o.error.code} ${o.error.details}`);
  return o.ok;
}

/** Waits until `prefix` holds `n` keys on both servers (a blocked contender has queued). */
async function queued(d: Differ, prefix: string, n: number): Promise<void> {
  for (const e of [d.etcd, d.kvs]) {
    await pollUntil(`${n} keys under ${prefix} on ${e.name}`, async () => {
      const r = await e.call('Range', encodeRequest('Range', { key: prefix, rangeEnd: prefixEnd(prefix), countOnly: true }));
      return 'ok' in r && Number(r.ok.count) === n ? true : undefined;
    });
  }
}

/** Election.Observe on one server: every message, decoded as the differential tests compare them. */
function observe(t: Parameters<typeof onCleanup>[0], e: Endpoint, name: string) {
  const Ctor = grpc.makeGenericClientConstructor(service(ELECTION), ELECTION);
  const c = new Ctor(e.address, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
  const seen: Plain[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  const stream = c.Observe(encodeRequest('Observe', { name }, ELECTION)) as grpc.ClientReadableStream<Record<string, unknown>>;
  const type = root.lookupType('v3electionpb.LeaderResponse');
  stream.on('data', (m) => {
    seen.push(plain(type, m));
    for (const w of waiters.filter((w) => seen.length >= w.n)) w.resolve();
  });
  stream.on('error', () => {});
  onCleanup(t, () => {
    stream.cancel();
    c.close();
  });
  return {
    seen,
    /** Resolves once `n` messages arrived. */
    count: (n: number) => new Promise<void>((resolve) => (seen.length >= n ? resolve() : waiters.push({ n, resolve }))),
  };
}

test('Lock and Election answer as etcd 3.4 does', { timeout: 180_000 }, async (t) => {
  const d = await startPair(t);
  // Leases with chosen ids: the contender keys (name/<lease in hex>) are the same on both.
  for (const ID of [0x1a, 0x2b, 0x3c]) ok(await same(d, LEASE, 'LeaseGrant', { ID, TTL: 120 }));

  await t.test('Lock: the holder, a waiter queued behind it, Unlock', async () => {
    const first = ok(await same(d, LOCK, 'Lock', { name: 'job', lease: 0x1a }));
    assert.equal(Buffer.from(first.key, 'latin1').toString(), 'job/1a');
    // The same lease locks again: the key it already has.
    assert.deepStrictEqual(ok(await same(d, LOCK, 'Lock', { name: 'job', lease: 0x1a })), first);
    const waiting = same(d, LOCK, 'Lock', { name: 'job', lease: 0x2b });
    await queued(d, 'job/', 2);
    ok(await same(d, LOCK, 'Unlock', { key: 'job/1a' }));
    const second = ok(await waiting);
    assert.equal(Buffer.from(second.key, 'latin1').toString(), 'job/2b');
    ok(await same(d, LOCK, 'Unlock', { key: 'job/2b' }));
  });

  await t.test('Lock: errors and edge cases', async () => {
    const unknown = await same(d, LOCK, 'Lock', { name: 'job', lease: 999 });
    assert.deepStrictEqual(unknown, { error: { code: grpc.status.UNKNOWN, details: 'etcdserver: requested lease not found' } });
    ok(await same(d, LOCK, 'Unlock', { key: 'never/locked' }));
    assert.deepStrictEqual(await same(d, LOCK, 'Unlock', { key: '' }), { error: { code: grpc.status.UNKNOWN, details: 'etcdserver: key is not provided' } });
    const empty = ok(await same(d, LOCK, 'Lock', { name: '', lease: 0x3c }));
    assert.equal(Buffer.from(empty.key, 'latin1').toString(), '/3c');
    ok(await same(d, LOCK, 'Unlock', { key: '/3c' }));
  });

  await t.test('Lock without a lease: a 60 s lease is granted for it', async () => {
    const { etcd, kvs } = await d.both(LOCK, 'Lock', { name: 'nolease', lease: 0 });
    for (const o of [etcd, kvs]) {
      const key = Buffer.from(ok(o).key, 'latin1').toString();
      assert.match(key, /^nolease\/[0-9a-f]+$/);
    }
    assert.equal(ok(kvs).header.revision, ok(etcd).header.revision);
    // The lease exists, with the session's TTL.
    for (const [e, o] of [[d.etcd, etcd], [d.kvs, kvs]] as const) {
      const id = BigInt('0x' + Buffer.from(ok(o).key, 'latin1').toString().split('/')[1]);
      const ttl = ok(await e.call('LeaseTimeToLive', encodeRequest('LeaseTimeToLive', { ID: id.toString() }, LEASE), LEASE));
      assert.equal(ttl.grantedTTL, '60', e.name);
      ok(await e.call('LeaseRevoke', encodeRequest('LeaseRevoke', { ID: id.toString() }, LEASE), LEASE));
    }
  });

  await t.test('Lock: a waiter that gives up leaves the queue', async () => {
    ok(await same(d, LOCK, 'Lock', { name: 'q', lease: 0x1a }));
    const msg = encodeRequest('Lock', { name: 'q', lease: 0x2b }, LOCK);
    const Ctor = grpc.makeGenericClientConstructor(service(LOCK), LOCK);
    const give = (e: Endpoint) =>
      new Promise<number>((resolve) => {
        const c = new Ctor(e.address, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
        const call = c.Lock(msg, (err: grpc.ServiceError | null) => {
          c.close();
          resolve(err?.code ?? 0);
        });
        // Cancel once the waiter is queued.
        void queued(d, 'q/', 2).catch(() => {}).then(() => call.cancel());
      });
    assert.deepEqual(await Promise.all([give(d.etcd), give(d.kvs)]), [grpc.status.CANCELLED, grpc.status.CANCELLED]);
    await queued(d, 'q/', 1);
    // Both wrote the waiter's key and deleted it: the same revisions and the same data.
    const all = await same(d, 'etcdserverpb.KV', 'Range', { key: 'q/', rangeEnd: 'q0' });
    assert.equal(ok(all).kvs.length, 1);
    ok(await same(d, LOCK, 'Unlock', { key: 'q/1a' }));
  });

  await t.test('Election: campaign, leader, proclaim, resign, and a queued candidate', async () => {
    assert.deepStrictEqual(await same(d, ELECTION, 'Leader', { name: 'el' }), { error: { code: grpc.status.UNKNOWN, details: 'election: no leader' } });
    const c1 = ok(await same(d, ELECTION, 'Campaign', { name: 'el', lease: 0x1a, value: 'v1' }));
    assert.equal(Buffer.from(c1.leader.key, 'latin1').toString(), 'el/1a');
    // Campaigning again with another value: the same leadership, value proclaimed.
    const again = ok(await same(d, ELECTION, 'Campaign', { name: 'el', lease: 0x1a, value: 'v2' }));
    assert.deepStrictEqual(again.leader, c1.leader);
    assert.equal(ok(await same(d, ELECTION, 'Leader', { name: 'el' })).kv.value, 'v2');

    const queuedCampaign = same(d, ELECTION, 'Campaign', { name: 'el', lease: 0x2b, value: 'other' });
    await queued(d, 'el/', 2);
    ok(await same(d, ELECTION, 'Proclaim', { leader: c1.leader, value: 'v3' }));
    assert.equal(ok(await same(d, ELECTION, 'Leader', { name: 'el' })).kv.value, 'v3');
    const missing = { error: { code: grpc.status.UNKNOWN, details: '"leader" field must be provided' } };
    assert.deepStrictEqual(await same(d, ELECTION, 'Proclaim', { value: 'x' }), missing);
    assert.deepStrictEqual(await same(d, ELECTION, 'Resign', {}), missing);
    const stale = { ...c1.leader, rev: 1 };
    assert.deepStrictEqual(await same(d, ELECTION, 'Proclaim', { leader: stale, value: 'x' }), { error: { code: grpc.status.UNKNOWN, details: 'election: not leader' } });
    ok(await same(d, ELECTION, 'Resign', { leader: stale })); // not the leader's key: nothing happens
    ok(await same(d, ELECTION, 'Resign', { leader: c1.leader }));
    const c2 = ok(await queuedCampaign);
    assert.equal(Buffer.from(c2.leader.key, 'latin1').toString(), 'el/2b');
    assert.equal(ok(await same(d, ELECTION, 'Leader', { name: 'el' })).kv.value, 'other');
    ok(await same(d, ELECTION, 'Resign', { leader: c1.leader })); // again: nothing happens
    ok(await same(d, ELECTION, 'Resign', { leader: c2.leader }));
    assert.deepStrictEqual(await same(d, ELECTION, 'Campaign', { name: 'el', lease: 999, value: 'x' }), { error: { code: grpc.status.UNKNOWN, details: 'etcdserver: requested lease not found' } });
  });

  await t.test('Election.Observe: the leader, its new values, the next leader', async () => {
    const [oe, ok2] = [observe(t, d.etcd, 'ob'), observe(t, d.kvs, 'ob')];
    const l1 = ok(await same(d, ELECTION, 'Campaign', { name: 'ob', lease: 0x1a, value: 'a' }));
    await Promise.all([oe.count(1), ok2.count(1)]);
    ok(await same(d, ELECTION, 'Proclaim', { leader: l1.leader, value: 'b' }));
    await Promise.all([oe.count(2), ok2.count(2)]);
    const next = same(d, ELECTION, 'Campaign', { name: 'ob', lease: 0x2b, value: 'c' });
    await queued(d, 'ob/', 2);
    ok(await same(d, ELECTION, 'Resign', { leader: l1.leader }));
    const l2 = ok(await next);
    await Promise.all([oe.count(3), ok2.count(3)]);
    ok(await same(d, ELECTION, 'Resign', { leader: l2.leader }));
    assert.deepStrictEqual(ok2.seen, oe.seen);
    assert.deepStrictEqual(ok2.seen.map((m) => m.kv.value), ['a', 'b', 'c']);
  });
});
