// etcd's JWT tokens (--auth-token jwt,...; auth/jwt.go): signed {username, revision, exp}, with
// the auth revision of the login. The gateway issues and verifies them with the `jose` library
// and keeps no state: any gateway holding the key verifies any token, and a token outlives a
// restart. A token is valid until its exp; its user's access follows the current auth state
// (gate.ts), and a token older than the auth revision no longer passes key checks (etcd's
// ErrAuthOldRevision), so clients log in again after a user, role or password change.
//
// jose verifies asynchronously while the gate checks synchronously, so every call goes through
// `verifiedFirst`: a token not seen before is verified before the handler runs (a bidi stream's
// messages are held meanwhile), and the result is kept, per token (bounded) and on the call (a
// long stream keeps its result however busy the cache). Expiry is checked at every use.
import { createHash } from 'node:crypto';
import { SignJWT, jwtVerify, errors } from 'jose';
import { status } from '@grpc/grpc-js';
import { EtcdError } from '../../../shared/errors.js';
import type { Logger } from '../../../shared/log.js';
import { loadJwtKeys, parseAuthToken, type JwtKeys } from '../../../shared/auth/token-options.js';
import { presentedToken, type CallLike } from './credentials.js';

/** etcd's error when a verify-only node (pub-key alone) is asked to log someone in. */
export const verifyOnlyError = new EtcdError(status.UNKNOWN, 'auth: token signing attempted with verify-only key');

export interface JwtClaims {
  username: string;
  revision: number;
  exp?: number;
  nbf?: number;
  iat?: number;
}

/** Tokens whose verification is remembered; beyond it the oldest are forgotten. */
const CACHE_ENTRIES = 10_000;
/** Longer tokens are verified every time rather than kept (a JWT of etcd's claims is < 1 KiB). */
const CACHE_TOKEN_BYTES = 8192;

export class JwtTokens {
  private readonly cache = new Map<string, JwtClaims | null>();
  private readonly pending = new Map<string, Promise<JwtClaims | null>>();
  private readonly perCall = new WeakMap<object, JwtClaims | null>();
  private readonly now: () => number;

  constructor(private readonly keys: JwtKeys, private readonly log: Logger, opts: { now?: () => number } = {}) {
    this.now = opts.now ?? Date.now;
  }

  get ttlMs(): number {
    return this.keys.ttlMs;
  }

  /** A token for `username` at auth revision `revision`, as etcd's tokenJWT.assign. */
  async sign(username: string, revision: number): Promise<string> {
    if (!this.keys.signKey) throw verifyOnlyError;
    // etcd: time.Now().Add(ttl).Unix(); its claims map marshals in key order.
    const exp = Math.floor((this.now() + this.keys.ttlMs) / 1000);
    return new SignJWT({ exp, revision, username }).setProtectedHeader({ alg: this.keys.alg, typ: 'JWT' }).sign(this.keys.signKey);
  }

  /**
   * Verifies the token `call` carries unless its verification is known. Returns undefined when
   * there is nothing to wait for, else a promise (never rejected) after which claims() answers.
   */
  prepare(call: CallLike): Promise<void> | undefined {
    const token = presentedToken(call);
    if (token === undefined) return undefined;
    const known = this.cache.get(token);
    if (known !== undefined) {
      this.perCall.set(call, known);
      return undefined;
    }
    let p = this.pending.get(token);
    if (!p) {
      const verifying = this.verify(token)
        .catch(() => null)
        .finally(() => this.pending.delete(token));
      this.pending.set(token, verifying);
      p = verifying;
    }
    return p.then((claims) => void this.perCall.set(call, claims));
  }

  /** The claims of `token`, presented by `call`, if it is valid now (etcd 3.4.23's time rules). */
  claims(call: CallLike, token: string): JwtClaims | undefined {
    let c = this.perCall.get(call);
    if (c === undefined) c = this.cache.get(token);
    if (!c) return undefined;
    const now = Math.floor(this.now() / 1000);
    // golang-jwt v3 (etcd 3.4.23): valid while now <= exp, from nbf and iat on.
    if (c.exp !== undefined && now > c.exp) return undefined;
    if (c.nbf !== undefined && now < c.nbf) return undefined;
    if (c.iat !== undefined && now < c.iat) return undefined;
    return c;
  }

  private async verify(token: string): Promise<JwtClaims | null> {
    let claims: JwtClaims | null = null;
    let keep = token.length <= CACHE_TOKEN_BYTES;
    try {
      // Tolerance 1 s: jose's "exp <= now - 1" refusal is golang-jwt v3's "now > exp"; the
      // exact rules are applied at every use (claims()).
      const { payload } = await jwtVerify(token, this.keys.verifyKey, { algorithms: [this.keys.alg], clockTolerance: 1, currentDate: new Date(this.now()) });
      const { username, revision } = payload as { username?: unknown; revision?: unknown };
      if (typeof username !== 'string' || typeof revision !== 'number' || !Number.isFinite(revision)) {
        this.refused(token, 'the token has no string username or numeric revision claim');
      } else {
        claims = { username, revision: Math.max(0, Math.trunc(revision)), exp: payload.exp, nbf: payload.nbf, iat: payload.iat };
      }
    } catch (err) {
      // A token not valid yet may become valid: verified again then.
      if (err instanceof errors.JWTClaimValidationFailed && err.claim === 'nbf') keep = false;
      this.refused(token, (err as Error).message);
    }
    if (keep) {
      if (this.cache.size >= CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
      this.cache.set(token, claims);
    }
    return claims;
  }

  private refused(token: string, reason: string): void {
    // etcd logs a fingerprint, never the token.
    const fingerprint = createHash('sha256').update(token).digest('hex').slice(0, 12);
    this.log.debug({ tokenFingerprint: fingerprint, reason }, 'JWT token refused');
  }
}

/** The JWT issuer and verifier of an --auth-token value, or undefined for simple tokens. */
export function jwtTokens(authToken: string, log: Logger): JwtTokens | undefined {
  const opts = parseAuthToken(authToken);
  if (opts.type !== 'jwt') return undefined;
  const keys = loadJwtKeys(opts);
  log.info({ signMethod: keys.alg, ttl: opts.ttl, verifyOnly: !keys.signKey }, keys.signKey ? 'auth tokens are JWTs' : 'auth tokens are JWTs, verified only (no priv-key): Authenticate fails');
  return new JwtTokens(keys, log);
}

type Handler = (call: any, cb?: unknown) => unknown;

/**
 * The handlers of `impl`, each run once the token of its call is verified. Meanwhile the
 * messages and end of a client stream are held, then replayed in order; a call that ended
 * meanwhile (cancelled, past its deadline) is not handed over.
 */
export function verifiedFirst<T extends object>(jwt: JwtTokens, impl: T): T {
  const out: Record<string, unknown> = {};
  for (const [name, h] of Object.entries(impl)) {
    out[name] = typeof h !== 'function' ? h : (call: HeldCall, cb?: unknown) => {
      const ready = jwt.prepare(call);
      if (!ready) return (h as Handler)(call, cb);
      const held: [string, unknown[]][] = [];
      call.emit = (event: string | symbol, ...args: unknown[]) => {
        if (event === 'data' || event === 'end') {
          held.push([event, args]);
          return true;
        }
        return Object.getPrototypeOf(call).emit.call(call, event, ...args);
      };
      void ready.then(() => {
        delete (call as Partial<HeldCall>).emit;
        if (call.cancelled || call.isFinished) return;
        try {
          (h as Handler)(call, cb);
        } catch (err) {
          // As the server does for a handler that throws.
          return call.fail({ code: status.UNKNOWN, details: `kvs: ${(err as Error)?.message ?? String(err)}` });
        }
        for (const [event, args] of held) call.emit(event, ...args);
      });
    };
  }
  return out as T;
}

interface HeldCall extends CallLike {
  emit(event: string | symbol, ...args: unknown[]): boolean;
  fail(err: { code: number; details: string }): void;
  cancelled: boolean;
  isFinished?: boolean;
}
