import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { createSecretKey, generateKeyPairSync } from 'node:crypto';
import { SignJWT } from 'jose';
import { createLogger } from '../../../shared/log.js';
import type { JwtKeys } from '../../../shared/auth/token-options.js';
import { JwtTokens, verifiedFirst, verifyOnlyError } from './jwt.js';

const log = createLogger('test', 'silent', 'json');
const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const otherEc = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const ES256: JwtKeys = { alg: 'ES256', signKey: ec.privateKey, verifyKey: ec.publicKey, ttlMs: 300_000 };

class FakeCall extends EventEmitter {
  cancelled = false;
  isFinished = false;
  failed: unknown;
  constructor(private readonly token?: string) {
    super();
  }
  metadata = { get: (k: string) => (k === 'token' && this.token !== undefined ? [this.token] : []) };
  fail(err: unknown): void {
    this.failed = err;
  }
}

function decodePart(token: string, i: number): string {
  return Buffer.from(token.split('.')[i]!, 'base64url').toString();
}

/** A clock the test moves. */
function clock(start = Date.UTC(2030, 0, 1)) {
  let now = start;
  return { now: () => now, set: (ms: number) => (now = ms) };
}

/** The claims the gateway would see for `token`, verifying it first if needed. */
async function claimsOf(jwt: JwtTokens, token: string) {
  const call = new FakeCall(token);
  await jwt.prepare(call);
  return jwt.claims(call, token);
}

test('tokens as etcd issues them: {"alg","typ":"JWT"}, claims exp, revision, username; exp = now + ttl in seconds', async () => {
  const c = clock(Date.UTC(2030, 0, 1, 0, 0, 0, 700));
  const jwt = new JwtTokens(ES256, log, { now: c.now });
  const token = await jwt.sign('alice', 7);
  assert.equal(decodePart(token, 0), '{"alg":"ES256","typ":"JWT"}');
  const exp = Math.floor(Date.UTC(2030, 0, 1, 0, 5, 0, 700) / 1000);
  assert.equal(decodePart(token, 1), `{"exp":${exp},"revision":7,"username":"alice"}`);
  assert.deepEqual(await claimsOf(jwt, token), { username: 'alice', revision: 7, exp, nbf: undefined, iat: undefined });
});

test('verification is remembered per token; expiry is checked at every use (valid through the exp second, as etcd 3.4)', async () => {
  const c = clock();
  const jwt = new JwtTokens(ES256, log, { now: c.now });
  const token = await jwt.sign('alice', 3);
  const exp = JSON.parse(decodePart(token, 1)).exp as number;
  const first = new FakeCall(token);
  const pending = jwt.prepare(first);
  assert.ok(pending, 'a new token is verified before use');
  // Several calls with the same token wait for one verification.
  const second = new FakeCall(token);
  assert.ok(jwt.prepare(second));
  await pending;
  assert.equal(jwt.claims(first, token)?.username, 'alice');
  assert.equal(jwt.prepare(new FakeCall(token)), undefined, 'known now');
  c.set(exp * 1000 + 999);
  assert.equal(jwt.claims(first, token)?.username, 'alice', 'still valid within its exp second');
  c.set((exp + 1) * 1000);
  assert.equal(jwt.claims(first, token), undefined, 'expired');
  // Verified only once it expired: refused.
  assert.equal(await claimsOf(new JwtTokens(ES256, log, { now: c.now }), token), undefined);
});

test('refused: another key, another method, alg confusion, missing claims, garbage; a token without exp is accepted, as by etcd', async () => {
  const c = clock();
  const jwt = new JwtTokens(ES256, log, { now: c.now });
  const exp = Math.floor(c.now() / 1000) + 60;
  const sign = (claims: object, key: Parameters<SignJWT['sign']>[0], alg = 'ES256') => new SignJWT(claims as never).setProtectedHeader({ alg, typ: 'JWT' }).sign(key);
  const foreign = await sign({ exp, revision: 1, username: 'root' }, otherEc.privateKey);
  assert.equal(await claimsOf(jwt, foreign), undefined);
  assert.equal(await claimsOf(jwt, await sign({ exp, revision: 1, username: 'root' }, rsa.privateKey, 'RS256')), undefined);
  // HS256 with the public key's bytes as the secret: the classic confusion, refused by the method check.
  const pubPem = ec.publicKey.export({ type: 'spki', format: 'pem' });
  assert.equal(await claimsOf(jwt, await sign({ exp, revision: 1, username: 'root' }, createSecretKey(Buffer.from(pubPem)), 'HS256')), undefined);
  assert.equal(await claimsOf(jwt, await sign({ exp, revision: 1 }, ec.privateKey)), undefined);
  assert.equal(await claimsOf(jwt, await sign({ exp, revision: '1', username: 'root' }, ec.privateKey)), undefined);
  assert.equal(await claimsOf(jwt, await sign({ exp, username: 'root' }, ec.privateKey)), undefined);
  assert.equal(await claimsOf(jwt, 'abc.def.ghi'), undefined);
  assert.equal(await claimsOf(jwt, 'AbCdEfGhIjKlMnOp.12'), undefined, 'a simple token');
  assert.equal((await claimsOf(jwt, await sign({ revision: 2, username: 'bob' }, ec.privateKey)))?.username, 'bob');
});

test('a token not valid yet (nbf) is not remembered as refused: it is accepted once its time comes', async () => {
  const c = clock();
  const jwt = new JwtTokens(ES256, log, { now: c.now });
  const nbf = Math.floor(c.now() / 1000) + 30;
  const token = await new SignJWT({ nbf, revision: 2, username: 'bob' }).setProtectedHeader({ alg: 'ES256' }).sign(ec.privateKey);
  assert.equal(await claimsOf(jwt, token), undefined);
  c.set(nbf * 1000);
  assert.equal((await claimsOf(jwt, token))?.username, 'bob');
});

test('HS256: the shared secret signs and verifies', async () => {
  const secret = createSecretKey(Buffer.from('shared secret\n'));
  const jwt = new JwtTokens({ alg: 'HS256', signKey: secret, verifyKey: secret, ttlMs: 60_000 }, log);
  const token = await jwt.sign('carol', 4);
  assert.equal(decodePart(token, 0), '{"alg":"HS256","typ":"JWT"}');
  assert.equal((await claimsOf(jwt, token))?.revision, 4);
});

test('pub-key only: tokens are verified, never issued (etcd\'s verify-only error)', async () => {
  const issuer = new JwtTokens(ES256, log);
  const verifier = new JwtTokens({ alg: 'ES256', verifyKey: ec.publicKey, ttlMs: 300_000 }, log);
  await assert.rejects(verifier.sign('alice', 1), (err) => err === verifyOnlyError);
  assert.equal(verifyOnlyError.message, 'auth: token signing attempted with verify-only key');
  assert.equal((await claimsOf(verifier, await issuer.sign('alice', 5)))?.revision, 5);
});

test('verifiedFirst: the handler starts once the token is verified; a stream\'s messages meanwhile are held, in order', async () => {
  const jwt = new JwtTokens(ES256, log);
  const token = await jwt.sign('alice', 1);
  const seen: string[] = [];
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  const impl = verifiedFirst(jwt, {
    Watch(call: FakeCall) {
      seen.push(`start:${jwt.claims(call, token)?.username}`);
      call.on('data', (m: string) => seen.push(m));
      call.on('end', () => {
        seen.push('end');
        resolveDone();
      });
    },
  });
  const call = new FakeCall(token);
  impl.Watch(call);
  assert.deepEqual(seen, [], 'not started before verification');
  call.emit('data', 'a');
  call.emit('data', 'b');
  call.emit('end');
  await done;
  assert.deepEqual(seen, ['start:alice', 'a', 'b', 'end']);
  // Known token: straight through.
  const again = new FakeCall(token);
  let started = false;
  verifiedFirst(jwt, { Range: (_c: FakeCall) => (started = true) }).Range(again);
  assert.ok(started);
  // No token: straight through.
  started = false;
  verifiedFirst(jwt, { Range: (_c: FakeCall) => (started = true) }).Range(new FakeCall());
  assert.ok(started);
});

test('verifiedFirst: a call cancelled while its token is verified is not handed over; a throwing handler fails its call', async () => {
  const jwt = new JwtTokens(ES256, log);
  let ran = 0;
  const cancelled = new FakeCall(await jwt.sign('a', 1));
  verifiedFirst(jwt, { Range: (_c: FakeCall) => void ran++ }).Range(cancelled);
  cancelled.cancelled = true;
  await jwt.prepare(cancelled);
  await new Promise((r) => setImmediate(r));
  assert.equal(ran, 0);
  const throwing = new FakeCall(await jwt.sign('b', 1));
  verifiedFirst(jwt, {
    Range: (_c: FakeCall) => {
      throw new Error('boom');
    },
  }).Range(throwing);
  await jwt.prepare(throwing);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(throwing.failed, { code: 2, details: 'kvs: boom' });
});
