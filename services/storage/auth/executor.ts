// Executes the auth writes with etcd 3.4's rules (auth/store.go), inside the storage drain's
// write transaction: each yields the encoded etcd response and, when it changed something,
// the WAL entry of its physical effect (applied at once, so later requests of the batch see it).
//
// The gateway has already checked the caller's permission and hashed passwords (bcrypt runs
// in the gateway, off its event loop): a `password` field arriving here holds a bcrypt hash.
import { randomInt } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { MAX_KEY_BYTES } from '../../../shared/mvcc/schema.js';
import { EtcdError } from '../../../shared/errors.js';
import { decode, encode } from '../../../shared/proto/index.js';
import { AuthErrors } from '../../../shared/auth/errors.js';
import {
  ROOT_ROLE, ROOT_USER, authMeta, authTables, decodeToken, encodeRole, encodeUser, getRole, getUser, hasRootRole,
  listUsers, tokenDigest, type Permission, type Role, type User,
} from '../../../shared/auth/tables.js';
import { isValidPermissionRange } from '../../../shared/auth/perms.js';
import type { Header } from '../../../shared/mvcc/responses.js';
import { Op, isAuthOp } from '../../../shared/storage/ops.js';
import { applyAuthChange, emptyChange, ENABLE, DISABLE } from './apply.js';
import type { AuthChange, WalEntry } from '../../../shared/wal/entry.js';

const LETTERS = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
/** Expired tokens removed per Authenticate, so that the table never grows with dead tokens. */
const PURGE_PER_AUTHENTICATE = 1000;

export interface AuthExecutorOptions {
  /** Simple-token lifetime (--token-ttl), in ms. */
  tokenTtlMs: number;
  now?: () => number;
}

type Result = { response: Buffer; entry?: WalEntry };

const b = (s: string) => Buffer.from(s);
/** Go's sort.Strings order: bytes, not UTF-16 units. */
const byBytes = (x: string, y: string) => Buffer.compare(b(x), b(y));

export class AuthExecutor {
  private readonly now: () => number;

  constructor(
    private readonly db: MvccDb,
    private readonly header: () => Header,
    private readonly opts: AuthExecutorOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  static handles(op: number): boolean {
    return isAuthOp(op);
  }

  /** `walIndex`: the WAL index this request's entry will get (simple tokens name it, as etcd's name the raft index). */
  execute(op: number, request: <T>(typeName: string) => T, walIndex: number): Result {
    switch (op) {
      case Op.AUTH_ENABLE: return this.enable();
      case Op.AUTH_DISABLE: return this.disable();
      case Op.AUTHENTICATE: return this.authenticate(request('etcdserverpb.AuthenticateRequest'), walIndex);
      case Op.AUTH_USER_ADD: return this.userAdd(request('etcdserverpb.AuthUserAddRequest'));
      case Op.AUTH_USER_DELETE: return this.userDelete(request('etcdserverpb.AuthUserDeleteRequest'));
      case Op.AUTH_USER_CHANGE_PASSWORD: return this.userChangePassword(request('etcdserverpb.AuthUserChangePasswordRequest'));
      case Op.AUTH_USER_GRANT_ROLE: return this.userGrantRole(request('etcdserverpb.AuthUserGrantRoleRequest'));
      case Op.AUTH_USER_REVOKE_ROLE: return this.userRevokeRole(request('etcdserverpb.AuthUserRevokeRoleRequest'));
      case Op.AUTH_ROLE_ADD: return this.roleAdd(request('etcdserverpb.AuthRoleAddRequest'));
      case Op.AUTH_ROLE_DELETE: return this.roleDelete(request('etcdserverpb.AuthRoleDeleteRequest'));
      case Op.AUTH_ROLE_GRANT_PERMISSION: return this.roleGrantPermission(request('etcdserverpb.AuthRoleGrantPermissionRequest'));
      case Op.AUTH_ROLE_REVOKE_PERMISSION: return this.roleRevokePermission(request('etcdserverpb.AuthRoleRevokePermissionRequest'));
      case Op.AUTH_TOKEN_REFRESH: return this.tokenRefresh(request('kvs.storage.AuthTokenRefresh'));
      default: throw new EtcdError(status.INVALID_ARGUMENT, `kvs: unknown auth operation ${op}`);
    }
  }

  /** The auth revision now (compared with the one a gateway checked a request at). */
  get revision(): number {
    return authMeta(this.db).revision;
  }

  get enabled(): boolean {
    return authMeta(this.db).enabled;
  }

  private respond(typeName: string, change?: AuthChange, fields: object = {}): Result {
    let entry: WalEntry | undefined;
    if (change) {
      applyAuthChange(this.db, change);
      entry = { revision: 0, mutations: [], compactRevision: 0, auth: change };
    }
    return { response: encode(typeName, { header: this.header(), ...fields }), entry };
  }

  /** A change that bumps the auth revision (every change of users, roles or the flag). */
  private change(parts: Partial<AuthChange>): AuthChange {
    return { ...emptyChange(), ...parts, authRevision: authMeta(this.db).revision + 1 };
  }

  private userTokens(user: string): Buffer[] {
    const t = authTables(this.db)!;
    const out: Buffer[] = [];
    for (const { key, value } of t.tokens.getRange({})) if (decodeToken(value).user === user) out.push(Buffer.from(key));
    return out;
  }

  enable(): Result {
    if (authMeta(this.db).enabled) return this.respond('etcdserverpb.AuthEnableResponse');
    const root = getUser(this.db, ROOT_USER);
    if (!root) throw AuthErrors.rootUserNotExist;
    if (!hasRootRole(root)) throw AuthErrors.rootRoleNotExist;
    return this.respond('etcdserverpb.AuthEnableResponse', this.change({ enabled: ENABLE }));
  }

  disable(): Result {
    if (!authMeta(this.db).enabled) return this.respond('etcdserverpb.AuthDisableResponse');
    // As etcd's tokenSimple.disable: every token is forgotten.
    return this.respond('etcdserverpb.AuthDisableResponse', this.change({ enabled: DISABLE, deleteAllTokens: true }));
  }

  private authenticate(r: { name: string; password: string }, walIndex: number): Result {
    if (!authMeta(this.db).enabled) throw AuthErrors.authNotEnabled;
    const user = getUser(this.db, r.name);
    if (!user || user.noPassword) throw AuthErrors.authFailed;
    // The gateway verified the password against this hash; a hash changed since is a failure.
    if (!user.password.equals(b(r.password))) throw AuthErrors.authFailed;
    let prefix = '';
    for (let i = 0; i < 16; i++) prefix += LETTERS[randomInt(LETTERS.length)];
    const token = `${prefix}.${walIndex}`;
    const now = this.now();
    const deleteTokens: Buffer[] = [];
    for (const { key, value } of authTables(this.db)!.tokens.getRange({})) {
      if (deleteTokens.length >= PURGE_PER_AUTHENTICATE) break;
      if (decodeToken(value).expiresAtMs <= now) deleteTokens.push(Buffer.from(key));
    }
    const change: AuthChange = { ...emptyChange(), deleteTokens, putTokens: [{ digest: tokenDigest(token), user: r.name, expiresAtMs: now + this.opts.tokenTtlMs }] };
    return this.respond('etcdserverpb.AuthenticateResponse', change, { token });
  }

  private tokenRefresh(r: { digests: Uint8Array[] }): Result {
    const t = authTables(this.db)!;
    const now = this.now();
    const change = emptyChange();
    for (const d of r.digests) {
      const v = t.tokens.getBinary(Buffer.from(d));
      if (!v) continue;
      const tok = decodeToken(v);
      if (tok.expiresAtMs <= now) continue; // expired: stays expired
      change.putTokens.push({ digest: d, user: tok.user, expiresAtMs: now + this.opts.tokenTtlMs });
    }
    return this.respond('kvs.storage.AuthTokenRefresh', change.putTokens.length ? change : undefined);
  }

  private checkName(name: string, what: 'user' | 'role'): void {
    if (b(name).length > MAX_KEY_BYTES) throw AuthErrors.nameTooLong(what, MAX_KEY_BYTES);
  }

  private userAdd(r: { name: string; password: string; options?: { noPassword?: boolean } | null }): Result {
    if (r.name.length === 0) throw AuthErrors.userEmpty;
    this.checkName(r.name, 'user');
    if (getUser(this.db, r.name)) throw AuthErrors.userAlreadyExist;
    const noPassword = !!r.options?.noPassword;
    const user: User = { name: b(r.name), password: noPassword ? Buffer.alloc(0) : b(r.password), roles: [], noPassword };
    return this.respond('etcdserverpb.AuthUserAddResponse', this.change({ putUsers: [encodeUser(user)] }));
  }

  private userDelete(r: { name: string }): Result {
    if (authMeta(this.db).enabled && r.name === ROOT_USER) throw AuthErrors.invalidAuthMgmt;
    if (!getUser(this.db, r.name)) throw AuthErrors.userNotFound;
    return this.respond('etcdserverpb.AuthUserDeleteResponse', this.change({ deleteUsers: [b(r.name)], deleteTokens: this.userTokens(r.name) }));
  }

  private userChangePassword(r: { name: string; password: string }): Result {
    const user = getUser(this.db, r.name);
    if (!user) throw AuthErrors.userNotFound;
    const updated: User = { ...user, password: b(r.password) };
    return this.respond('etcdserverpb.AuthUserChangePasswordResponse', this.change({ putUsers: [encodeUser(updated)], deleteTokens: this.userTokens(r.name) }));
  }

  private userGrantRole(r: { user: string; role: string }): Result {
    const user = getUser(this.db, r.user);
    if (!user) throw AuthErrors.userNotFound;
    if (r.role !== ROOT_ROLE && !getRole(this.db, r.role)) throw AuthErrors.roleNotFound;
    if (user.roles.includes(r.role)) return this.respond('etcdserverpb.AuthUserGrantRoleResponse');
    const updated: User = { ...user, roles: [...user.roles, r.role].sort(byBytes) };
    return this.respond('etcdserverpb.AuthUserGrantRoleResponse', this.change({ putUsers: [encodeUser(updated)] }));
  }

  private userRevokeRole(r: { name: string; role: string }): Result {
    if (authMeta(this.db).enabled && r.name === ROOT_USER && r.role === ROOT_ROLE) throw AuthErrors.invalidAuthMgmt;
    const user = getUser(this.db, r.name);
    if (!user) throw AuthErrors.userNotFound;
    const roles = user.roles.filter((x) => x !== r.role);
    if (roles.length === user.roles.length) throw AuthErrors.roleNotGranted;
    return this.respond('etcdserverpb.AuthUserRevokeRoleResponse', this.change({ putUsers: [encodeUser({ ...user, roles })] }));
  }

  private roleAdd(r: { name: string }): Result {
    if (r.name.length === 0) throw AuthErrors.roleEmpty;
    this.checkName(r.name, 'role');
    if (getRole(this.db, r.name)) throw AuthErrors.roleAlreadyExist;
    return this.respond('etcdserverpb.AuthRoleAddResponse', this.change({ putRoles: [encodeRole({ name: b(r.name), perms: [] })] }));
  }

  private roleDelete(r: { role: string }): Result {
    if (authMeta(this.db).enabled && r.role === ROOT_ROLE) throw AuthErrors.invalidAuthMgmt;
    if (!getRole(this.db, r.role)) throw AuthErrors.roleNotFound;
    const putUsers: Buffer[] = [];
    for (const u of listUsers(this.db)) {
      const roles = u.roles.filter((x) => x !== r.role);
      if (roles.length !== u.roles.length) putUsers.push(encodeUser({ ...u, roles }));
    }
    return this.respond('etcdserverpb.AuthRoleDeleteResponse', this.change({ deleteRoles: [b(r.role)], putUsers }));
  }

  private roleGrantPermission(r: { name: string; perm?: { permType?: number; key: Uint8Array; rangeEnd: Uint8Array } | null }): Result {
    if (!r.perm) throw AuthErrors.permissionNotGiven;
    const key = Buffer.from(r.perm.key);
    const rangeEnd = Buffer.from(r.perm.rangeEnd);
    if (!isValidPermissionRange(key, rangeEnd)) throw AuthErrors.invalidAuthMgmt;
    const role = getRole(this.db, r.name);
    if (!role) throw AuthErrors.roleNotFound;
    const permType = r.perm.permType ?? 0;
    // etcd's sort.Search: only the first permission at or after the key is looked at.
    const perms = role.perms.map((p) => ({ ...p }));
    const idx = perms.findIndex((p) => Buffer.compare(p.key, key) >= 0);
    if (idx >= 0 && perms[idx]!.key.equals(key) && perms[idx]!.rangeEnd.equals(rangeEnd)) {
      perms[idx]!.permType = permType;
    } else {
      perms.push({ permType, key, rangeEnd });
      perms.sort((x, y) => Buffer.compare(x.key, y.key)); // stable, as Go's insertion sort of small slices
    }
    const updated: Role = { name: role.name, perms };
    return this.respond('etcdserverpb.AuthRoleGrantPermissionResponse', this.change({ putRoles: [encodeRole(updated)] }));
  }

  private roleRevokePermission(r: { role: string; key: Uint8Array; rangeEnd: Uint8Array }): Result {
    const role = getRole(this.db, r.role);
    if (!role) throw AuthErrors.roleNotFound;
    const key = Buffer.from(r.key);
    const rangeEnd = Buffer.from(r.rangeEnd);
    const perms: Permission[] = role.perms.filter((p) => !p.key.equals(key) || !p.rangeEnd.equals(rangeEnd));
    if (perms.length === role.perms.length) throw AuthErrors.permissionNotGranted;
    return this.respond('etcdserverpb.AuthRoleRevokePermissionResponse', this.change({ putRoles: [encodeRole({ name: role.name, perms })] }));
  }
}
