// The `etcd3` npm client (1.1.2) over TLS against a kvs node with auth, beside a real etcd 3.4
// with the same certificate: password auth (`credentials: { rootCertificate }` with
// `auth: { username, password }`), users and roles managed through the client's own API,
// permissions of a non-root user, a token the server stops accepting (the client logs in again),
// and a denied watch. Each step's outcome (value, or error class and message) is recorded on
// both servers and the two records must be equal; what they show is then spelled out on kvs's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Etcd3, type IOptions } from 'etcd3';
import { TEST_CALL_OPTIONS, onCleanup, startEtcd, startKvs, type Ctx } from '../testkit/harness.js';
import { makeCa, type Ca } from '../testkit/certs.js';

/** A value, or the error's class and message: what a step did, comparable across servers. */
async function outcome(p: PromiseLike<unknown>): Promise<string> {
  try {
    const v = await p;
    // Response headers (cluster and member ids, raft term) differ between servers.
    return `ok ${JSON.stringify(v ?? null, (key, value) => (key === 'header' ? undefined : value))}`;
  } catch (err) {
    return `${(err as Error).constructor.name}: ${(err as Error).message}`;
  }
}

/** Resolves with `p`'s value, or with 'no answer' after `ms` (the promise is left pending). */
function within<T>(p: Promise<T>, ms: number): Promise<T | 'no answer'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<'no answer'>((resolve) => (timer = setTimeout(() => resolve('no answer'), ms)))]).finally(() => clearTimeout(timer));
}

/** The token metadata of every call the client makes (Authenticate excluded: the client makes it on a channel of its own). */
function tokenSpy(): { tokens: string[]; interceptor: grpc.Interceptor } {
  const tokens: string[] = [];
  const interceptor: grpc.Interceptor = (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        tokens.push(String(metadata.get('token')[0] ?? ''));
        next(metadata, listener);
      },
    });
  return { tokens, interceptor };
}

function etcd3(t: Ctx, endpoint: string, ca: Ca, extra: Partial<IOptions> = {}): Etcd3 {
  const c = new Etcd3({ hosts: `https://${endpoint}`, credentials: { rootCertificate: ca.clientTls().ca }, defaultCallOptions: TEST_CALL_OPTIONS, ...extra });
  onCleanup(t, () => c.close());
  return c;
}

/** The scenario on one server; returns each step's outcome by name. */
async function scenario(t: Ctx, endpoint: string, ca: Ca): Promise<Record<string, string>> {
  const o: Record<string, string> = {};
  const step = async (name: string, p: PromiseLike<unknown>) => {
    o[name] = await outcome(p);
  };
  const names = (xs: { name: string }[]) => xs.map((x) => x.name);

  // Bootstrap without auth: root, then auth enable, all through the client.
  const anon = etcd3(t, endpoint, ca);
  await step('root create', anon.user('root').create('rootpw').then(() => 'created'));
  await step('root addRole root', anon.user('root').addRole('root').then(() => 'granted'));
  await step('auth enable', anon.auth.authEnable().then(() => 'enabled'));
  await step('anonymous get', anon.get('app/x').string());

  const root = etcd3(t, endpoint, ca, { auth: { username: 'root', password: 'rootpw' } });
  await step('root put', root.put('pub/x').value('public').exec());
  await step('root put secret', root.put('secret/x').value('s').exec());
  // Roles and a user, through the client's API.
  for (const r of ['app', 'ro', 'wo']) await step(`role ${r} create`, root.role(r).create().then(() => r));
  await step('role create twice', root.role('app').create());
  await step('grant app readwrite app/', root.role('app').grant({ permission: 'Readwrite', range: root.range({ prefix: 'app/' }) }).then(() => 'granted'));
  await step('grant ro read pub/', root.role('ro').grant({ permission: 'Read', range: root.range({ prefix: 'pub/' }) }).then(() => 'granted'));
  await step('grant wo write drop/', root.role('wo').grant({ permission: 'Write', range: root.range({ prefix: 'drop/' }) }).then(() => 'granted'));
  await step('grant wo write one key', root.role('wo').grant({ permission: 'Write', key: 'single' }).then(() => 'granted'));
  await step('alice create', root.user('alice').create('alicepw').then(() => 'created'));
  await step('alice create twice', root.user('alice').create('other'));
  for (const r of ['app', 'ro', 'wo']) await step(`alice addRole ${r}`, root.user('alice').addRole(r).then(() => 'granted'));
  await step('addRole unknown role', root.user('alice').addRole('ghost'));
  await step('addRole unknown user', root.user('ghost').addRole('app'));
  await step('list users', root.getUsers().then(names));
  await step('list roles', root.getRoles().then(names));
  await step('alice roles', root.user('alice').roles().then(names));
  const perms = (role: string) => root.role(role).permissions().then((ps) => ps.map((p) => `${p.permission} ${p.range.start.toString()}..${p.range.end.toString()}`));
  await step('wo permissions', perms('wo'));
  await step('app permissions', perms('app'));

  // alice: what her roles allow, and what they do not.
  const spy = tokenSpy();
  const alice = etcd3(t, endpoint, ca, { auth: { username: 'alice', password: 'alicepw' }, grpcOptions: { interceptors: [spy.interceptor] } as IOptions['grpcOptions'] });
  await step('alice put app/1', alice.put('app/1').value('one').then(() => 'put'));
  await step('alice get app/1', alice.get('app/1').string());
  await step('alice prefix app/', alice.getAll().prefix('app/').strings());
  await step('alice get pub/x', alice.get('pub/x').string());
  await step('alice put pub/x', alice.put('pub/x').value('mine').exec());
  await step('alice put drop/1', alice.put('drop/1').value('d').then(() => 'put'));
  await step('alice get drop/1', alice.get('drop/1').string());
  await step('alice put single', alice.put('single').value('s').then(() => 'put'));
  await step('alice put single2', alice.put('single2').value('s').exec());
  await step('alice get secret/x', alice.get('secret/x').string());
  await step('alice whole key space', alice.getAll().strings());
  await step('alice delete app/1', alice.delete().key('app/1').then((r) => r.deleted));
  await step('alice txn', alice.if('app/1', 'Version', '==', 0).then(alice.put('app/2').value('2')).else(alice.get('pub/x')).commit().then((r) => r.succeeded));
  // Every branch is checked, the one not taken too.
  await step('alice txn, else branch denied', alice.if('app/1', 'Version', '==', 0).then(alice.put('app/2').value('2')).else(alice.get('secret/x')).commit().then((r) => r.succeeded));
  await step('alice txn denied', alice.if('secret/x', 'Version', '>', 0).then(alice.put('app/3').value('3')).commit().then((r) => r.succeeded));
  await step('alice list users', alice.getUsers().then(names));
  await step('alice create user', alice.user('mallory').create('pw'));
  await step('alice own roles', alice.user('alice').roles().then(names));
  await step('wrong password', etcd3(t, endpoint, ca, { auth: { username: 'alice', password: 'nope' } }).get('app/1').string());

  // A denied watch: created and canceled at once. The client rejects create() with the
  // cancel reason; a later watch on the same client, allowed or not, is then never sent (the
  // client's attach queue waits for a created answer to the denied one that never comes).
  await step('alice watch secret/ denied', alice.watch().prefix('secret/').create().then(() => 'created'));
  await step('alice watch app/ after a denied one', within(alice.watch().prefix('app/').create().then(() => 'created'), 3000));
  const alice2 = etcd3(t, endpoint, ca, { auth: { username: 'alice', password: 'alicepw' } });
  const w = await alice2.watch().prefix('app/').create();
  const event = new Promise<string>((resolve) => w.on('put', (kv) => resolve(`${kv.key.toString()}=${kv.value.toString()}`)));
  await root.put('app/w').value('seen');
  await step('allowed watch on a new client', within(event, 10_000));
  await w.cancel();

  // Revoking a permission counts from the next request.
  await step('revoke app readwrite app/', root.role('app').revoke({ permission: 'Readwrite', range: root.range({ prefix: 'app/' }) }).then(() => 'revoked'));
  await step('app permissions after revoke', perms('app'));
  await step('alice put app/1 after revoke', alice2.put('app/1').value('x').exec());
  await step('alice get pub/x after revoke', alice2.get('pub/x').string());
  await step('revoke twice', root.role('app').revoke({ permission: 'Readwrite', range: root.range({ prefix: 'app/' }) }));
  await step('regrant app', root.role('app').grant({ permission: 'Readwrite', range: root.range({ prefix: 'app/' }) }).then(() => 'granted'));

  // A token the server no longer accepts: alice's password set again (same password) drops
  // her tokens. The client's next call is sent with the old token, answered "invalid auth
  // token", and sent again with a new one.
  const before = spy.tokens.length;
  await step('alice setPassword same', root.user('alice').setPassword('alicepw').then(() => 'changed'));
  await step('alice get after password change', alice.get('app/w').string());
  const sent = spy.tokens.slice(before);
  o['tokens sent after password change'] = `${sent.length} calls, ${new Set(sent).size} tokens, first is the old one: ${sent[0] === spy.tokens[before - 1]}`;
  // Deleted and added again: the same.
  await step('alice delete', root.user('alice').delete().then(() => 'deleted'));
  await step('alice get once deleted', alice.get('app/w').string());
  await step('alice re-create', root.user('alice').create('alicepw').then(() => 'created'));
  await step('alice addRole app again', root.user('alice').addRole('app').then(() => 'granted'));
  await step('alice get after re-create', alice.get('app/w').string());
  // A new password: the client logs in again with the one it has, and fails.
  await step('alice setPassword new', root.user('alice').setPassword('alicepw2').then(() => 'changed'));
  await step('alice get after a new password', alice.get('app/w').string());

  await step('user delete', root.user('alice').delete().then(() => 'deleted'));
  await step('list users at the end', root.getUsers().then(names));
  await step('role delete', root.role('wo').delete().then(() => 'deleted'));
  await step('list roles at the end', root.getRoles().then(names));
  await step('root still served', root.get('pub/x').string());
  return o;
}

test('etcd3 client over TLS with auth: users, roles, permissions, a refused token and a denied watch, as with etcd', { timeout: 180_000 }, async (t) => {
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const [kvs, etcd] = await Promise.all([
    startKvs(t, { args: ['--client-tls-cert', server.cert, '--client-tls-key', server.key, '--auth-enabled', '--bcrypt-cost', '4'], probe: ca.clientTls() }),
    startEtcd(t, ['--bcrypt-cost', '4'], { tls: { cert: server.cert, key: server.key }, probe: ca.clientTls() }),
  ]);
  const k = await scenario(t, kvs.endpoint, ca);
  const e = await scenario(t, etcd.endpoint, ca);
  for (const name of new Set([...Object.keys(k), ...Object.keys(e)])) assert.equal(k[name], e[name], `${name}: kvs / etcd`);

  // What the record shows (etcd did the same).
  assert.equal(k['anonymous get'], 'GRPCInvalidArgumentError: 3 INVALID_ARGUMENT: etcdserver: user name is empty');
  assert.equal(k['alice get app/1'], 'ok "one"');
  assert.equal(k['alice get pub/x'], 'ok "public"');
  const DENIED = 'EtcdPermissionDeniedError: 7 PERMISSION_DENIED: etcdserver: permission denied';
  for (const s of ['alice put pub/x', 'alice get drop/1', 'alice put single2', 'alice get secret/x', 'alice whole key space', 'alice txn, else branch denied', 'alice txn denied', 'alice list users', 'alice create user', 'alice put app/1 after revoke']) {
    assert.equal(k[s], DENIED, s);
  }
  assert.equal(k['alice txn'], 'ok true');
  assert.equal(k['alice put drop/1'], 'ok "put"');
  assert.equal(k['alice put single'], 'ok "put"');
  assert.equal(k['alice get pub/x after revoke'], 'ok "public"');
  assert.equal(k['list users'], 'ok ["alice","root"]');
  assert.match(k['alice watch secret/ denied']!, /^EtcdPermissionDeniedError: Watcher canceled: .*etcdserver: permission denied$/);
  assert.equal(k['alice watch app/ after a denied one'], 'ok "no answer"');
  assert.equal(k['allowed watch on a new client'], 'ok "app/w=seen"');
  assert.equal(k['alice get after password change'], 'ok "seen"');
  assert.equal(k['tokens sent after password change'], '2 calls, 2 tokens, first is the old one: true');
  assert.equal(k['alice get once deleted'], 'EtcdAuthenticationFailedError: 3 INVALID_ARGUMENT: etcdserver: authentication failed, invalid user ID or password');
  assert.equal(k['alice get after re-create'], 'ok "seen"');
  assert.equal(k['alice get after a new password'], 'EtcdAuthenticationFailedError: 3 INVALID_ARGUMENT: etcdserver: authentication failed, invalid user ID or password');
  assert.equal(k['list users at the end'], 'ok ["root"]');
  assert.equal(k['root still served'], 'ok "public"');
});
