// Locks and elections as users run them against kvs: the etcd3 npm client's lock() and
// election() (client-side recipes on leases, transactions and watches), kvs's Lock service
// under contention, a lock whose lease expires, and etcdctl 3.4's `lock` and `elect` side by
// side with a real etcd.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { service } from '../shared/proto/index.js';
import { ETCDCTL_BIN, client, etcdctl, onCleanup, startEtcd, startKvs, type Ctx } from '../testkit/harness.js';

/**
 * A critical section run by many workers at once: each reads the counter, writes it plus one,
 * and records that it was inside. Mutual exclusion holds if no two were ever inside together
 * and no increment was lost.
 */
class Section {
  inside = 0;
  overlaps = 0;
  entered = 0;

  async run(kv: Etcd3, key: string): Promise<void> {
    this.inside++;
    this.entered++;
    if (this.inside > 1) this.overlaps++;
    try {
      const n = Number((await kv.get(key).string()) ?? '0');
      // Yield between the read and the write, so an overlap would lose an increment.
      await new Promise((resolve) => setImmediate(resolve));
      await kv.put(key).value(String(n + 1));
    } finally {
      this.inside--;
    }
  }
}

function clients(t: Ctx, endpoint: string, n: number): Etcd3[] {
  return Array.from({ length: n }, () => client(t, endpoint));
}

test('etcd3 lock(): mutual exclusion between several clients', { timeout: 180_000 }, async (t) => {
  const kvs = await startKvs(t);
  const workers = clients(t, kvs.endpoint, 5);
  const section = new Section();
  const rounds = 6;
  await Promise.all(
    workers.map(async (c) => {
      for (let i = 0; i < rounds; i++) {
        // etcd3's lock() does not wait: it fails while another holds the lock, so retry.
        for (;;) {
          try {
            await c.lock('counter-lock').do(() => section.run(c, 'counter'));
            break;
          } catch (err) {
            if (!(err instanceof EtcdLockFailedError)) throw err;
          }
        }
      }
    }),
  );
  assert.equal(section.overlaps, 0);
  assert.equal(await workers[0]!.get('counter').string(), String(workers.length * rounds));
  // Every lock's lease was revoked on release: no key is left under the lock.
  assert.equal(await workers[0]!.get('counter-lock').string(), null);
});

type LockClient = grpc.Client & Record<string, any>;
const LockCtor = grpc.makeGenericClientConstructor(service('v3lockpb.Lock'), 'Lock');
const LeaseCtor = grpc.makeGenericClientConstructor(service('etcdserverpb.Lease'), 'Lease');

function unary<T = any>(c: LockClient, method: string, req: object): Promise<T> {
  return new Promise((resolve, reject) => c[method](req, { deadline: Date.now() + 60_000 }, (err: Error | null, res: T) => (err ? reject(err) : resolve(res))));
}

function grpcClient(t: Ctx, Ctor: typeof LockCtor, endpoint: string): LockClient {
  const c = new Ctor(endpoint, grpc.credentials.createInsecure()) as LockClient;
  onCleanup(t, () => c.close());
  return c;
}

async function grant(lease: LockClient, ttl: number): Promise<string> {
  const r = await unary(lease, 'LeaseGrant', { TTL: ttl });
  return r.ID.toString();
}

test('Lock service: blocking locks under contention are mutually exclusive', { timeout: 180_000 }, async (t) => {
  const kvs = await startKvs(t);
  const section = new Section();
  const kv = client(t, kvs.endpoint);
  const order: string[] = [];
  await Promise.all(
    Array.from({ length: 6 }, async () => {
      const locks = grpcClient(t, LockCtor, kvs.endpoint);
      const leases = grpcClient(t, LeaseCtor, kvs.endpoint);
      for (let i = 0; i < 4; i++) {
        const lease = await grant(leases, 60);
        const held = await unary(locks, 'Lock', { name: Buffer.from('grpc-lock'), lease });
        order.push(Buffer.from(held.key).toString());
        await section.run(kv, 'grpc-counter');
        await unary(locks, 'Unlock', { key: held.key });
        await unary(leases, 'LeaseRevoke', { ID: lease });
      }
    }),
  );
  assert.equal(section.overlaps, 0);
  assert.equal(section.entered, 24);
  assert.equal(await kv.get('grpc-counter').string(), '24');
  assert.ok(order.every((k) => /^grpc-lock\/[0-9a-f]+$/.test(k)));
});

test('a lock whose lease expires is released to the next waiter', { timeout: 180_000 }, async (t) => {
  const kvs = await startKvs(t);
  const locks = grpcClient(t, LockCtor, kvs.endpoint);
  const leases = grpcClient(t, LeaseCtor, kvs.endpoint);
  const kv = client(t, kvs.endpoint);
  // The holder's lease is never kept alive; the minimum TTL (2 s) applies.
  const short = await grant(leases, 2);
  const holder = await unary(locks, 'Lock', { name: Buffer.from('expiring'), lease: short });
  const waiterLease = await grant(leases, 60);
  const waiter = await unary(locks, 'Lock', { name: Buffer.from('expiring'), lease: waiterLease });
  assert.equal(Buffer.from(waiter.key).toString(), `expiring/${BigInt(waiterLease).toString(16)}`);
  assert.equal(await kv.get(Buffer.from(holder.key).toString()).string(), null, "the holder's key went with its lease");
  const ttl = await unary(leases, 'LeaseTimeToLive', { ID: short });
  assert.equal(ttl.TTL.toString(), '-1', 'the holder lease expired');
});

test('etcd3 election(): campaign, observe, leader, resign', { timeout: 180_000 }, async (t) => {
  const kvs = await startKvs(t);
  const [a, b, watcher] = clients(t, kvs.endpoint, 3);
  const first = a!.election('leader-election').campaign('alpha');
  await first.wait();
  assert.equal(await watcher!.election('leader-election').leader(), 'alpha');

  const observer = await watcher!.election('leader-election').observe();
  onCleanup(t, () => observer.cancel());
  assert.equal(observer.leader(), 'alpha');
  // Every change the observer reports, and a way to await one.
  const changes: (string | undefined)[] = [];
  const waiting: { want: string; resolve: () => void }[] = [];
  observer.on('change', (v) => {
    changes.push(v);
    for (const w of waiting.filter((w) => w.want === v)) w.resolve();
  });
  const changedTo = (want: string) => new Promise<void>((resolve) => (changes.at(-1) === want ? resolve() : waiting.push({ want, resolve })));

  const second = b!.election('leader-election').campaign('beta');
  let secondElected = false;
  second.on('elected', () => (secondElected = true));
  const proclaimed = changedTo('alpha-2');
  await first.proclaim('alpha-2');
  await proclaimed;
  assert.equal(secondElected, false, 'beta waits while alpha leads');

  const handedOver = changedTo('beta');
  await first.resign();
  await second.wait();
  assert.equal(secondElected, true);
  await handedOver;
  assert.deepEqual(changes.filter((v) => v !== undefined), ['alpha-2', 'beta']);
  assert.equal(await a!.election('leader-election').leader(), 'beta');
  await second.resign();
  assert.equal(await a!.election('leader-election').leader(), undefined);
});

/** Spawns etcdctl (long-running), collecting its stdout; lines resolve as they arrive. */
function spawnEtcdctl(t: Ctx, endpoint: string, args: string[]) {
  const child = spawn(ETCDCTL_BIN, [`--endpoints=${endpoint}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const waiters: { n: number; resolve: (lines: string[]) => void }[] = [];
  const lines = () => out.split('\n').filter((l) => l.length);
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
    for (const w of waiters.filter((w) => lines().length >= w.n)) w.resolve(lines());
  });
  child.stderr.on('data', () => {});
  const exited = once(child, 'exit');
  onCleanup(t, async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  return {
    child,
    exited,
    lines: (n: number) => new Promise<string[]>((resolve) => (lines().length >= n ? resolve(lines()) : waiters.push({ n, resolve }))),
  };
}

test('etcdctl lock and elect behave as against etcd', { timeout: 180_000 }, async (t) => {
  const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
  const transcript = async (endpoint: string): Promise<string[]> => {
    const log: string[] = [];
    // lock with a command: it runs while the lock is held, and the lock goes away after.
    const locked = await etcdctl(endpoint, ['lock', 'tool-lock', 'echo', 'inside the lock']);
    log.push(`lock exit ${locked.exitCode}: ${locked.stdout.trim()}`);
    log.push(`keys left: ${(await etcdctl(endpoint, ['get', 'tool-lock/', '--prefix', '--keys-only'])).stdout.trim()}`);

    // A lock holder (no command: it prints the key and holds until interrupted) and a waiter.
    const holder = spawnEtcdctl(t, endpoint, ['lock', 'held']);
    const [heldKey] = await holder.lines(1);
    log.push(`holder key ${heldKey!.replace(/[0-9a-f]+$/, '<lease>')}`);
    const waiter = spawnEtcdctl(t, endpoint, ['lock', 'held', 'echo', 'waiter got it']);
    holder.child.kill('SIGINT');
    await holder.exited;
    const [waited] = await waiter.lines(1);
    await waiter.exited;
    log.push(`waiter: ${waited}`);

    // elect: a leader proposes a value, a listener sees it, a second candidate takes over.
    const listener = spawnEtcdctl(t, endpoint, ['elect', '--listen', 'tool-election']);
    const leader = spawnEtcdctl(t, endpoint, ['elect', 'tool-election', 'first']);
    const led = await leader.lines(2);
    log.push(`leader: ${led[0]!.replace(/[0-9a-f]+$/, '<lease>')} ${led[1]}`);
    const heard = await listener.lines(2);
    log.push(`listener: ${heard[0]!.replace(/[0-9a-f]+$/, '<lease>')} ${heard[1]}`);
    const next = spawnEtcdctl(t, endpoint, ['elect', 'tool-election', 'second']);
    leader.child.kill('SIGINT');
    await leader.exited;
    const nextLed = await next.lines(2);
    log.push(`next leader: ${nextLed[1]}`);
    const heardNext = await listener.lines(4);
    log.push(`listener: ${heardNext[3]}`);
    next.child.kill('SIGINT');
    listener.child.kill('SIGINT');
    await Promise.all([next.exited, listener.exited]);
    log.push(`election keys left: ${(await etcdctl(endpoint, ['get', 'tool-election/', '--prefix', '--keys-only'])).stdout.trim()}`);
    return log;
  };
  const [onKvs, onEtcd] = await Promise.all([transcript(kvs.endpoint), transcript(etcd.endpoint)]);
  assert.deepEqual(onKvs, onEtcd);
  assert.equal(onKvs[0], 'lock exit 0: inside the lock');
  assert.deepEqual(onKvs.slice(1), [
    'keys left: ',
    'holder key held/<lease>',
    'waiter: waiter got it',
    'leader: tool-election/<lease> first',
    'listener: tool-election/<lease> first',
    'next leader: second',
    'listener: second',
    'election keys left: ',
  ]);
});

test('a gateway restart ends a blocked Lock and an Observe stream at once with UNAVAILABLE', { timeout: 180_000 }, async (t) => {
  const kvs = await startKvs(t);
  const locks = grpcClient(t, LockCtor, kvs.endpoint);
  const leases = grpcClient(t, LeaseCtor, kvs.endpoint);
  const elections = grpcClient(t, ElectionCtor, kvs.endpoint);
  await unary(locks, 'Lock', { name: Buffer.from('held'), lease: await grant(leases, 60) });
  const blocked = unary(locks, 'Lock', { name: Buffer.from('held'), lease: await grant(leases, 60) }).then(
    () => assert.fail('the second Lock must not succeed while the first holds the lock'),
    (err: grpc.ServiceError) => err,
  );
  await unary(elections, 'Campaign', { name: Buffer.from('office'), lease: await grant(leases, 60), value: Buffer.from('me') });
  const observe = elections.Observe({ name: Buffer.from('office') });
  const observed = once(observe, 'data');
  const ended = new Promise<grpc.ServiceError>((resolve) => observe.on('error', resolve));
  await observed;
  // The blocked Lock has reached the gateway once it has created its waiter key.
  await waitForKeys(client(t, kvs.endpoint), 'held/', 2);
  const r = await kvs.ctl(['restart', 'gateway']);
  assert.equal(r.exitCode, 0, r.stderr);
  for (const err of [await blocked, await ended]) {
    assert.deepEqual([err.code, err.details], [grpc.status.UNAVAILABLE, 'kvs: gateway is shutting down']);
  }
});

const ElectionCtor = grpc.makeGenericClientConstructor(service('v3electionpb.Election'), 'Election');

async function waitForKeys(kv: Etcd3, prefix: string, n: number): Promise<void> {
  const watcher = await kv.watch().prefix(prefix).create();
  try {
    const count = () => kv.getAll().prefix(prefix).count();
    if ((await count()) >= n) return;
    await new Promise<void>((resolve) => watcher.on('put', async () => ((await count()) >= n ? resolve() : undefined)));
  } finally {
    await watcher.cancel();
  }
}
