// The auth state in LMDB, next to the MVCC tables (so checkpoints, snapshots and restores
// carry it). Storage is the only writer (services/storage/auth/apply.ts, from WAL entries);
// the gateway reads it directly on every request, after its resetReadTxn, so a change is
// visible to the next request: no cache to go stale.
//
//   authusers   user name -> authpb.User (password: the bcrypt hash; roles sorted)
//   authroles   role name -> authpb.Role (permissions sorted by key)
//   authtokens  SHA-256 of a simple token -> kvs.storage.AuthToken (user, expiry). The token
//               itself is never stored: a WAL segment or checkpoint in the object store holds
//               nothing a client could present.
//   meta.auth   { enabled, revision }: the revision counts changes of users, roles and the
//               enabled flag (etcd's authRevision; it starts at 1)
import { createHash } from 'node:crypto';
import type { Database } from 'lmdb';
import type { MvccDb } from '../mvcc/schema.js';
import { MAX_KEY_BYTES } from '../mvcc/schema.js';
import { decode, encode, num } from '../proto/index.js';
import { asBuffer } from '../bytes.js';

export const AUTH_META_KEY = 'auth';
export const ROOT_USER = 'root';
export const ROOT_ROLE = 'root';

export const PermType = { READ: 0, WRITE: 1, READWRITE: 2 } as const;

export interface Permission {
  permType: number;
  key: Buffer;
  rangeEnd: Buffer;
}
export interface User {
  name: Buffer;
  /** The bcrypt hash (empty for a no-password user). */
  password: Buffer;
  roles: string[];
  noPassword: boolean;
}
export interface Role {
  name: Buffer;
  perms: Permission[];
}
export interface StoredToken {
  user: string;
  expiresAtMs: number;
}
export interface AuthMeta {
  enabled: boolean;
  revision: number;
}

export interface AuthTables {
  users: Database<Buffer, Buffer>;
  roles: Database<Buffer, Buffer>;
  tokens: Database<Buffer, Buffer>;
}

const opened = new WeakMap<MvccDb, AuthTables>();

/**
 * The auth tables of `db`. The writer creates them; a read-only process opened before they
 * existed (a database from before auth) gets undefined, meaning "empty", and tries again later.
 */
export function authTables(db: MvccDb): AuthTables | undefined {
  let t = opened.get(db);
  if (t) return t;
  const binary = { encoding: 'binary', keyEncoding: 'binary' } as const;
  try {
    const users = db.env.openDB<Buffer, Buffer>({ name: 'authusers', ...binary });
    const roles = db.env.openDB<Buffer, Buffer>({ name: 'authroles', ...binary });
    const tokens = db.env.openDB<Buffer, Buffer>({ name: 'authtokens', ...binary });
    if (!users || !roles || !tokens) return undefined;
    t = { users, roles, tokens };
  } catch {
    return undefined;
  }
  opened.set(db, t);
  return t;
}

export function authMeta(db: MvccDb): AuthMeta {
  const m = db.meta.get(AUTH_META_KEY) as AuthMeta | undefined;
  return m ?? { enabled: false, revision: 1 };
}

/** A name LMDB can hold as a key (longer ones cannot exist). */
export function storableName(name: Uint8Array): boolean {
  return name.length > 0 && name.length <= MAX_KEY_BYTES;
}

// protobufjs decodes an absent bytes field as its default, an empty array (not a Uint8Array).
const asBuf = (b: Uint8Array | string | number[]): Buffer =>
  typeof b === 'string' ? Buffer.from(b) : b instanceof Uint8Array ? asBuffer(b) : Buffer.from(b);

interface PbUser { name: Uint8Array; password: Uint8Array; roles: string[]; options?: { noPassword?: boolean } | null }
interface PbRole { name: Uint8Array; keyPermission: { permType: number; key: Uint8Array; rangeEnd: Uint8Array }[] }

export function encodeUser(u: User): Buffer {
  return encode('authpb.User', { name: u.name, password: u.password, roles: u.roles, options: { noPassword: u.noPassword } });
}
export function decodeUser(b: Uint8Array): User {
  const m = decode<PbUser>('authpb.User', b);
  return { name: asBuf(m.name), password: asBuf(m.password), roles: m.roles, noPassword: !!m.options?.noPassword };
}
export function encodeRole(r: Role): Buffer {
  return encode('authpb.Role', { name: r.name, keyPermission: r.perms });
}
export function decodeRole(b: Uint8Array): Role {
  const m = decode<PbRole>('authpb.Role', b);
  return { name: asBuf(m.name), perms: m.keyPermission.map((p) => ({ permType: p.permType ?? 0, key: asBuf(p.key), rangeEnd: asBuf(p.rangeEnd) })) };
}

export function getUser(db: MvccDb, name: Uint8Array | string): User | undefined {
  const key = asBuf(name);
  if (!storableName(key)) return undefined;
  const v = authTables(db)?.users.getBinary(key);
  return v ? decodeUser(v) : undefined;
}

export function getRole(db: MvccDb, name: Uint8Array | string): Role | undefined {
  const key = asBuf(name);
  if (!storableName(key)) return undefined;
  const v = authTables(db)?.roles.getBinary(key);
  return v ? decodeRole(v) : undefined;
}

/** Every user, in name (byte) order, as etcd lists them. */
export function listUsers(db: MvccDb): User[] {
  const t = authTables(db);
  return t ? [...t.users.getRange({})].map(({ value }) => decodeUser(value)) : [];
}

export function listRoles(db: MvccDb): Role[] {
  const t = authTables(db);
  return t ? [...t.roles.getRange({})].map(({ value }) => decodeRole(value)) : [];
}

/** The digest under which a token is stored. */
export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token).digest();
}

export function encodeToken(digest: Buffer, t: StoredToken): Buffer {
  return encode('kvs.storage.AuthToken', { digest, user: t.user, expiresAtMs: t.expiresAtMs });
}
export function decodeToken(b: Uint8Array): StoredToken {
  const m = decode<{ user: string; expiresAtMs: number }>('kvs.storage.AuthToken', b);
  return { user: m.user, expiresAtMs: num(m.expiresAtMs) };
}

export function getToken(db: MvccDb, digest: Buffer): StoredToken | undefined {
  const v = authTables(db)?.tokens.getBinary(digest);
  return v ? decodeToken(v) : undefined;
}

export function hasRootRole(u: User): boolean {
  return u.roles.includes(ROOT_ROLE);
}
