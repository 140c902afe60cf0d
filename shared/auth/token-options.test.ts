import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { formatAuthToken, loadJwtKeys, parseAuthToken, parseGoDuration, type JwtTokenOptions } from './token-options.js';
import { configArgs, resolveConfig } from '../config.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'kvs-token-options-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

function write(name: string, content: string | Buffer): string {
  const file = path.join(dir, name);
  writeFileSync(file, content);
  return file;
}
const pem = (k: KeyObject, type: 'pkcs8' | 'spki' | 'pkcs1' | 'sec1') => k.export({ type, format: 'pem' } as never) as string;

const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const rsa2 = generateKeyPairSync('rsa', { modulusLength: 2048 });
const rsaSmall = generateKeyPairSync('rsa', { modulusLength: 1024 });
const p256 = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const p384 = generateKeyPairSync('ec', { namedCurve: 'P-384' });
const ed = generateKeyPairSync('ed25519');
const files = {
  rsaKey: write('rsa.key', pem(rsa.privateKey, 'pkcs8')),
  rsaPkcs1: write('rsa1.key', pem(rsa.privateKey, 'pkcs1')),
  rsaPub: write('rsa.pub', pem(rsa.publicKey, 'spki')),
  rsa2Pub: write('rsa2.pub', pem(rsa2.publicKey, 'spki')),
  rsaSmall: write('rsa-small.key', pem(rsaSmall.privateKey, 'pkcs8')),
  ecKey: write('ec.key', pem(p256.privateKey, 'sec1')),
  ecPub: write('ec.pub', pem(p256.publicKey, 'spki')),
  ec384: write('ec384.key', pem(p384.privateKey, 'pkcs8')),
  edKey: write('ed.key', pem(ed.privateKey, 'pkcs8')),
  secret: write('secret', 'not so secret\n'),
  empty: write('empty', ''),
  garbage: write('garbage', 'hello\n'),
};

test('--auth-token values in etcd\'s syntax: type, options, ttl (default 5m), paths made absolute', () => {
  assert.deepEqual(parseAuthToken('simple'), { type: 'simple' });
  assert.deepEqual(parseAuthToken('jwt,pub-key=k.pub,priv-key=k.key,sign-method=RS256,ttl=10s'), {
    type: 'jwt', signMethod: 'RS256', privKey: path.resolve('k.key'), pubKey: path.resolve('k.pub'), ttl: '10s', ttlMs: 10_000,
  });
  const es = parseAuthToken('jwt,sign-method=ES256,pub-key=/x/y.pub') as JwtTokenOptions;
  assert.equal(es.ttlMs, 300_000);
  assert.equal(es.privKey, undefined);
  assert.equal(formatAuthToken(es), 'jwt,sign-method=ES256,pub-key=/x/y.pub,ttl=5m');
  // What components are started with parses to the same options.
  const rs = parseAuthToken('jwt,priv-key=a.key,sign-method=PS512,ttl=1h30m');
  assert.deepEqual(parseAuthToken(formatAuthToken(rs)), rs);
  assert.equal((rs as JwtTokenOptions).ttlMs, 5_400_000);
});

test('malformed --auth-token values are refused with one line naming the problem', () => {
  const refused: [string, RegExp][] = [
    ['', /^Error: --auth-token must be simple or jwt,sign-method=\.\.\.,priv-key=\.\.\..*got ""$/],
    ['bogus', /^Error: --auth-token must be simple or jwt.*got "bogus"$/],
    ['JWT,sign-method=RS256,priv-key=k', /^Error: --auth-token must be simple or jwt/],
    ['simple,ttl=5m', /^Error: --auth-token simple: simple tokens take no options/],
    ['jwt', /^Error: --auth-token jwt: sign-method is missing \(one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, HS256, HS384, HS512\)$/],
    ['jwt,priv-key=k', /^Error: --auth-token jwt: sign-method is missing/],
    ['jwt,sign-method=XX256,priv-key=k', /^Error: --auth-token jwt: sign-method XX256 is not supported/],
    ['jwt,sign-method=EdDSA,priv-key=k', /^Error: --auth-token jwt: sign-method EdDSA is not supported/],
    ['jwt,sign-method=none,priv-key=k', /^Error: --auth-token jwt: sign-method none is not supported/],
    ['jwt,sign-method=RS256', /^Error: --auth-token jwt: needs priv-key \(to issue and verify tokens\) or pub-key \(to verify only\)$/],
    ['jwt,sign-method=HS256', /^Error: --auth-token jwt: sign-method HS256 needs priv-key, the file holding the shared secret$/],
    ['jwt,sign-method=HS256,priv-key=s,pub-key=p', /^Error: --auth-token jwt: sign-method HS256 uses priv-key \(the shared secret\) only/],
    ['jwt,sign-method=RS256,priv-key', /^Error: --auth-token jwt: "priv-key" is not name=value$/],
    ['jwt,sign-method=RS256,priv-key=a=b', /^Error: --auth-token jwt: "priv-key=a=b" is not name=value$/],
    ['jwt,sign-method=RS256,priv-key=', /^Error: --auth-token jwt: priv-key is empty$/],
    ['jwt,sign-method=RS256,,priv-key=k', /^Error: --auth-token jwt: "" is not name=value$/],
    ['jwt,sign-method=RS256,priv-key=k,priv_key=k', /^Error: --auth-token jwt: unknown option "priv_key" \(known: sign-method, priv-key, pub-key, ttl\)$/],
    ['jwt,sign-method=RS256,priv-key=k,sign-method=ES256', /^Error: --auth-token jwt: sign-method is given twice$/],
    ['jwt,sign-method=RS256,priv-key=k,ttl=abc', /^Error: --auth-token jwt: ttl "abc" is not a duration such as 5m, 300s or 1h30m$/],
    ['jwt,sign-method=RS256,priv-key=k,ttl=5', /^Error: --auth-token jwt: ttl "5" is not a duration/],
    ['jwt,sign-method=RS256,priv-key=k,ttl=-5s', /^Error: --auth-token jwt: ttl "-5s" is not a duration/],
    ['jwt,sign-method=RS256,priv-key=k,ttl=0', /^Error: --auth-token jwt: ttl 0 is too short/],
    ['jwt,sign-method=RS256,priv-key=k,ttl=500ms', /^Error: --auth-token jwt: ttl 500ms is too short: tokens carry their expiry in whole seconds \(at least 1s\)$/],
  ];
  for (const [value, expected] of refused) assert.throws(() => parseAuthToken(value), expected, value);
});

test('Go durations, as etcd\'s ttl takes them', () => {
  assert.equal(parseGoDuration('5m'), 300_000);
  assert.equal(parseGoDuration('1h30m'), 5_400_000);
  assert.equal(parseGoDuration('1.5s'), 1500);
  assert.equal(parseGoDuration('.5s'), 500);
  assert.equal(parseGoDuration('2s500ms'), 2500);
  assert.equal(parseGoDuration('1000000us'), 1000);
  assert.equal(parseGoDuration('0'), 0);
  for (const bad of ['', '5', 'm', '5 m', '5mm', '1d', '-1s', '+1s', 's5']) assert.equal(parseGoDuration(bad), undefined, bad);
});

const keys = (value: string) => loadJwtKeys(parseAuthToken(value) as JwtTokenOptions);

test('key files: each method\'s kind of key loads; priv-key alone signs and verifies, pub-key alone verifies', () => {
  const rs = keys(`jwt,sign-method=RS256,priv-key=${files.rsaKey},pub-key=${files.rsaPub}`);
  assert.equal(rs.alg, 'RS256');
  assert.equal(rs.signKey?.type, 'private');
  assert.equal(rs.verifyKey.type, 'public');
  assert.equal(keys(`jwt,sign-method=PS384,priv-key=${files.rsaPkcs1}`).verifyKey.asymmetricKeyType, 'rsa');
  const verifyOnly = keys(`jwt,sign-method=RS512,pub-key=${files.rsaPub}`);
  assert.equal(verifyOnly.signKey, undefined);
  assert.equal(verifyOnly.verifyKey.type, 'public');
  assert.equal(keys(`jwt,sign-method=ES256,priv-key=${files.ecKey},pub-key=${files.ecPub}`).signKey?.asymmetricKeyType, 'ec');
  assert.equal(keys(`jwt,sign-method=ES384,priv-key=${files.ec384}`).alg, 'ES384');
  const hs = keys(`jwt,sign-method=HS256,priv-key=${files.secret}`);
  assert.equal(hs.signKey?.type, 'secret');
  assert.equal(hs.signKey, hs.verifyKey);
  assert.equal(hs.signKey!.export().toString(), 'not so secret\n'); // the file's bytes, as etcd
  assert.equal(keys(`jwt,sign-method=RS256,priv-key=${files.rsaKey},ttl=2m`).ttlMs, 120_000);
});

test('key files that cannot serve the method are refused at start, naming the option and file', () => {
  const missing = path.join(dir, 'missing.key');
  const refused: [string, RegExp][] = [
    [`jwt,sign-method=RS256,priv-key=${missing}`, /^Error: --auth-token jwt: priv-key \S+missing\.key: cannot read it: ENOENT$/],
    [`jwt,sign-method=RS256,pub-key=${missing}`, /^Error: --auth-token jwt: pub-key \S+missing\.key: cannot read it: ENOENT$/],
    [`jwt,sign-method=RS256,priv-key=${files.garbage}`, /^Error: --auth-token jwt: priv-key \S+garbage: not a PEM private key \(/],
    [`jwt,sign-method=RS256,pub-key=${files.garbage}`, /^Error: --auth-token jwt: pub-key \S+garbage: not a PEM public key or certificate \(/],
    [`jwt,sign-method=RS256,pub-key=${files.rsaKey}`, /^Error: --auth-token jwt: pub-key \S+rsa\.key holds a private key: give it as priv-key$/],
    [`jwt,sign-method=ES256,priv-key=${files.rsaKey}`, /^Error: --auth-token jwt: sign-method ES256 needs an EC P-256 key; priv-key \S+rsa\.key is an RSA key$/],
    [`jwt,sign-method=ES256,priv-key=${files.ec384}`, /^Error: --auth-token jwt: sign-method ES256 needs an EC P-256 key; priv-key \S+ec384\.key is an EC key on P-384$/],
    [`jwt,sign-method=ES512,pub-key=${files.ecPub}`, /^Error: --auth-token jwt: sign-method ES512 needs an EC P-521 key; pub-key \S+ec\.pub is an EC key on P-256$/],
    [`jwt,sign-method=RS256,priv-key=${files.ecKey}`, /^Error: --auth-token jwt: sign-method RS256 needs an RSA key; priv-key \S+ec\.key is an EC key on P-256$/],
    [`jwt,sign-method=PS256,priv-key=${files.edKey}`, /^Error: --auth-token jwt: sign-method PS256 needs an RSA key; priv-key \S+ed\.key is a key of type ed25519$/],
    [`jwt,sign-method=RS256,priv-key=${files.rsaSmall}`, /^Error: --auth-token jwt: sign-method RS256 needs an RSA key of at least 2048 bits; priv-key \S+rsa-small\.key has 1024$/],
    [`jwt,sign-method=RS256,priv-key=${files.rsaKey},pub-key=${files.rsa2Pub}`, /^Error: --auth-token jwt: pub-key \S+rsa2\.pub is not the public key of priv-key \S+rsa\.key$/],
    [`jwt,sign-method=RS256,priv-key=${files.rsaKey},pub-key=${files.ecPub}`, /^Error: --auth-token jwt: sign-method RS256 needs an RSA key; pub-key \S+ec\.pub is an EC key on P-256$/],
    [`jwt,sign-method=HS512,priv-key=${files.empty}`, /^Error: --auth-token jwt: priv-key \S+empty is empty$/],
  ];
  for (const [value, expected] of refused) assert.throws(() => keys(value), expected, value);
});

test('resolveConfig: --auth-token (or KVS_AUTH_TOKEN) checked with its files, passed on to components with absolute paths', () => {
  const cwd = process.cwd();
  process.chdir(dir);
  try {
    const cfg = resolveConfig({ 'auth-token': 'jwt,sign-method=ES256,priv-key=ec.key,pub-key=ec.pub' }, {});
    assert.equal(cfg.authToken, `jwt,sign-method=ES256,priv-key=${files.ecKey},pub-key=${files.ecPub},ttl=5m`);
    const back = resolveConfig(Object.fromEntries(configArgs(cfg).map((a) => a.slice(2).split(/=(.*)/s, 2))), {});
    assert.deepEqual(back, cfg);
    assert.equal(resolveConfig({}, { KVS_AUTH_TOKEN: 'jwt,sign-method=HS256,priv-key=secret,ttl=1m' }).authToken, `jwt,sign-method=HS256,priv-key=${files.secret},ttl=1m`);
    assert.equal(resolveConfig({}, {}).authToken, 'simple');
    assert.throws(() => resolveConfig({ 'auth-token': 'jwt,sign-method=ES256,priv-key=rsa.key' }, {}), /^Error: --auth-token jwt: sign-method ES256 needs an EC P-256 key/);
    assert.throws(() => resolveConfig({ 'auth-token': 'jwt,sign-method=RS256' }, {}), /^Error: --auth-token jwt: needs priv-key/);
  } finally {
    process.chdir(cwd);
  }
});
