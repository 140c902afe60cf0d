// Auth against a real etcd 3.4: the same admin operations, the same seeded KV/Watch calls and
// the same Lock and Election calls, as several users with different permission shapes, must get
// the same answers (codes and texts) from both, and leave the same keys. Where etcd 3.4.23 has holes later releases closed (Lease calls, nested
// Txns), kvs is stricter, and those are checked against kvs alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { root, service } from '../shared/proto/index.js';
import { encodeRequest, plain, prefixEnd, type Outcome } from './differential.js';
import { prng } from '../testkit/prng.js';
import { onCleanup, pollUntil, startEtcd, startKvs, type Ctx } from '../testkit/harness.js';
import { etcdctlSideBySide } from './etcdctl-compare.js';

const AUTH = 'etcdserverpb.Auth';
const KV = 'etcdserverpb.KV';
const LEASE = 'etcdserverpb.Lease';
const LOCK = 'v3lockpb.Lock';
const ELECTION = 'v3electionpb.Election';
type Client = grpc.Client & Record<string, (req: unknown, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: unknown) => void) => void>;

/** One server: a client per service; calls carry a user's token when given. */
class Side {
  private clients = new Map<string, Client>();
  readonly tokens = new Map<string, string>();
  constructor(private readonly t: Ctx, readonly address: string) {}

  client(svc: string): Client {
    let c = this.clients.get(svc);
    if (!c) {
      const Ctor = grpc.makeGenericClientConstructor(service(svc), svc);
      c = new Ctor(this.address, grpc.credentials.createInsecure()) as unknown as Client;
      const made = c;
      onCleanup(this.t, () => made.close());
      this.clients.set(svc, c);
    }
    return c;
  }

  metadata(user?: string, rawToken?: string): grpc.Metadata {
    const md = new grpc.Metadata();
    const token = rawToken ?? (user ? this.tokens.get(user) : undefined);
    if (token !== undefined) md.set('token', token);
    return md;
  }

  call(svc: string, method: string, req: object, user?: string, rawToken?: string): Promise<Outcome> {
    const m = root.lookupService(svc).methods[method]!;
    m.resolve();
    const msg = encodeRequest(method, req, svc);
    return new Promise((resolve) => {
      this.client(svc)[method]!(msg, this.metadata(user, rawToken), { deadline: Date.now() + 10_000 }, (err, out) => {
        if (err) resolve({ error: { code: err.code, details: err.details } });
        else resolve({ ok: plain(m.resolvedResponseType!, out as Record<string, unknown>) });
      });
    });
  }

  /** The first response of a new watch stream (as `user`) to one create request. */
  watchOnce(req: object, user?: string): Promise<unknown> {
    const c = this.client('etcdserverpb.Watch') as unknown as Record<string, (md: grpc.Metadata) => grpc.ClientDuplexStream<unknown, unknown>>;
    const call = c.Watch!(this.metadata(user));
    const wr = root.lookupType('etcdserverpb.WatchRequest');
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no watch response')), 10_000);
      call.once('data', (m) => {
        clearTimeout(timer);
        call.cancel();
        resolve(plain(root.lookupType('etcdserverpb.WatchResponse'), m as Record<string, unknown>));
      });
      call.on('error', () => {});
      call.write(encodeRequest('Watch', { createRequest: req }, 'etcdserverpb.Watch') as never);
      void wr;
    });
  }
}

/** An Observe stream: its messages, and its status once it ends. */
interface Observation {
  messages: unknown[];
  /** Resolves when the first message arrives or the stream ends, whichever is first. */
  first: Promise<void>;
  status?: { code: number; details: string };
  cancel(): void;
}

function observeOn(side: Side, name: string, user?: string): Observation {
  const c = side.client(ELECTION) as unknown as Record<string, (req: unknown, md: grpc.Metadata) => grpc.ClientReadableStream<Record<string, unknown>>>;
  const call = c.Observe!(encodeRequest('Observe', { name }, ELECTION), side.metadata(user));
  const type = root.lookupType('v3electionpb.LeaderResponse');
  let wake: () => void = () => {};
  const o: Observation = { messages: [], first: new Promise<void>((resolve) => (wake = resolve)), cancel: () => call.cancel() };
  call.on('data', (m) => {
    o.messages.push(plain(type, m));
    wake();
  });
  call.on('status', (st) => {
    o.status ??= { code: st.code, details: st.details };
    wake();
  });
  call.on('error', () => {});
  return o;
}

class Pair {
  differences = 0;
  constructor(readonly etcd: Side, readonly kvs: Side) {}

  async same(svc: string, method: string, req: object, user?: string, context = ''): Promise<Outcome> {
    const [e, k] = await Promise.all([this.etcd.call(svc, method, req, user), this.kvs.call(svc, method, req, user)]);
    const strip = (o: Outcome) => ('ok' in o && method === 'Authenticate' ? { ok: { ...o.ok, token: '<token>' } } : o);
    assert.deepStrictEqual(strip(k), strip(e), `${method} ${JSON.stringify(req)} as ${user ?? '(no token)'} ${context}`);
    return e;
  }

  auth(method: string, req: object = {}, user?: string) {
    return this.same(AUTH, method, req, user);
  }

  async login(user: string, password: string): Promise<void> {
    const [e, k] = await Promise.all([
      this.etcd.call(AUTH, 'Authenticate', { name: user, password }),
      this.kvs.call(AUTH, 'Authenticate', { name: user, password }),
    ]);
    assert.ok('ok' in e && 'ok' in k, `login ${user}: etcd ${JSON.stringify(e)} kvs ${JSON.stringify(k)}`);
    this.etcd.tokens.set(user, e.ok.token);
    this.kvs.tokens.set(user, k.ok.token);
  }
}

async function startAuthPair(t: Ctx): Promise<Pair> {
  const [etcd, kvs] = await Promise.all([startEtcd(t), startKvs(t, { args: ['--bcrypt-cost', '4'] })]);
  return new Pair(new Side(t, etcd.endpoint), new Side(t, kvs.endpoint));
}

const R = 'READ', W = 'WRITE', RW = 'READWRITE';

/** Roles of different shapes; users u1..u4 hold different mixes. */
async function setUp(p: Pair): Promise<void> {
  // Errors before any user exists.
  await p.auth('AuthEnable');
  await p.auth('RoleAdd', { name: '' });
  await p.auth('UserAdd', { name: '', password: 'x' });
  for (const r of ['exact', 'prefix', 'fromkey', 'range', 'split1', 'split2', 'none']) await p.auth('RoleAdd', { name: r });
  await p.auth('RoleAdd', { name: 'exact' });
  const grant = (name: string, key: string, rangeEnd: string, permType: string) => p.auth('RoleGrantPermission', { name, perm: { key, rangeEnd, permType } });
  await grant('exact', 'a', '', RW);
  await grant('exact', 'b', '', R);
  await grant('prefix', 'p/', prefixEnd('p/'), R);
  await grant('prefix', 'p/w/', prefixEnd('p/w/'), W);
  await grant('fromkey', 'm', '\0', RW);
  await grant('range', 'k1', 'k5', RW);
  await grant('split1', 's1', 's3', R);
  await grant('split2', 's3', 's6', R);
  await grant('split2', 's8', 's9', R);
  await grant('exact', 'b', '', RW); // update of the type
  // Bad permissions. (A range with its end below its start, or without a key, etcd 3.4.23 stores;
  // later releases and kvs refuse it: see the kvs-only test.)
  await grant('nosuch', 'a', '', RW);
  for (const r of ['exact', 'prefix', 'fromkey', 'range', 'none', 'nosuch']) await p.auth('RoleGet', { role: r });
  await p.auth('RoleList');
  await p.auth('RoleRevokePermission', { role: 'range', key: 'k1', rangeEnd: 'k9' });
  await p.auth('RoleRevokePermission', { role: 'nosuch', key: 'k1' });
  // Users.
  await p.auth('UserAdd', { name: 'root', password: 'rootpw' });
  await p.auth('AuthEnable'); // root without the root role
  await p.auth('UserGrantRole', { user: 'root', role: 'root' });
  for (const u of ['u1', 'u2', 'u3', 'u4']) await p.auth('UserAdd', { name: u, password: `${u}pw` });
  await p.auth('UserAdd', { name: 'u1', password: 'again' });
  await p.auth('UserAdd', { name: 'nopw', password: '', options: { noPassword: true } });
  await p.auth('UserGrantRole', { user: 'u1', role: 'exact' });
  await p.auth('UserGrantRole', { user: 'u1', role: 'prefix' });
  await p.auth('UserGrantRole', { user: 'u2', role: 'fromkey' });
  await p.auth('UserGrantRole', { user: 'u2', role: 'range' });
  await p.auth('UserGrantRole', { user: 'u3', role: 'split1' });
  await p.auth('UserGrantRole', { user: 'u3', role: 'split2' });
  await p.auth('UserGrantRole', { user: 'u3', role: 'split2' }); // again: no change
  await p.auth('UserGrantRole', { user: 'u4', role: 'none' });
  await p.auth('UserGrantRole', { user: 'u4', role: 'nosuch' });
  await p.auth('UserGrantRole', { user: 'nosuch', role: 'none' });
  await p.auth('UserRevokeRole', { name: 'u4', role: 'exact' });
  await p.auth('UserRevokeRole', { name: 'nosuch', role: 'exact' });
  for (const u of ['root', 'u1', 'u2', 'u3', 'nosuch']) await p.auth('UserGet', { name: u });
  await p.auth('UserList');
  await p.auth('Authenticate', { name: 'root', password: 'rootpw' }); // auth not enabled yet
  await p.auth('AuthEnable');
}

const KEYS = ['a', 'a0', 'b', 'p/', 'p/x', 'p/w/1', 'p0', 'k1', 'k3', 'k5', 'k6', 'm', 'mz', 'zz', 's1', 's3', 's5', 's7'];
const USERS = [undefined, 'root', 'u1', 'u2', 'u3', 'u4'];

/** A key and range end; a single key is sent without range_end (etcd 3.4 reads an empty one inside a Txn as "from key"). */
function randomRange(rnd: () => number): { key: string; rangeEnd?: string } {
  const pick = <T>(xs: T[]) => xs[Math.floor(rnd() * xs.length)]!;
  const key = pick(KEYS);
  const shape = rnd();
  if (shape < 0.4) return { key };
  if (shape < 0.55) return { key, rangeEnd: '\0' };
  if (shape < 0.75) return { key, rangeEnd: prefixEnd(key) };
  return { key, rangeEnd: pick(KEYS) };
}

function randomOp(rnd: () => number): { method: string; req: object } {
  const pick = <T>(xs: T[]) => xs[Math.floor(rnd() * xs.length)]!;
  const x = rnd();
  if (x < 0.35) return { method: 'Range', req: { ...randomRange(rnd), keysOnly: rnd() < 0.3 } };
  if (x < 0.6) return { method: 'Put', req: { key: pick(KEYS), value: `v${Math.floor(rnd() * 100)}`, prevKv: rnd() < 0.3 } };
  if (x < 0.75) return { method: 'DeleteRange', req: { ...randomRange(rnd), prevKv: rnd() < 0.3 } };
  // A flat Txn (nested ones: etcd 3.4.23 does not check them; see the kvs-only test).
  const op = () => {
    const y = rnd();
    if (y < 0.4) return { requestRange: randomRange(rnd) };
    if (y < 0.8) return { requestPut: { key: pick(KEYS), value: 'tv', prevKv: rnd() < 0.2 } };
    return { requestDeleteRange: { key: pick(KEYS), prevKv: rnd() < 0.2 } };
  };
  return {
    method: 'Txn',
    req: {
      compare: rnd() < 0.5 ? [{ key: pick(KEYS), target: 'VERSION', result: 'GREATER', version: 0 }] : [],
      success: rnd() < 0.7 ? [op()] : [],
      failure: rnd() < 0.5 ? [op()] : [],
    },
  };
}

test('auth differential: admin operations, Authenticate, and KV/Watch calls as users with different permissions', { timeout: 300_000 }, async (t) => {
  const p = await startAuthPair(t);
  await setUp(p);

  // Authenticate: wrong password, unknown user, a no-password user.
  await p.auth('Authenticate', { name: 'u1', password: 'wrong' });
  await p.auth('Authenticate', { name: 'ghost', password: 'x' });
  await p.auth('Authenticate', { name: 'nopw', password: '' });
  await p.auth('Authenticate', { name: '', password: '' });
  for (const u of ['root', 'u1', 'u2', 'u3', 'u4']) await p.login(u, `${u === 'root' ? 'root' : u}pw`);

  // Admin calls: no token, a non-root user, root.
  for (const user of [undefined, 'u1', 'root']) {
    await p.auth('UserList', {}, user);
    await p.auth('RoleList', {}, user);
    await p.auth('UserGet', { name: 'u1' }, user); // u1 may read itself
    await p.auth('UserGet', { name: 'u2' }, user);
    await p.auth('RoleGet', { role: 'exact' }, user); // u1 holds it
    await p.auth('RoleGet', { role: 'range' }, user);
    await p.auth('UserAdd', { name: `made-by-${user ?? 'none'}`, password: 'x' }, user);
    await p.auth('RoleAdd', { name: `role-by-${user ?? 'none'}` }, user);
    await p.auth('AuthEnable', {}, user);
  }
  await p.auth('UserDelete', { name: 'root' }, 'root');
  await p.auth('RoleDelete', { role: 'root' }, 'root');
  await p.auth('UserRevokeRole', { name: 'root', role: 'root' }, 'root');

  // Seeded KV traffic as every user; then watches.
  const rnd = prng(20261123);
  for (let i = 0; i < 400; i++) {
    const { method, req } = randomOp(rnd);
    const user = USERS[Math.floor(rnd() * USERS.length)];
    await p.same(KV, method, req, user, `(step ${i})`);
  }
  for (const user of USERS) {
    for (const r of [{ key: 'a' }, { key: 'p/', rangeEnd: prefixEnd('p/') }, { key: 'k1', rangeEnd: 'k5' }, { key: 's1', rangeEnd: 's6' }, { key: 's1', rangeEnd: 's9' }, { key: 'zz' }]) {
      const [e, k] = await Promise.all([p.etcd.watchOnce(r, user), p.kvs.watchOnce(r, user)]);
      assert.deepStrictEqual(k, e, `watch ${JSON.stringify(r)} as ${user}`);
    }
  }

  // Revocation, password change and deletion take effect at once.
  await p.auth('UserRevokeRole', { name: 'u2', role: 'range' }, 'root');
  await p.same(KV, 'Range', { key: 'k3' }, 'u2');
  await p.auth('RoleRevokePermission', { role: 'exact', key: 'a' }, 'root');
  await p.same(KV, 'Put', { key: 'a', value: 'x' }, 'u1');
  await p.same(KV, 'Range', { key: 'b' }, 'u1');
  await p.auth('UserChangePassword', { name: 'u3', password: 'new' }, 'root');
  await p.same(KV, 'Range', { key: 's1' }, 'u3');
  await p.auth('UserDelete', { name: 'u4' }, 'root');
  await p.same(KV, 'Range', { key: 'a' }, 'u4');
  await p.auth('RoleDelete', { role: 'prefix' }, 'root');
  await p.same(KV, 'Range', { key: 'p/x' }, 'u1');
  await p.auth('UserGet', { name: 'u1' }, 'root');
  // Malformed tokens.
  for (const token of ['garbage', 'abc.1', '.', '']) {
    const [e, k] = await Promise.all([p.etcd.call(KV, 'Range', { key: 'a' }, undefined, token), p.kvs.call(KV, 'Range', { key: 'a' }, undefined, token)]);
    assert.deepStrictEqual(k, e, `token ${JSON.stringify(token)}`);
  }
  await p.auth('AuthDisable', {}, 'u1');
  await p.auth('AuthDisable', {}, 'root');
  await p.same(KV, 'Range', { key: 'a' });
  await p.auth('AuthDisable');
});

test('auth differential: Lock and Election check each operation of their recipes as the caller, as etcd 3.4 does', { timeout: 300_000 }, async (t) => {
  const p = await startAuthPair(t);
  const both = [p.etcd, p.kvs];
  // Lock L and election E keep their contenders under L/ and E/; keys outside: other/.
  const roles: Record<string, [string, string, string][]> = {
    w: [['L/', prefixEnd('L/'), W], ['E/', prefixEnd('E/'), W]], // write, no read
    r: [['L/', prefixEnd('L/'), R], ['E/', prefixEnd('E/'), R]], // read, no write
    rw: [['L/', prefixEnd('L/'), RW], ['E/', prefixEnd('E/'), RW]], // the whole prefix, nothing outside it
    own: [['L/1a', '', RW], ['E/1a', '', RW]], // its own contender keys (lease 0x1a) only
    ownr: [['L/1a', '', RW], ['E/1a', '', RW], ['L/', prefixEnd('L/'), R], ['E/', prefixEnd('E/'), R]], // + read on the prefix
  };
  await p.auth('UserAdd', { name: 'root', password: 'rootpw' });
  await p.auth('UserGrantRole', { user: 'root', role: 'root' });
  for (const [role, perms] of Object.entries(roles)) {
    await p.auth('RoleAdd', { name: role });
    for (const [key, rangeEnd, permType] of perms) await p.auth('RoleGrantPermission', { name: role, perm: { key, rangeEnd, permType } });
    await p.auth('UserAdd', { name: `c${role}`, password: 'pw' });
    await p.auth('UserGrantRole', { user: `c${role}`, role });
  }
  await p.auth('AuthEnable');
  await p.login('root', 'rootpw');
  for (const role of Object.keys(roles)) await p.login(`c${role}`, 'pw');
  for (const side of both) side.tokens.set('bad-token', 'notatoken.1');
  for (const ID of [0x1a, 0x2b, 0x3c]) await p.same(LEASE, 'LeaseGrant', { ID, TTL: 600 }, 'root');

  /** The keys under L/ and E/ (and other/), with their revisions, the same on both. */
  const state = async (context: string) => {
    for (const key of ['L/', 'E/', 'other/']) await p.same(KV, 'Range', { key, rangeEnd: prefixEnd(key) }, 'root', `(state ${context})`);
  };
  /** The create revision of E/1a (0 when absent), for Proclaim and Resign. */
  const e1aRev = async () => {
    const r = await p.etcd.call(KV, 'Range', { key: 'E/1a' }, 'root');
    return 'ok' in r ? Number(r.ok.kvs[0]?.createRevision ?? 0) : 0;
  };
  /** Observe E as `user` on both; a put of E/zz by root wakes an observer that may read; compare. */
  const observe = async (user: string | undefined) => {
    const [oe, ok] = [observeOn(p.etcd, 'E', user), observeOn(p.kvs, 'E', user)];
    await p.same(KV, 'Put', { key: 'E/zz', value: 'wake' }, 'root', '(observe)');
    await Promise.all([oe.first, ok.first]);
    oe.cancel();
    ok.cancel();
    // The first message's header is the revision of the observer's first read: before or after
    // the wake-up put, as it happens. The leader it names and how the stream ends are compared.
    const seen = (o: Observation) => ({ leader: (o.messages[0] as { kv?: unknown } | undefined)?.kv, status: o.status });
    assert.deepStrictEqual(seen(ok), seen(oe), `Observe E as ${user}`);
    await p.same(KV, 'DeleteRange', { key: 'E/zz' }, 'root', '(observe)');
  };

  for (const user of [undefined, 'bad-token', 'cw', 'cr', 'crw', 'cown', 'cownr']) {
    const as = `as ${user ?? '(no token)'}`;
    await p.same(LOCK, 'Lock', { name: 'L', lease: 0x1a }, user);
    await state(`Lock ${as}`);
    // A session lease granted for the call: refused before anything is written, except for crw,
    // which would queue behind its own L/1a under a lease whose id differs between the two.
    if (user !== 'crw') await p.same(LOCK, 'Lock', { name: 'L', lease: 0 }, user);
    await p.same(LOCK, 'Unlock', { key: 'L/1a' }, user);
    await p.same(LOCK, 'Unlock', { key: 'other/1' }, user);
    await p.same(LOCK, 'Unlock', { key: '' }, user);
    await state(`Unlock ${as}`);
    await p.same(ELECTION, 'Campaign', { name: 'E', lease: 0x1a, value: 'v1' }, user);
    await state(`Campaign ${as}`); // cown: written, then refused the Range over E/
    await p.same(ELECTION, 'Campaign', { name: 'E', lease: 0x1a, value: 'v2' }, user); // again: proclaims v2
    await state(`Campaign again ${as}`);
    await p.same(ELECTION, 'Leader', { name: 'E' }, user);
    await observe(user);
    const leader = { name: 'E', key: 'E/1a', rev: await e1aRev(), lease: 0x1a };
    await p.same(ELECTION, 'Proclaim', { leader, value: 'v3' }, user);
    await p.same(ELECTION, 'Proclaim', { leader: { ...leader, key: 'other/1' }, value: 'x' }, user);
    await p.same(ELECTION, 'Proclaim', { leader: { ...leader, key: '' }, value: 'x' }, user);
    await state(`Proclaim ${as}`);
    await p.same(ELECTION, 'Resign', { leader: { ...leader, key: 'other/1' } }, user);
    await p.same(ELECTION, 'Resign', { leader: { ...leader, key: '' } }, user);
    await p.same(ELECTION, 'Resign', { leader }, user);
    await state(`Resign ${as}`);
    for (const key of ['L/', 'E/']) await p.same(KV, 'DeleteRange', { key, rangeEnd: prefixEnd(key) }, 'root');
  }

  // Waiting as cownr (read on the prefix, write on its own key only): the wait's Range and
  // watch are the caller's, and are allowed; then it holds the lock, and is elected.
  const queued = async (prefix: string, n: number, sides = both) => {
    for (const side of sides) {
      await pollUntil(`${n} keys under ${prefix}`, async () => {
        const r = await side.call(KV, 'Range', { key: prefix, rangeEnd: prefixEnd(prefix), countOnly: true }, 'root');
        return 'ok' in r && Number(r.ok.count) === n ? true : undefined;
      });
    }
  };
  await p.same(LOCK, 'Lock', { name: 'L', lease: 0x2b }, 'root');
  const lockWait = p.same(LOCK, 'Lock', { name: 'L', lease: 0x1a }, 'cownr');
  await queued('L/', 2);
  await p.same(LOCK, 'Unlock', { key: 'L/2b' }, 'root');
  assert.ok('ok' in (await lockWait), 'cownr got the lock');
  await p.same(LOCK, 'Unlock', { key: 'L/1a' }, 'cownr');
  await p.same(ELECTION, 'Campaign', { name: 'E', lease: 0x2b, value: 'root' }, 'root');
  const campaignWait = p.same(ELECTION, 'Campaign', { name: 'E', lease: 0x1a, value: 'mine' }, 'cownr');
  await queued('E/', 2);
  const rootLeader = { name: 'E', key: 'E/2b', rev: Number((await p.etcd.call(KV, 'Range', { key: 'E/2b' }, 'root') as { ok: any }).ok.kvs[0].createRevision), lease: 0x2b };
  await p.same(ELECTION, 'Resign', { leader: rootLeader }, 'cownr'); // not its key: refused
  await p.same(ELECTION, 'Resign', { leader: rootLeader }, 'root');
  assert.ok('ok' in (await campaignWait), 'cownr was elected');
  await p.same(ELECTION, 'Leader', { name: 'E' }, 'cownr');
  await state('after the waits');

  // Where kvs differs on purpose (docs/security.md):
  // 1. A Txn's put needs write on the keys already attached to its lease, as in etcd 3.6 (and in
  //    kvs's own KV Txn); etcd 3.4.23 does not check them, so crw locks under such a lease.
  await p.same(KV, 'Put', { key: 'other/leased', value: 'x', lease: 0x3c }, 'root');
  const [e1, k1] = await Promise.all([p.etcd.call(LOCK, 'Lock', { name: 'L2', lease: 0x3c }, 'crw'), p.kvs.call(LOCK, 'Lock', { name: 'L2', lease: 0x3c }, 'crw')]);
  assert.ok('error' in e1 && e1.error.details === 'etcdserver: permission denied', `etcd 3.4: crw has no permission on L2/ at all: ${JSON.stringify(e1)}`);
  assert.deepStrictEqual(k1, e1);
  const [e2, k2] = await Promise.all([p.etcd.call(LOCK, 'Lock', { name: 'L', lease: 0x3c }, 'crw'), p.kvs.call(LOCK, 'Lock', { name: 'L', lease: 0x3c }, 'crw')]);
  assert.ok('ok' in e2, `etcd 3.4.23 lets crw attach L/3c to a lease holding other/leased: ${JSON.stringify(e2)}`);
  assert.deepStrictEqual(k2, { error: { code: grpc.status.UNKNOWN, details: 'etcdserver: permission denied' } });
  await p.etcd.call(KV, 'DeleteRange', { key: 'L/3c' }, 'root');
  // 2. A waiter that gives up is withdrawn: etcd 3.4 deletes its key with a context that carries
  //    no token, which auth refuses, so there the key stays until its lease ends. (etcd is two
  //    revisions ahead from here on: only keys are compared.)
  for (const side of both) assert.ok('ok' in (await side.call(LOCK, 'Lock', { name: 'L', lease: 0x2b }, 'root')));
  const Ctor = grpc.makeGenericClientConstructor(service(LOCK), LOCK);
  await Promise.all(
    both.map(
      (side) =>
        new Promise<void>((resolve) => {
          const c = new Ctor(side.address, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
          const call = c.Lock(encodeRequest('Lock', { name: 'L', lease: 0x1a }, LOCK), side.metadata('crw'), (err: grpc.ServiceError | null) => {
            assert.equal(err?.code, grpc.status.CANCELLED);
            c.close();
            resolve();
          });
          void queued('L/', 2, [side]).then(() => call.cancel());
        }),
    ),
  );
  const left = async (side: Side) => {
    const r = await side.call(KV, 'Range', { key: 'L/', rangeEnd: prefixEnd('L/'), keysOnly: true }, 'root');
    return 'ok' in r ? r.ok.kvs.map((kv: { key: string }) => kv.key) : r;
  };
  // The client's cancel returns at once; the server withdraws the waiter when it sees it.
  await pollUntil('kvs withdraws the given-up waiter', async () => ((await left(p.kvs)).join() === 'L/2b' ? true : undefined), 20_000);
  assert.deepStrictEqual(await left(p.etcd), ['L/1a', 'L/2b'], 'etcd 3.4 leaves the given-up waiter');
});

test('auth (kvs only): nested Txns, Lease calls and Status need what later etcd releases ask', { timeout: 120_000 }, async (t) => {
  const kvs = await startKvs(t, { args: ['--bcrypt-cost', '4'] });
  const s = new Side(t, kvs.endpoint);
  const ok = async (svc: string, method: string, req: object, user?: string) => {
    const r = await s.call(svc, method, req, user);
    assert.ok('ok' in r, `${method} as ${user}: ${JSON.stringify(r)}`);
    return (r as { ok: any }).ok;
  };
  const fails = async (svc: string, method: string, req: object, user: string | undefined, details: string) => {
    const r = await s.call(svc, method, req, user);
    assert.ok('error' in r, `${method} as ${user} succeeded`);
    assert.equal((r as { error: { details: string } }).error.details, details);
  };
  await ok(AUTH, 'UserAdd', { name: 'root', password: 'r' });
  await ok(AUTH, 'UserGrantRole', { user: 'root', role: 'root' });
  await ok(AUTH, 'RoleAdd', { name: 'ro' });
  await ok(AUTH, 'RoleGrantPermission', { name: 'ro', perm: { key: 'a', rangeEnd: 'b', permType: 'READWRITE' } });
  await ok(AUTH, 'UserAdd', { name: 'u', password: 'p' });
  await ok(AUTH, 'UserGrantRole', { user: 'u', role: 'ro' });
  await ok(AUTH, 'RoleAdd', { name: 'wo' });
  await ok(AUTH, 'RoleGrantPermission', { name: 'wo', perm: { key: 'w', rangeEnd: 'x', permType: 'WRITE' } });
  await ok(AUTH, 'UserAdd', { name: 'w', password: 'p' });
  await ok(AUTH, 'UserGrantRole', { user: 'w', role: 'wo' });
  await ok(AUTH, 'AuthEnable', {});
  for (const [u, pw] of [['root', 'r'], ['u', 'p'], ['w', 'p']] as const) s.tokens.set(u, (await ok(AUTH, 'Authenticate', { name: u, password: pw })).token);
  const DENIED = 'etcdserver: permission denied';
  const EMPTY = 'etcdserver: user name is empty';
  // A nested Txn writing outside the user's range is refused.
  await fails(KV, 'Txn', { success: [{ requestTxn: { success: [{ requestPut: { key: 'z', value: 'x' } }] } }] }, 'u', DENIED);
  await ok(KV, 'Txn', { success: [{ requestTxn: { success: [{ requestPut: { key: 'a1', value: 'x' } }] } }] }, 'u');
  // A user who may write but not read gets no previous value: Put and DeleteRange with prev_kv
  // need read, as in etcd, and so does a Txn's put with prev_kv (etcd 3.4.23 lets it through).
  await ok(KV, 'Put', { key: 'w1', value: 'secret' }, 'w');
  await fails(KV, 'Put', { key: 'w1', value: 'x', prevKv: true }, 'w', DENIED);
  await fails(KV, 'DeleteRange', { key: 'w1', prevKv: true }, 'w', DENIED);
  await fails(KV, 'Txn', { success: [{ requestPut: { key: 'w1', value: 'x', prevKv: true } }] }, 'w', DENIED);
  await ok(KV, 'Txn', { success: [{ requestPut: { key: 'w1', value: 'x' } }] }, 'w');
  await fails(KV, 'Range', { key: 'w1' }, 'w', DENIED);
  // Lease calls need a user; revoking a lease needs write on its keys.
  await fails(LEASE, 'LeaseGrant', { TTL: 60 }, undefined, EMPTY);
  const lease = (await ok(LEASE, 'LeaseGrant', { TTL: 60 }, 'root')).ID;
  await ok(KV, 'Put', { key: 'zz', value: 'x', lease }, 'root');
  await fails(LEASE, 'LeaseRevoke', { ID: lease }, 'u', DENIED);
  await fails(LEASE, 'LeaseTimeToLive', { ID: lease, keys: true }, 'u', DENIED);
  await fails(LEASE, 'LeaseLeases', {}, 'u', DENIED);
  await fails(KV, 'Put', { key: 'a2', value: 'x', lease }, 'u', DENIED);
  await ok(LEASE, 'LeaseTimeToLive', { ID: lease, keys: false }, 'u');
  await fails(LEASE, 'LeaseTimeToLive', { ID: lease }, undefined, EMPTY);
  await ok(LEASE, 'LeaseRevoke', { ID: lease }, 'root');
  // Compact and Status need a user; Hash needs root.
  await fails(KV, 'Compact', { revision: 1 }, undefined, EMPTY);
  await fails('etcdserverpb.Maintenance', 'Status', {}, undefined, EMPTY);
  await ok('etcdserverpb.Maintenance', 'Status', {}, 'u');
  await fails('etcdserverpb.Maintenance', 'Hash', {}, 'u', DENIED);
  await ok('etcdserverpb.Maintenance', 'Hash', {}, 'root');
  // The other admin Maintenance calls need root; listing alarms needs a user.
  const M = 'etcdserverpb.Maintenance';
  for (const [method, req] of [['HashKV', { revision: 0 }], ['Defragment', {}], ['MoveLeader', { targetID: 1 }], ['Alarm', { action: 'ACTIVATE', memberID: 1, alarm: 'NOSPACE' }]] as const) {
    await fails(M, method, req, 'u', DENIED);
    await fails(M, method, req, undefined, EMPTY);
  }
  await ok(M, 'HashKV', { revision: 0 }, 'root');
  await ok(M, 'Defragment', {}, 'root');
  await fails(M, 'Alarm', { action: 'GET' }, undefined, EMPTY);
  await ok(M, 'Alarm', { action: 'GET' }, 'u');
  // The reserved key space is refused to root too; a range merely overlapping it is not.
  await fails(KV, 'Put', { key: '\0auth/users', value: 'x' }, 'root', DENIED);
  await fails(KV, 'Range', { key: '\0auth/', rangeEnd: '\0auth0' }, 'root', DENIED);
  await ok(KV, 'Range', { key: '\0', rangeEnd: '\0' }, 'root');
  // Bad input: a token of an index never reached, a 1 MiB name, a permission range upside down.
  await fails(KV, 'Range', { key: 'a' }, undefined, EMPTY);
  const r = await s.call(KV, 'Range', { key: 'a' }, undefined, 'abcdefghijklmnop.99999999999');
  assert.deepEqual(r, { error: { code: grpc.status.UNAUTHENTICATED, details: 'etcdserver: invalid auth token' } });
  const big = 'n'.repeat(1024 * 1024);
  const add = await s.call(AUTH, 'UserAdd', { name: big, password: 'x' }, 'root');
  assert.ok('error' in add && add.error.code === grpc.status.INVALID_ARGUMENT, JSON.stringify(add).slice(0, 300));
  await fails(AUTH, 'UserGet', { name: big }, 'root', 'etcdserver: user name not found');
  await fails(AUTH, 'RoleGrantPermission', { name: 'ro', perm: { key: 'b', rangeEnd: 'a' } }, 'root', 'etcdserver: invalid auth management');
  await fails(AUTH, 'RoleGrantPermission', { name: 'ro', perm: { key: '', rangeEnd: 'a' } }, 'root', 'etcdserver: invalid auth management');
  // etcd 3.4.23 crashes on a grant without a permission; later releases answer this.
  await fails(AUTH, 'RoleGrantPermission', { name: 'ro' }, 'root', 'etcdserver: permission not given');
  void onCleanup;
});

test('etcdctl user, role and auth commands print what they print against etcd', { timeout: 180_000 }, async (t) => {
  const [etcd, kvs] = await Promise.all([startEtcd(t), startKvs(t, { args: ['--bcrypt-cost', '4'] })]);
  const { same } = etcdctlSideBySide(kvs.endpoint, etcd.endpoint);
  const root = ['--user', 'root:rootpw'];
  for (const args of [
    ['auth', 'enable'],
    ['user', 'add', 'root:rootpw'],
    ['auth', 'enable'],
    ['user', 'grant-role', 'root', 'root'],
    ['role', 'add', 'app'],
    ['role', 'add', 'app'],
    ['role', 'grant-permission', 'app', 'readwrite', 'key1'],
    ['role', 'grant-permission', 'app', 'read', '--prefix', 'pre/'],
    ['role', 'grant-permission', 'app', 'write', '--from-key', 'm'],
    ['role', 'grant-permission', 'app', 'readwrite', 'a', 'c'],
    ['role', 'grant-permission', 'nosuch', 'read', 'x'],
    ['role', 'get', 'app'],
    ['role', 'get', 'app', '-w', 'json'],
    ['user', 'add', 'alice:alicepw'],
    ['user', 'add', 'alice:again'],
    ['user', 'grant-role', 'alice', 'app'],
    ['user', 'grant-role', 'alice', 'nosuch'],
    ['user', 'get', 'alice'],
    ['user', 'get', 'alice', '--detail'],
    ['user', 'list'],
    ['role', 'list'],
    ['auth', 'enable'],
    ['user', 'list'],
    [...root, 'user', 'list'],
    ['--user', 'alice:alicepw', 'user', 'list'],
    // endpoint health keeps working under auth (etcdctl counts a permission denied as healthy).
    ['endpoint', 'health'],
    [...root, 'endpoint', 'health'],
    ['--user', 'alice:alicepw', 'endpoint', 'health'],
    ['--user', 'alice:wrong', 'get', 'key1'],
    ['--user', 'alice:alicepw', 'put', 'key1', 'v'],
    ['--user', 'alice:alicepw', 'get', 'key1'],
    ['--user', 'alice:alicepw', 'put', 'zzz', 'v'],
    ['--user', 'alice:alicepw', 'get', 'pre/', '--prefix'],
    ['--user', 'alice:alicepw', 'user', 'get', 'alice'],
    ['--user', 'alice:alicepw', 'role', 'get', 'app'],
    [...root, 'role', 'revoke-permission', 'app', 'key1'],
    [...root, 'role', 'revoke-permission', 'app', 'key1'],
    [...root, 'role', 'revoke-permission', 'app', 'pre/', '--prefix'],
    ['--user', 'alice:alicepw', 'get', 'key1'],
    [...root, 'user', 'revoke-role', 'alice', 'app'],
    [...root, 'user', 'revoke-role', 'alice', 'app'],
    [...root, 'user', 'delete', 'root'],
    [...root, 'role', 'delete', 'root'],
    [...root, 'user', 'delete', 'alice'],
    [...root, 'user', 'delete', 'alice'],
    [...root, 'role', 'delete', 'app'],
    ['--user', 'alice:alicepw', 'auth', 'disable'],
    [...root, 'auth', 'disable'],
    ['auth', 'disable'],
  ]) {
    await same(args);
  }
});
