// Auth end to end on a kvs node: the etcd3 client's auth, tokens surviving restarts of the
// gateway, of storage (kill -9) and of the node, --auth-enabled at start, the lockout, a flood
// of failed logins, and auth state after disk loss and restore from the object store.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import { Etcd3 } from 'etcd3';
import { etcdctl, localObjectStore, onCleanup, pollUntil, startKvs, type KvsNode } from '../testkit/harness.js';
import { login, rawClient } from '../testkit/raw-client.js';

async function bootstrap(node: KvsNode): Promise<void> {
  const ctl = (...args: string[]) => etcdctl(node.endpoint, args);
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['role', 'add', 'app'], ['role', 'grant-permission', 'app', 'readwrite', '--prefix', 'app/'], ['user', 'add', 'alice:alicepw'], ['user', 'grant-role', 'alice', 'app'], ['auth', 'enable']]) {
    const r = await ctl(...args);
    assert.equal(r.exitCode, 0, `etcdctl ${args.join(' ')}: ${r.stderr}`);
  }
}


test('tokens survive restarts of the gateway, of storage (kill -9) and of the node; the etcd3 client authenticates', { timeout: 240_000 }, async (t) => {
  const node = await startKvs(t, { args: ['--auth-enabled', '--bcrypt-cost', '4'] });
  await bootstrap(node);
  const auth = rawClient(t, node.endpoint, 'etcdserverpb.Auth');
  const kv = rawClient(t, node.endpoint, 'etcdserverpb.KV');
  const token = await login(auth, 'alice', 'alicepw');
  const put = (key: string, tok?: string) => kv('Put', 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from('v') }, tok);
  assert.ifError((await put('app/1', token)).err);
  assert.equal((await put('other', token)).err?.details, 'etcdserver: permission denied');

  // The etcd3 npm client: password auth, and a denied key.
  const client = new Etcd3({ hosts: node.endpoint, auth: { username: 'alice', password: 'alicepw' } });
  onCleanup(t, () => client.close());
  await client.put('app/x').value('1');
  assert.equal(await client.get('app/x').string(), '1');
  await assert.rejects(client.put('nope').value('1').exec(), /permission denied/);

  const stillValid = async (what: string) => {
    const r = await pollUntil(`a put after ${what}`, async () => {
      const out = await put('app/2', token);
      return out.err?.code === grpc.status.UNAVAILABLE ? undefined : out;
    }, 30_000);
    assert.ifError(r.err);
  };
  assert.equal((await node.ctl(['restart', 'gateway'])).exitCode, 0);
  await stillValid('a gateway restart');
  const storagePid = Number((await node.ctl(['status'])).stdout.match(/storage\s+\S+\s+pid (\d+)/)?.[1] ?? 0);
  assert.ok(storagePid > 0, 'storage pid from kvs ctl status');
  process.kill(storagePid, 'SIGKILL');
  await stillValid('storage killed');
  await node.kill9();
  await node.restart();
  await stillValid('a node restart');
  // The client re-authenticates when told its token is invalid (here: after a password change
  // and back, its token is gone).
  await etcdctl(node.endpoint, ['--user', 'root:rootpw', 'user', 'passwd', 'alice', '--interactive=false'], { input: 'alicepw\n' });
  assert.equal((await put('app/3', token)).err?.details, 'etcdserver: invalid auth token');
  await client.put('app/y').value('2');
});

test('starting without --auth-enabled disables auth (warning); with it, auth is enforced again', { timeout: 120_000 }, async (t) => {
  const node = await startKvs(t, { args: ['--auth-enabled', '--bcrypt-cost', '4'] });
  await bootstrap(node);
  assert.equal((await etcdctl(node.endpoint, ['get', 'x'])).exitCode, 1);
  await node.stop();
  const off = await startKvs(t, { dataDir: node.dataDir, args: ['--bcrypt-cost', '4'] });
  await pollUntil('the warning', async () => (/auth is now DISABLED/.test(off.output()) ? true : undefined), 10_000);
  assert.equal((await etcdctl(off.endpoint, ['get', 'x'])).exitCode, 0);
  await off.stop();
  const on = await startKvs(t, { dataDir: node.dataDir, args: ['--auth-enabled', '--bcrypt-cost', '4'] });
  assert.match((await etcdctl(on.endpoint, ['get', 'x'])).stderr, /user name is empty/);
  assert.equal((await etcdctl(on.endpoint, ['--user', 'alice:alicepw', 'get', 'app/x'])).exitCode, 0);
});

test('writes made while auth was off do not let later writes past it once it is on', { timeout: 120_000 }, async (t) => {
  // The gateway checks writes against the auth state it last read while auth was off, without
  // reading it again (AuthGate.writeMeta); storage refuses those checked before auth came on.
  const node = await startKvs(t, { args: ['--auth-enabled', '--bcrypt-cost', '4'] });
  for (let i = 0; i < 3; i++) assert.equal((await etcdctl(node.endpoint, ['put', `app/before${i}`, 'v'])).exitCode, 0);
  await bootstrap(node);
  const anonymous = await etcdctl(node.endpoint, ['put', 'app/x', 'anonymous']);
  assert.notEqual(anonymous.exitCode, 0);
  assert.match(anonymous.stderr, /user name is empty/);
  assert.match((await etcdctl(node.endpoint, ['--user', 'alice:alicepw', 'put', 'other/x', 'v'])).stderr, /permission denied/);
  assert.equal((await etcdctl(node.endpoint, ['--user', 'alice:alicepw', 'put', 'app/x', 'alice'])).exitCode, 0);
  assert.equal((await etcdctl(node.endpoint, ['--user', 'root:rootpw', 'get', '--print-value-only', 'app/x'])).stdout.trim(), 'alice');
  assert.equal((await etcdctl(node.endpoint, ['--user', 'root:rootpw', 'get', '--print-value-only', 'other/x'])).stdout.trim(), '');
  // Off again: writes without a user go through at once.
  assert.equal((await etcdctl(node.endpoint, ['--user', 'root:rootpw', 'auth', 'disable'])).exitCode, 0);
  assert.equal((await etcdctl(node.endpoint, ['put', 'other/x', 'v'])).exitCode, 0);
});

test('lockout after 5 failures; 10,000 failed Authenticate calls leave the node serving others', { timeout: 240_000 }, async (t) => {
  const node = await startKvs(t, { args: ['--auth-enabled', '--bcrypt-cost', '4', '--metrics-addr', '127.0.0.1:0'] });
  await bootstrap(node);
  const auth = rawClient(t, node.endpoint, 'etcdserverpb.Auth');
  const kv = rawClient(t, node.endpoint, 'etcdserverpb.KV');
  const FAILED = 'etcdserver: authentication failed, invalid user ID or password';
  for (let i = 0; i < 5; i++) assert.equal((await auth('Authenticate', 'etcdserverpb.AuthenticateRequest', { name: 'alice', password: 'bad' })).err?.details, FAILED);
  // Locked: even the right password fails, without being checked.
  assert.equal((await auth('Authenticate', 'etcdserverpb.AuthenticateRequest', { name: 'alice', password: 'alicepw' })).err?.details, FAILED);
  // Others are not locked.
  const rootToken = await login(auth, 'root', 'rootpw');
  // A flood: wrong passwords and unknown names, while root keeps working.
  const started = Date.now();
  for (let batch = 0; batch < 100; batch++) {
    const calls = [];
    for (let i = 0; i < 100; i++) {
      const name = i % 2 ? `ghost-${batch}-${i}` : 'root';
      calls.push(auth('Authenticate', 'etcdserverpb.AuthenticateRequest', { name, password: `wrong-${i}` }));
    }
    for (const r of await Promise.all(calls)) assert.equal(r.err?.details, FAILED);
    if (batch % 10 === 0) {
      const r = await kv('Range', 'etcdserverpb.RangeRequest', { key: Buffer.from('app/') }, rootToken);
      assert.ifError(r.err);
    }
  }
  assert.ok(Date.now() - started < 200_000);
  // root's name is now locked too (its failures were consecutive), but its token still works.
  assert.ifError((await kv('Range', 'etcdserverpb.RangeRequest', { key: Buffer.from('x') }, rootToken)).err);
});

test('auth state (users, roles, enabled flag, tokens) survives disk loss: restored from the object store', { timeout: 240_000 }, async (t) => {
  const store = await localObjectStore(t);
  const node = await startKvs(t, { objectStore: store, args: ['--auth-enabled', '--bcrypt-cost', '4', '--checkpoint-interval', '2s'] });
  await bootstrap(node);
  const auth = rawClient(t, node.endpoint, 'etcdserverpb.Auth');
  const token = await login(auth, 'alice', 'alicepw');
  await new Promise((r) => setTimeout(r, 3000));
  await node.stop();
  await rm(node.dataDir, { recursive: true, force: true });
  const again = await startKvs(t, { objectStore: store, args: ['--auth-enabled', '--bcrypt-cost', '4'] });
  const kv = rawClient(t, again.endpoint, 'etcdserverpb.KV');
  assert.ifError((await kv('Put', 'etcdserverpb.PutRequest', { key: Buffer.from('app/after'), value: Buffer.from('v') }, token)).err);
  const r = await etcdctl(again.endpoint, ['--user', 'root:rootpw', 'role', 'get', 'app']);
  assert.match(r.stdout, /app\//);
  assert.match((await etcdctl(again.endpoint, ['get', 'x'])).stderr, /user name is empty/);
});
