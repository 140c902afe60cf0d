// Auth on a three-node cluster: auth state goes through the leader's WAL like any write, so
// every node has it. A token issued through a follower works on that follower at once, and a
// revocation or password change made on the leader counts on every node at once for writes and
// linearizable reads. (The window these could fail in is narrow: a leader commits only once
// every connected follower has the entry, and a follower applies it on the commit notice that
// leaves with the answer. services/gateway/cluster.ts RoutedLink closes it; no test here makes
// it wide enough to show.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, waitForLeader } from './cluster.js';
import { etcdctl } from './harness.js';
import { login, rawClient } from './raw-client.js';

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
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['role', 'add', 'app'], ['role', 'grant-permission', 'app', 'readwrite', '--prefix', 'app/'], ['user', 'add', 'alice:alicepw'], ['user', 'grant-role', 'alice', 'app'], ['auth', 'enable']]) await ctl(...args);
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
