// The username lockout (the spec's "Username lockout"; services/gateway/auth/lockout.ts) on a
// running node whose wall clock the test moves (libfaketime, integration/fake-clock.ts): 5
// consecutive failed Authenticate calls of one name within 5 minutes lock it for 15 minutes;
// while locked even the right password is refused, without being checked; then it opens. Every
// outcome is counted in kvs_auth_attempts_total{result}, read from --metrics-addr.
//
// etcd 3.4 has no lockout. Where the spec is silent kvs answers as etcd answers a wrong
// password (same code and text, compared below with a real etcd), so clients cannot tell a
// locked name from a bad password.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { encode, service } from '../shared/proto/index.js';
import { etcdctl, freePort, onCleanup, startEtcd, startKvs, type Ctx } from '../testkit/harness.js';
import { fakeClock } from './fake-clock.js';

const FAILED = 'etcdserver: authentication failed, invalid user ID or password';

type Outcome = { code?: grpc.status; details?: string };

/** Authenticate(name, password) on `endpoint`: undefined on success, else the error. */
function authenticator(t: Ctx, endpoint: string) {
  const def = service('etcdserverpb.Auth');
  for (const m of Object.values(def)) {
    m.requestSerialize = (b: unknown) => b as Buffer;
    m.responseDeserialize = (b: Buffer) => b;
  }
  const Ctor = grpc.makeGenericClientConstructor(def, 'Auth');
  const c = new Ctor(endpoint, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<string, Function>;
  onCleanup(t, () => c.close());
  return (name: string, password: string): Promise<Outcome | undefined> =>
    new Promise((resolve) =>
      c.Authenticate!(encode('etcdserverpb.AuthenticateRequest', { name, password }), new grpc.Metadata(), { deadline: Date.now() + 20_000 }, (err: grpc.ServiceError | null) =>
        resolve(err ? { code: err.code, details: err.details } : undefined),
      ),
    );
}

async function bootstrap(endpoint: string): Promise<void> {
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['user', 'add', 'alice:alicepw'], ['auth', 'enable']]) {
    const r = await etcdctl(endpoint, args);
    assert.equal(r.exitCode, 0, `etcdctl ${args.join(' ')}: ${r.stderr}`);
  }
}

async function attempts(metricsAddr: string): Promise<{ success: number; fail: number; locked: number }> {
  const text = await (await fetch(`http://${metricsAddr}/metrics`)).text();
  const get = (result: string) => {
    const m = new RegExp(`^kvs_auth_attempts_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(text);
    assert.ok(m, `kvs_auth_attempts_total{result="${result}"} in /metrics`);
    return Number(m[1]);
  };
  return { success: get('success'), fail: get('fail'), locked: get('locked') };
}

test('lockout on a running node with a moved clock: 5 failures in 5 minutes lock for 15 minutes, counted by outcome', { timeout: 180_000 }, async (t) => {
  // etcd's answer to a wrong password: what a locked name gets too.
  const etcd = await startEtcd(t);
  await bootstrap(etcd.endpoint);
  const etcdWrong = await authenticator(t, etcd.endpoint)('alice', 'bad');
  assert.deepEqual(etcdWrong, { code: grpc.status.INVALID_ARGUMENT, details: FAILED });

  const clock = await fakeClock(t);
  const metricsAddr = `127.0.0.1:${await freePort()}`;
  const node = await startKvs(t, { env: clock.env, args: ['--auth-enabled', '--bcrypt-cost', '4', '--metrics-addr', metricsAddr] });
  await bootstrap(node.endpoint);
  const auth = authenticator(t, node.endpoint);
  const want = { success: 0, fail: 0, locked: 0 };
  const wrong = async (what: string) => {
    assert.deepEqual(await auth('alice', 'bad'), etcdWrong, what);
    want.fail++;
  };
  const opens = async (what: string) => {
    assert.equal(await auth('alice', 'alicepw'), undefined, `${what}: the right password is accepted`);
    want.success++;
  };
  const lockedOut = async (what: string, password = 'alicepw') => {
    assert.deepEqual(await auth('alice', password), etcdWrong, `${what}: refused as a wrong password is`);
    want.locked++;
  };
  const counted = async (what: string) => assert.deepEqual(await attempts(metricsAddr), want, `kvs_auth_attempts_total ${what}`);

  // Failures older than 5 minutes do not count: 4, then a 5th 5 minutes and 1 s later.
  for (let i = 0; i < 4; i++) await wrong(`failure ${i + 1}`);
  clock.advance(301);
  await wrong('a failure 5 min 1 s after the first four');
  await opens('1 failure within the window');
  await counted('after failures spread over more than 5 minutes');

  // Consecutive: a success starts the count again.
  for (let i = 0; i < 4; i++) await wrong('before a success');
  await opens('4 failures');
  for (let i = 0; i < 4; i++) await wrong('after a success');
  await opens('4 failures after a success');
  await counted('after runs broken by successes');

  // 5 failures spread over 4 min 40 s: locked.
  for (let i = 0; i < 5; i++) {
    if (i) clock.advance(70);
    await wrong(`spread failure ${i + 1}`);
  }
  const lockedAt = clock.offsetSec;
  await lockedOut('just locked');
  await lockedOut('just locked, a wrong password', 'bad');
  await counted('when locked: the right password is counted locked, not success nor fail');
  // The lock is the name's: root logs in.
  assert.equal(await auth('root', 'rootpw'), undefined);
  want.success++;

  // Still locked after 14 min 30 s; open at 15 min, and a fresh start then.
  clock.advance(lockedAt + 14 * 60 + 30 - clock.offsetSec);
  await lockedOut('after 14 min 30 s');
  clock.advance(lockedAt + 15 * 60 - clock.offsetSec);
  await opens('15 minutes after the lock');
  await wrong('a failure after the lock ran out');
  await opens('a single failure after the lock ran out');
  await counted('at the end');

  // The lockout state is in memory: a node restart opens a locked name.
  for (let i = 0; i < 5; i++) await wrong('locking again');
  await lockedOut('locked again');
  await node.restart();
  assert.equal(await authenticator(t, node.endpoint)('alice', 'alicepw'), undefined, 'open after a node restart');
  assert.deepEqual(await attempts(metricsAddr), { success: 1, fail: 0, locked: 0 }, 'a restarted gateway counts from zero');
});
