// --auth-token, in etcd's syntax: `simple`, or `jwt,sign-method=M,priv-key=FILE,pub-key=FILE,ttl=D`
// (etcd 3.4's auth/options.go and store.go decomposeOpts). Parsed and its key files checked in
// the supervisor, so that a bad value stops `kvs run` with one line; the gateway loads the keys
// again when it starts (a restart of the gateway re-reads the files).
//
// What etcd 3.4.23 accepts: RS256/384/512 and PS256/384/512 (an RSA key), ES256/384/512 (an EC
// key), HS256/384/512 (priv-key's bytes are the shared secret). priv-key signs and verifies;
// pub-key alone verifies only (Authenticate then fails, as etcd's). ttl defaults to 5m.
//
// kvs refuses at start what etcd 3.4.23 accepts and then fails on later or ignores: an EC key
// of the wrong curve for the method (etcd fails every Authenticate), an RSA key under 2048 bits
// (the JWT library refuses them), a pub-key that does not belong to priv-key, options it does
// not know (etcd warns), a ttl that is not above 0, pub-key with an HS method (etcd ignores it),
// and options after `simple`.
import fs from 'node:fs';
import path from 'node:path';
import { createPrivateKey, createPublicKey, createSecretKey, type KeyObject } from 'node:crypto';

export const JWT_SIGN_METHODS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'HS256', 'HS384', 'HS512'] as const;
export type JwtSignMethod = (typeof JWT_SIGN_METHODS)[number];

/** etcd's DefaultTTL of JWT tokens. */
export const DEFAULT_JWT_TTL = '5m';

export interface JwtTokenOptions {
  type: 'jwt';
  signMethod: JwtSignMethod;
  /** Absolute paths. */
  privKey?: string;
  pubKey?: string;
  /** As given (a Go duration), or the default. */
  ttl: string;
  ttlMs: number;
}

export type AuthTokenOptions = { type: 'simple' } | JwtTokenOptions;

const OPTIONS = ['sign-method', 'priv-key', 'pub-key', 'ttl'] as const;

function fail(type: string, problem: string): never {
  throw new Error(`--auth-token ${type}: ${problem}`);
}

/**
 * The token type and options of an --auth-token value, key paths made absolute. Throws one
 * line naming the problem for a malformed value; the key files are checked by loadJwtKeys.
 */
export function parseAuthToken(value: string): AuthTokenOptions {
  const [type = '', ...rest] = value.split(',');
  if (type !== 'simple' && type !== 'jwt') {
    throw new Error(`--auth-token must be simple or jwt,sign-method=...,priv-key=...[,pub-key=...][,ttl=...], got "${value}"`);
  }
  const opts = new Map<string, string>();
  for (const part of rest) {
    const pair = part.split('=');
    if (pair.length !== 2) fail(type, `"${part}" is not name=value`);
    const [name, v] = pair as [string, string];
    if (!(OPTIONS as readonly string[]).includes(name)) fail(type, `unknown option "${name}" (known: ${OPTIONS.join(', ')})`);
    if (opts.has(name)) fail(type, `${name} is given twice`);
    if (v === '') fail(type, `${name} is empty`);
    opts.set(name, v);
  }
  if (type === 'simple') {
    if (opts.size) fail(type, 'simple tokens take no options (the lifetime is --token-ttl)');
    return { type };
  }
  const method = opts.get('sign-method');
  if (method === undefined) fail(type, `sign-method is missing (one of ${JWT_SIGN_METHODS.join(', ')})`);
  if (!(JWT_SIGN_METHODS as readonly string[]).includes(method)) fail(type, `sign-method ${method} is not supported (one of ${JWT_SIGN_METHODS.join(', ')})`);
  const signMethod = method as JwtSignMethod;
  const privKey = opts.get('priv-key');
  const pubKey = opts.get('pub-key');
  if (signMethod.startsWith('HS')) {
    if (privKey === undefined) fail(type, `sign-method ${signMethod} needs priv-key, the file holding the shared secret`);
    if (pubKey !== undefined) fail(type, `sign-method ${signMethod} uses priv-key (the shared secret) only; pub-key is for RS, PS and ES methods`);
  } else if (privKey === undefined && pubKey === undefined) {
    fail(type, 'needs priv-key (to issue and verify tokens) or pub-key (to verify only)');
  }
  const ttl = opts.get('ttl') ?? DEFAULT_JWT_TTL;
  const ttlMs = parseGoDuration(ttl);
  if (ttlMs === undefined) fail(type, `ttl "${ttl}" is not a duration such as 5m, 300s or 1h30m`);
  if (ttlMs < 1000) fail(type, `ttl ${ttl} is too short: tokens carry their expiry in whole seconds (at least 1s)`);
  return {
    type,
    signMethod,
    ...(privKey !== undefined ? { privKey: path.resolve(privKey) } : {}),
    ...(pubKey !== undefined ? { pubKey: path.resolve(pubKey) } : {}),
    ttl,
    ttlMs,
  };
}

/** The --auth-token value of parsed options (what components are started with). */
export function formatAuthToken(o: AuthTokenOptions): string {
  if (o.type === 'simple') return 'simple';
  const parts = ['jwt', `sign-method=${o.signMethod}`];
  if (o.privKey !== undefined) parts.push(`priv-key=${o.privKey}`);
  if (o.pubKey !== undefined) parts.push(`pub-key=${o.pubKey}`);
  parts.push(`ttl=${o.ttl}`);
  return parts.join(',');
}

const GO_UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds of a Go duration ("5m", "1h30m", "1.5s", "300ms"), or undefined. Positive only. */
export function parseGoDuration(text: string): number | undefined {
  if (text === '0') return 0;
  const re = /(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let ms = 0;
  let at = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    ms += Number(m[1]) * GO_UNITS[m[2]!]!;
    at = re.lastIndex;
  }
  return at === text.length && at > 0 ? ms : undefined;
}

/** Keys ready for signing and verifying. */
export interface JwtKeys {
  alg: JwtSignMethod;
  /** Absent with pub-key only: tokens are verified, not issued. */
  signKey?: KeyObject;
  verifyKey: KeyObject;
  ttlMs: number;
}

const CURVES: Record<string, { method: string; name: string }> = {
  prime256v1: { method: 'ES256', name: 'P-256' },
  secp384r1: { method: 'ES384', name: 'P-384' },
  secp521r1: { method: 'ES512', name: 'P-521' },
};

/**
 * Reads and checks the key files of JWT options. Throws one line naming the option, the file
 * and the problem: unreadable, not a PEM key, a key of the wrong kind or size for the method,
 * or a pub-key that is not priv-key's.
 */
export function loadJwtKeys(o: JwtTokenOptions): JwtKeys {
  const read = (option: 'priv-key' | 'pub-key', file: string): Buffer => {
    try {
      return fs.readFileSync(file);
    } catch (err) {
      fail('jwt', `${option} ${file}: cannot read it: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  if (o.signMethod.startsWith('HS')) {
    const secret = read('priv-key', o.privKey!);
    if (secret.length === 0) fail('jwt', `priv-key ${o.privKey} is empty`);
    const key = createSecretKey(secret);
    return { alg: o.signMethod, signKey: key, verifyKey: key, ttlMs: o.ttlMs };
  }
  let priv: KeyObject | undefined;
  let pub: KeyObject | undefined;
  if (o.privKey !== undefined) {
    try {
      priv = createPrivateKey(read('priv-key', o.privKey));
    } catch (err) {
      if ((err as Error).message.startsWith('--auth-token')) throw err;
      fail('jwt', `priv-key ${o.privKey}: not a PEM private key (${(err as Error).message})`);
    }
    checkKind(o.signMethod, priv, `priv-key ${o.privKey}`);
  }
  if (o.pubKey !== undefined) {
    const pem = read('pub-key', o.pubKey);
    if (pem.includes('PRIVATE KEY-----')) fail('jwt', `pub-key ${o.pubKey} holds a private key: give it as priv-key`);
    try {
      pub = createPublicKey(pem);
    } catch (err) {
      fail('jwt', `pub-key ${o.pubKey}: not a PEM public key or certificate (${(err as Error).message})`);
    }
    checkKind(o.signMethod, pub, `pub-key ${o.pubKey}`);
  }
  if (priv && pub) {
    const der = (k: KeyObject) => k.export({ type: 'spki', format: 'der' });
    if (!der(createPublicKey(priv)).equals(der(pub))) fail('jwt', `pub-key ${o.pubKey} is not the public key of priv-key ${o.privKey}`);
  }
  return { alg: o.signMethod, ...(priv ? { signKey: priv } : {}), verifyKey: pub ?? createPublicKey(priv!), ttlMs: o.ttlMs };
}

function checkKind(method: JwtSignMethod, key: KeyObject, what: string): void {
  const type = key.asymmetricKeyType;
  if (method.startsWith('ES')) {
    const curve = type === 'ec' ? CURVES[key.asymmetricKeyDetails?.namedCurve ?? ''] : undefined;
    const want = Object.values(CURVES).find((c) => c.method === method)!.name;
    if (type !== 'ec') fail('jwt', `sign-method ${method} needs an EC ${want} key; ${what} is ${describe(key)}`);
    if (curve?.method !== method) fail('jwt', `sign-method ${method} needs an EC ${want} key; ${what} is ${describe(key)}`);
    return;
  }
  // RS and PS: an ordinary RSA key (etcd 3.4 reads PKCS#1 and PKCS#8 rsaEncryption keys only).
  if (type !== 'rsa') fail('jwt', `sign-method ${method} needs an RSA key; ${what} is ${describe(key)}`);
  const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
  if (bits < 2048) fail('jwt', `sign-method ${method} needs an RSA key of at least 2048 bits; ${what} has ${bits}`);
}

function describe(key: KeyObject): string {
  const type = key.asymmetricKeyType;
  if (type === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve ?? 'unknown';
    return `an EC key on ${CURVES[curve]?.name ?? curve}`;
  }
  if (type === 'rsa') return 'an RSA key';
  return `a key of type ${type ?? 'unknown'}`;
}
