// Who is calling, and may they: etcd's AuthInfoFromCtx and isOpPermitted / IsAdminPermitted
// (auth/store.go), read from LMDB on every request (after the caller's resetReadTxn), so a
// revoked role, a deleted user or a changed password counts from the next request on. Only the
// merged permissions of a user are cached, per auth revision (any auth change drops them).
// A simple token is looked up in LMDB; a JWT (--auth-token jwt) was verified before the handler
// ran (jwt.ts) and carries its user and the auth revision of its login.
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { AuthErrors } from '../../../shared/auth/errors.js';
import { EtcdError } from '../../../shared/errors.js';
import { authMeta, type AuthMeta, getRole, getToken, getUser, hasRootRole, tokenDigest } from '../../../shared/auth/tables.js';
import { inReservedSpace, mergePerms, permitted, type UserPerms } from '../../../shared/auth/perms.js';
import type { Checks } from '../../../shared/auth/requests.js';
import { leaseKeys } from '../../../shared/mvcc/leases.js';
import { bigint as toBigint } from '../../../shared/proto/index.js';
import type { JwtTokens } from './jwt.js';
import { peerCommonName, presentedToken, type CallLike } from './credentials.js';

interface Compiled {
  exists: boolean;
  root: boolean;
  perms: UserPerms;
}

export interface GateOptions {
  /** Wall clock (token expiry); tests move it. */
  now?: () => number;
  /** Called with a token's digest (and its expiry) when it is used less than half its lifetime before expiry. */
  renew?: (digest: Buffer, expiresAtMs: number) => void;
  /** --token-ttl in ms: a token used within its last half is renewed. */
  tokenTtlMs?: number;
  /** --auth-token jwt: tokens are JWTs, verified (before the handler runs) by this. */
  jwt?: JwtTokens;
  /**
   * Cluster mode: waits until this node has applied what the leader had committed (undefined
   * when there is nothing to wait for). A refusal here is checked once more after it.
   */
  catchUp?: () => Promise<void> | undefined;
}

export class AuthGate {
  private cacheRevision = 0;
  private cache = new Map<string, Compiled>();
  private readonly now: () => number;

  constructor(readonly db: MvccDb, private readonly opts: GateOptions = {}) {
    this.now = opts.now ?? Date.now;
  }

  /**
   * Before refusing a request: on a cluster node, a promise that resolves once it has applied
   * what the leader had committed, so the caller can check again (a user, token or grant made
   * through the leader a moment ago may not have reached this node's view yet; etcd checks a
   * write when it applies it, in the leader's order). Undefined: the refusal stands as it is.
   */
  catchUp(): Promise<void> | undefined {
    return this.opts.catchUp?.();
  }

  /**
   * After a permission check threw `err`: the catch-up to wait on before checking once more
   * (see catchUp), or undefined when the refusal stands (not a cluster node, or not a refusal).
   * A wait that fails (no leader to catch up with) leaves the refusal as it was.
   */
  recheckAfter(err: unknown): Promise<void> | undefined {
    return err instanceof EtcdError ? this.catchUp() : undefined;
  }

  /** The auth state as of the current read transaction. */
  meta() {
    return authMeta(this.db);
  }

  /** Auth's revision when it was last read off (undefined: last read on, or not read yet). */
  private offAt: number | undefined;

  /**
   * The auth state a write is checked against. While auth was last read off, that reading
   * serves: storage refuses a write checked at an older auth revision than its own once auth is
   * on (enabling it moves the revision), and the retry reads afresh (`freshMeta`). Not reading
   * the database here spares the gateway a timer: each renewal of lmdb-js's read snapshot is
   * released by a setTimeout(0), which wakes a gateway that is waiting on storage once more per
   * write (docs/perf/wake-ups.md, "lmdb-js's read-snapshot timer"). With auth on, every write reads.
   */
  writeMeta(): AuthMeta {
    return this.offAt === undefined ? this.freshMeta() : { enabled: false, revision: this.offAt };
  }

  /** The auth state as of a new read transaction. */
  freshMeta(): AuthMeta {
    this.db.env.resetReadTxn();
    const m = authMeta(this.db);
    this.offAt = m.enabled ? undefined : m.revision;
    return m;
  }

  /**
   * The caller of `call`, or undefined while auth is disabled (nothing to check). Call after
   * db.env.resetReadTxn(). Throws "invalid auth token" for a token that is unknown or expired.
   */
  caller(call: CallLike): Caller | undefined {
    const meta = authMeta(this.db);
    if (!meta.enabled) return undefined;
    return this.identify(call, meta.revision);
  }

  identify(call: CallLike, revision: number): Caller {
    const token = presentedToken(call);
    if (token === undefined) return new Caller(this, peerCommonName(call) ?? '', revision);
    if (this.opts.jwt) {
      // Verified before the handler ran (jwt.ts); expiry is checked here, at every use.
      const claims = this.opts.jwt.claims(call, token);
      if (!claims) throw AuthErrors.invalidAuthToken;
      return new Caller(this, claims.username, revision, claims.revision);
    }
    const digest = tokenDigest(token);
    const stored = getToken(this.db, digest);
    const now = this.now();
    if (!stored || stored.expiresAtMs <= now) throw AuthErrors.invalidAuthToken;
    const ttl = this.opts.tokenTtlMs;
    if (ttl && this.opts.renew && stored.expiresAtMs - now < ttl / 2) this.opts.renew(digest, stored.expiresAtMs);
    return new Caller(this, stored.user, revision);
  }

  /** A user's roles merged, cached until the auth revision changes. */
  compiled(user: string, revision: number): Compiled {
    if (revision !== this.cacheRevision) {
      this.cache.clear();
      this.cacheRevision = revision;
    }
    let c = this.cache.get(user);
    if (!c) {
      const u = getUser(this.db, user);
      c = u
        ? { exists: true, root: hasRootRole(u), perms: mergePerms(u.roles.map((r) => getRole(this.db, r))) }
        : { exists: false, root: false, perms: { read: [], write: [] } };
      if (this.cache.size > 10_000) this.cache.clear();
      this.cache.set(user, c);
    }
    return c;
  }
}

const NONE = new Uint8Array(0);

/**
 * An identified caller while auth is enabled: user '' is a request without credentials.
 * `tokenRevision`: the auth revision a JWT was issued at (its `revision` claim).
 */
export class Caller implements Checks {
  constructor(private readonly gate: AuthGate, readonly user: string, readonly revision: number, readonly tokenRevision?: number) {}

  /** A JWT issued before the last change of users, roles or the enabled flag. */
  private get staleToken(): boolean {
    return this.tokenRevision !== undefined && this.tokenRevision !== this.revision;
  }

  /**
   * etcd's requireAuthInfo: a user is needed (Lease calls, Status, Compact in later releases).
   * A JWT whose user has been deleted since it was issued no longer counts (a simple token is
   * deleted with its user).
   */
  requireUser(): void {
    if (this.user === '') throw AuthErrors.userEmpty;
    if (this.staleToken && !this.gate.compiled(this.user, this.revision).exists) throw AuthErrors.authOldRevision;
  }

  /** etcd's IsAdminPermitted (the current user and roles decide, whatever a JWT's revision). */
  admin(): void {
    if (this.user === '') throw AuthErrors.userEmpty;
    const c = this.gate.compiled(this.user, this.revision);
    if (!c.exists) throw AuthErrors.userNotFound;
    if (!c.root) throw AuthErrors.permissionDenied;
  }

  isAdmin(): boolean {
    if (this.user === '') return false;
    const c = this.gate.compiled(this.user, this.revision);
    return c.exists && c.root;
  }

  hasRole(role: string): boolean {
    return getUser(this.gate.db, this.user)?.roles.includes(role) ?? false;
  }

  private op(key: Uint8Array, rangeEnd: Uint8Array, write: boolean): void {
    // The reserved key space is refused to everyone, root included (the spec's rule 6).
    if (inReservedSpace(key, rangeEnd)) throw AuthErrors.permissionDenied;
    this.requireUser();
    // etcd's isOpPermitted and doSerialize: a JWT issued at another auth revision is refused
    // (clients then log in again), so a changed password or revoked role counts at once.
    if (this.staleToken) throw AuthErrors.authOldRevision;
    const c = this.gate.compiled(this.user, this.revision);
    if (!c.exists) throw AuthErrors.permissionDenied;
    if (c.root) return;
    if (!permitted(write ? c.perms.write : c.perms.read, key, rangeEnd)) throw AuthErrors.permissionDenied;
  }

  read(key: Uint8Array, rangeEnd: Uint8Array = NONE): void {
    this.op(key, rangeEnd, false);
  }

  write(key: Uint8Array, rangeEnd: Uint8Array = NONE): void {
    this.op(key, rangeEnd, true);
  }

  /** etcd's checkLeasePuts: write on every key attached to the lease, unless root. */
  leaseKeys(lease: unknown): void {
    const id = toBigint(lease as number);
    if (id === 0n || this.isAdmin()) return;
    for (const key of leaseKeys(this.gate.db, id)) this.write(key);
  }

  /** Read on every key attached to the lease, unless root (LeaseTimeToLive with keys, LeaseLeases). */
  leaseKeysReadable(lease: bigint): void {
    if (this.isAdmin()) return;
    for (const key of leaseKeys(this.gate.db, lease)) this.read(key);
  }
}
