// Simple tokens' lifetime (--token-ttl; etcd's --auth-token-ttl), beside a real etcd 3.4 with
// the same TTL: an idle token is refused ("invalid auth token") about TTL seconds after its
// login, and a token in steady use keeps working well beyond the TTL (kvs renews a token used
// in the second half of its life; etcd resets its timer at every use). Raw gRPC calls with a
// fixed `token` metadata, so that no client logs in again by itself.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { etcdctl, startEtcd, startKvs, type Ctx } from '../testkit/harness.js';
import { login, rawClient } from '../testkit/raw-client.js';

const TTL_S = 2;
const INVALID = 'etcdserver: invalid auth token';

/** Authenticate and Range on one server, requests and answers as bytes, with a token of the caller's. */
function rawCalls(t: Ctx, endpoint: string) {
  const auth = rawClient(t, endpoint, 'etcdserverpb.Auth');
  const kv = rawClient(t, endpoint, 'etcdserverpb.KV');
  return {
    login: (): Promise<string> => login(auth, 'alice', 'alicepw'),
    /** A Range of app/x with `token`: 'ok', or the error's details. */
    async read(token: string): Promise<string> {
      const { err } = await kv('Range', 'etcdserverpb.RangeRequest', { key: Buffer.from('app/x') }, token);
      return err ? (err.details ?? err.message) : 'ok';
    },
  };
}

async function bootstrap(name: string, endpoint: string): Promise<void> {
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['role', 'add', 'app'], ['role', 'grant-permission', 'app', 'read', '--prefix', 'app/'], ['user', 'add', 'alice:alicepw'], ['user', 'grant-role', 'alice', 'app'], ['auth', 'enable']]) {
    const r = await etcdctl(endpoint, args);
    assert.equal(r.exitCode, 0, `${name}: etcdctl ${args.join(' ')}: ${r.stderr}`);
  }
}

/**
 * When idle tokens stop working: many tokens are issued at once, then each probe uses a token
 * not used before (a use would renew it), until one is refused. Times in ms since the logins
 * began.
 */
async function idleExpiry(calls: ReturnType<typeof rawCalls>): Promise<{ lastOkMs: number; firstRefusedMs: number; refusal: string }> {
  const issued = Date.now();
  const tokens = await Promise.all(Array.from({ length: 60 }, () => calls.login()));
  assert.ok(Date.now() - issued < 1000, `60 logins took ${Date.now() - issued} ms`);
  let lastOkMs = -1;
  for (const token of tokens) {
    const at = Date.now();
    const r = await calls.read(token);
    if (r !== 'ok') return { lastOkMs, firstRefusedMs: at - issued, refusal: r };
    lastOkMs = at - issued;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`60 idle tokens still valid ${Date.now() - issued} ms after their logins`);
}

/** Uses one token every 100 ms for `ms`; the answers that were not 'ok', with when (ms since login). */
async function steadyUse(calls: ReturnType<typeof rawCalls>, ms: number): Promise<string[]> {
  const token = await calls.login();
  const start = Date.now();
  const failures: string[] = [];
  while (Date.now() - start < ms) {
    const r = await calls.read(token);
    if (r !== 'ok') failures.push(`${Date.now() - start} ms: ${r}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return failures;
}

test(`--token-ttl ${TTL_S}: an idle token is refused after about ${TTL_S} s, a token in steady use keeps working, as etcd's --auth-token-ttl`, { timeout: 120_000 }, async (t) => {
  const [kvs, etcd] = await Promise.all([
    startKvs(t, { args: ['--auth-enabled', '--bcrypt-cost', '4', '--token-ttl', String(TTL_S)] }),
    startEtcd(t, ['--bcrypt-cost', '4', '--auth-token', 'simple', '--auth-token-ttl', String(TTL_S)]),
  ]);
  for (const [name, endpoint] of [['kvs', kvs.endpoint], ['etcd', etcd.endpoint]] as const) {
    await bootstrap(name, endpoint);
    const calls = rawCalls(t, endpoint);

    const idle = await idleExpiry(calls);
    t.diagnostic(`${name}: idle tokens: last one valid ${idle.lastOkMs} ms after the logins, first refused ${idle.firstRefusedMs} ms after them`);
    assert.equal(idle.refusal, INVALID, name);
    // Valid for the TTL (the last probe that passed was at least 1.5 s in), refused within
    // TTL + 1.5 s (etcd drops expired tokens once a second).
    assert.ok(idle.lastOkMs >= TTL_S * 1000 - 500, `${name}: an idle token refused early: ${JSON.stringify(idle)}`);
    assert.ok(idle.firstRefusedMs <= TTL_S * 1000 + 1500, `${name}: an idle token still valid late: ${JSON.stringify(idle)}`);

    const failures = await steadyUse(calls, TTL_S * 3000);
    assert.deepEqual(failures, [], `${name}: a token used every 100 ms for ${TTL_S * 3} s was refused`);

    // Used once, late in its life (0.4 s left): that use extends it (kvs: the renewal is sent
    // within half the remaining life, not after the usual batching second).
    const late = await calls.login();
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    await sleep(TTL_S * 1000 - 400);
    assert.equal(await calls.read(late), 'ok', `${name}: the late use`);
    await sleep(800);
    assert.equal(await calls.read(late), 'ok', `${name}: ${TTL_S * 1000 + 400} ms after the login, 800 ms after the late use`);
  }
});
