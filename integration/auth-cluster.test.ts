// Auth on a three-node cluster: auth state goes through the leader's WAL like any write, so
// every node has it. A token issued through a follower works on that follower at once, and a
// revocation or password change made on the leader counts on every node at once for writes and
// linearizable reads. (The window these could fail in is narrow: a leader commits only once
// every connected follower has the entry, and a follower applies it on the commit notice that
// leaves with the answer. services/gateway/cluster-view.ts RoutedLink closes it; no test here makes
// it wide enough to show.) The Auth service's own reads on a follower (users, roles, the
// password Authenticate checks) wait for the leader's committed index: the second test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';
import { etcdctl } from '../testkit/harness.js';
import { login, rawClient } from '../testkit/raw-client.js';
import { decode } from '../shared/proto/index.js';

const put = (key: string) => ['Put', 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from('v') }] as const;
const get = (key: string, serializable = false) => ['Range', 'etcdserverpb.RangeRequest', { key: Buffer.from(key), serializable }] as const;

test('auth on a cluster: tokens issued through a follower work there at once; a revocation and a password change on the leader count on every node at once', { timeout: 240_000 }, async (t) => {
  // At debug level, so that the check below covers every line a node can write about a request.
  const cluster = await startCluster(t, 3, { args: ['--bcrypt-cost', '4', '--log-level', 'debug'] });
  const leader = await waitForLeader(cluster.nodes);
  const followers = cluster.nodes.filter((n) => n !== leader);
  const ctl = async (...args: string[]) => {
    const r = await etcdctl(leader.endpoint, args);
    assert.equal(r.exitCode, 0, `etcdctl ${args.join(' ')}: ${r.stderr}`);
  };
  // Writes through every node while auth is off: each gateway has read it off (AuthGate.writeMeta).
  for (const n of cluster.nodes) assert.equal((await etcdctl(n.endpoint, ['put', `app/off-${n.id}`, 'v'])).exitCode, 0);
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['role', 'add', 'app'], ['role', 'grant-permission', 'app', 'readwrite', '--prefix', 'app/'], ['user', 'add', 'alice:alicepw'], ['user', 'grant-role', 'alice', 'app'], ['auth', 'enable']]) await ctl(...args);
  // Once it is on, a write without a user is refused through every node at once.
  for (const n of cluster.nodes) assert.match((await etcdctl(n.endpoint, ['put', 'app/anonymous', 'v'])).stderr, /user name is empty/, `${n.id}: a write without a user after auth enable`);
  await ctl('--user', 'root:rootpw', 'put', 'app/seed', 'v');

  // A login through a follower, the token used on that follower at once, many times over.
  for (const f of followers) {
    const auth = rawClient(t, f.endpoint, 'etcdserverpb.Auth');
    const kv = rawClient(t, f.endpoint, 'etcdserverpb.KV');
    for (let i = 0; i < 20; i++) {
      const token = await login(auth, 'alice', 'alicepw');
      const w = await kv(...put(`app/${f.id}/${i}`), token);
      assert.equal(w.err?.details, undefined, `${f.id}: a write with a token issued there just before (round ${i})`);
      const r = await kv(...get('app/seed', true), token);
      assert.equal(r.err?.details, undefined, `${f.id}: a serializable read with that token (round ${i})`);
    }
  }

  // A role revoked on the leader: alice's next write and linearizable read on every node are refused.
  const tokens = new Map<string, string>();
  for (const n of cluster.nodes) tokens.set(n.id, await login(rawClient(t, n.endpoint, 'etcdserverpb.Auth'), 'alice', 'alicepw'));
  await ctl('--user', 'root:rootpw', 'user', 'revoke-role', 'alice', 'app');
  for (const n of cluster.nodes) {
    const kv = rawClient(t, n.endpoint, 'etcdserverpb.KV');
    assert.equal((await kv(...put('app/after-revoke'), tokens.get(n.id)))?.err?.details, 'etcdserver: permission denied', `${n.id}: write after the revocation`);
    assert.equal((await kv(...get('app/seed'), tokens.get(n.id)))?.err?.details, 'etcdserver: permission denied', `${n.id}: linearizable read after the revocation`);
  }

  // A password change on the leader: every token of the user is invalid on every node at once.
  await ctl('--user', 'root:rootpw', 'user', 'grant-role', 'alice', 'app');
  for (const n of cluster.nodes) tokens.set(n.id, await login(rawClient(t, n.endpoint, 'etcdserverpb.Auth'), 'alice', 'alicepw'));
  const rootAuth = rawClient(t, leader.endpoint, 'etcdserverpb.Auth');
  const changed = await rootAuth('UserChangePassword', 'etcdserverpb.AuthUserChangePasswordRequest', { name: 'alice', password: 'newpw' }, await login(rootAuth, 'root', 'rootpw'));
  assert.ifError(changed.err);
  for (const n of cluster.nodes) {
    const kv = rawClient(t, n.endpoint, 'etcdserverpb.KV');
    assert.equal((await kv(...put('app/after-passwd'), tokens.get(n.id)))?.err?.details, 'etcdserver: invalid auth token', `${n.id}: write with a token from before the password change`);
  }

  // No password, hash or token in any node's log, at any level.
  for (const n of cluster.nodes) {
    const out = n.kvs.output();
    for (const secret of ['alicepw', 'rootpw', 'newpw', '$2b$', '$2a$', ...tokens.values()]) assert.ok(!out.includes(secret), `${n.id}'s log holds ${secret}`);
  }
});

test('users and roles changed through the leader are there on every follower at once: UserGet, RoleGet, UserList, a password change, Authenticate, and a write or a Lock after a grant (linearizable, as etcd)', { timeout: 240_000 }, async (t) => {
  const cluster = await startCluster(t, 3, { args: ['--bcrypt-cost', '4'] });
  const leader = await waitForLeader(cluster.nodes);
  const followers = cluster.nodes.filter((n) => n !== leader);
  const onLeader = rawClient(t, leader.endpoint, 'etcdserverpb.Auth');
  const onFollowers = followers.map((f) => ({ id: f.id, auth: rawClient(t, f.endpoint, 'etcdserverpb.Auth') }));
  const ok = async (p: ReturnType<typeof onLeader>, what: string) => {
    const r = await p;
    assert.equal(r.err?.details, undefined, what);
    return r;
  };
  // Auth disabled: etcd manages users and roles all the same. (Without the followers catching
  // up first, 40 rounds failed in 4 of 5 runs; 60 are run.)
  for (let i = 0; i < 60; i++) {
    await ok(onLeader('UserAdd', 'etcdserverpb.AuthUserAddRequest', { name: `u${i}`, password: 'pw' }), `UserAdd u${i}`);
    await ok(onLeader('RoleAdd', 'etcdserverpb.AuthRoleAddRequest', { name: `r${i}` }), `RoleAdd r${i}`);
    for (const f of onFollowers) {
      await ok(f.auth('UserGet', 'etcdserverpb.AuthUserGetRequest', { name: `u${i}` }), `UserGet u${i} on ${f.id}`);
      await ok(f.auth('RoleGet', 'etcdserverpb.AuthRoleGetRequest', { role: `r${i}` }), `RoleGet r${i} on ${f.id}`);
      const list = await ok(f.auth('UserList', 'etcdserverpb.AuthUserListRequest', {}), `UserList on ${f.id}`);
      assert.ok(decode<{ users: string[] }>('etcdserverpb.AuthUserListResponse', list.res!).users.includes(`u${i}`), `UserList on ${f.id} has u${i}`);
    }
    // A follower's gateway checks the user exists before it hashes the new password.
    const f = onFollowers[i % onFollowers.length]!;
    await ok(onLeader('UserAdd', 'etcdserverpb.AuthUserAddRequest', { name: `p${i}`, password: 'pw' }), `UserAdd p${i}`);
    await ok(f.auth('UserChangePassword', 'etcdserverpb.AuthUserChangePasswordRequest', { name: `p${i}`, password: 'pw2' }), `UserChangePassword p${i} on ${f.id}`);
  }
  // Auth enabled: a user added through the leader logs in through a follower at once.
  for (const [name, type, req] of [['UserAdd', 'AuthUserAddRequest', { name: 'root', password: 'rootpw' }], ['UserGrantRole', 'AuthUserGrantRoleRequest', { user: 'root', role: 'root' }], ['AuthEnable', 'AuthEnableRequest', {}]] as const) {
    await ok(onLeader(name, `etcdserverpb.${type}`, req), name);
  }
  // Then a permission granted through the leader counts for that user's writes, and Locks, on a
  // follower at once (etcd checks a write, and a Lock recipe's Txn, when it applies it).
  const root = await login(onLeader, 'root', 'rootpw');
  const kvs = followers.map((f) => rawClient(t, f.endpoint, 'etcdserverpb.KV'));
  const leases = followers.map((f) => rawClient(t, f.endpoint, 'etcdserverpb.Lease'));
  const locks = followers.map((f) => rawClient(t, f.endpoint, 'v3lockpb.Lock'));
  for (let i = 0; i < 50; i++) {
    await ok(onLeader('UserAdd', 'etcdserverpb.AuthUserAddRequest', { name: `a${i}`, password: `pw${i}` }, root), `UserAdd a${i}`);
    const tokens: string[] = [];
    const leaseIds: unknown[] = [];
    for (const [j, f] of onFollowers.entries()) {
      const r = await ok(f.auth('Authenticate', 'etcdserverpb.AuthenticateRequest', { name: `a${i}`, password: `pw${i}` }), `Authenticate a${i} on ${f.id}`);
      tokens.push(decode<{ token: string }>('etcdserverpb.AuthenticateResponse', r.res!).token);
      const l = await ok(leases[j]!('LeaseGrant', 'etcdserverpb.LeaseGrantRequest', { TTL: 60 }, tokens[j]), `LeaseGrant by a${i} on ${f.id}`);
      leaseIds.push(decode<{ ID: unknown }>('etcdserverpb.LeaseGrantResponse', l.res!).ID);
    }
    await ok(onLeader('RoleAdd', 'etcdserverpb.AuthRoleAddRequest', { name: `rw${i}` }, root), `RoleAdd rw${i}`);
    const perm = { permType: 2, key: Buffer.from(`w${i}/`), rangeEnd: Buffer.from(`w${i}0`) }; // READWRITE on the prefix
    await ok(onLeader('RoleGrantPermission', 'etcdserverpb.AuthRoleGrantPermissionRequest', { name: `rw${i}`, perm }, root), `RoleGrantPermission rw${i}`);
    await ok(onLeader('UserGrantRole', 'etcdserverpb.AuthUserGrantRoleRequest', { user: `a${i}`, role: `rw${i}` }, root), `UserGrantRole a${i}`);
    // Each follower's first request after the grant is a Put in even rounds, a Lock in odd ones.
    for (const [j, kv] of kvs.entries()) {
      const put = () => ok(kv('Put', 'etcdserverpb.PutRequest', { key: Buffer.from(`w${i}/k`), value: Buffer.from('v') }, tokens[j]), `Put by a${i} on ${followers[j]!.id} right after the grant`);
      const lock = () => ok(locks[j]!('Lock', 'v3lockpb.LockRequest', { name: Buffer.from(`w${i}/lock-${j}`), lease: leaseIds[j] }, tokens[j]), `Lock by a${i} on ${followers[j]!.id} right after the grant`);
      for (const step of i % 2 ? [lock, put] : [put, lock]) await step();
    }
  }
});
