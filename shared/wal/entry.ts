// The WAL entry: what one write does to the store, as storage appends it to its WAL and sends it
// down its feed (kvs.storage.WalEntry in proto/kvs/storage.proto). Storage encodes it and
// applies it (services/storage/mvcc/apply.ts); the gateway's watch hub decodes the feed's copy.
// The frames that carry entries in WAL segments are another module (the WAL's file format).
import { decode, encode, num, bigint, int64, type Long } from '../proto/index.js';

const WAL_ENTRY = 'kvs.storage.WalEntry';

/** kvs.storage.Mutation.Type. */
export const MUTATION_PUT = 0;
export const MUTATION_DELETE = 1;

/** A decoded kvs.storage.Mutation. */
export interface Mutation {
  type: number;
  /** mvccpb.KeyValue bytes: the new version for PUT, a tombstone (key, mod_revision) for DELETE. */
  kv: Uint8Array;
}

/** A decoded kvs.storage.AuthToken: a simple token as stored (its SHA-256 digest). */
export interface AuthTokenRecord {
  digest: Uint8Array;
  user: string;
  /** Wall clock, ms since the epoch. */
  expiresAtMs: number;
}

/** A decoded kvs.storage.AuthChange: the physical effect of an auth write. */
export interface AuthChange {
  putUsers: Uint8Array[];
  deleteUsers: Uint8Array[];
  putRoles: Uint8Array[];
  deleteRoles: Uint8Array[];
  /** 0: unchanged, 1: enabled, 2: disabled. */
  enabled: number;
  /** The auth revision after the change; 0: unchanged. */
  authRevision: number;
  putTokens: AuthTokenRecord[];
  deleteTokens: Uint8Array[];
  deleteAllTokens: boolean;
}

/** kvs.storage.WalEntry's lease fields (LeaseGrant, LeaseRevoke). */
export interface LeaseChanges {
  leaseGrant?: { id: bigint; ttl: number };
  leaseRevoke?: { id: bigint };
}

/** A decoded kvs.storage.WalEntry. */
export interface WalEntry extends LeaseChanges {
  revision: number;
  mutations: Mutation[];
  compactRevision: number;
  /** Users, roles, the enabled flag or tokens changed (services/storage/auth). */
  auth?: AuthChange;
}

/** Lease ids are int64 in the proto and bigint here: they go out as decimal strings. */
export function encodeWalEntry(e: WalEntry): Buffer {
  const { leaseGrant: g, leaseRevoke: r, auth: a, ...rest } = e;
  return encode(WAL_ENTRY, {
    ...rest,
    ...(g && { leaseGrant: { id: int64(g.id), ttl: g.ttl } }),
    ...(r && { leaseRevoke: { id: int64(r.id) } }),
    ...(a && { auth: a }),
  });
}

type Int64 = number | Long;
export function decodeWalEntry(buf: Uint8Array): WalEntry {
  const m = decode<{
    revision: unknown; mutations: { type: number; kv: Uint8Array }[]; compactRevision: unknown;
    leaseGrant?: { id: Int64; ttl: Int64 }; leaseRevoke?: { id: Int64 }; auth?: AuthChange & { authRevision: Int64 };
  }>(WAL_ENTRY, buf);
  const e: WalEntry = { revision: num(m.revision as number), mutations: m.mutations, compactRevision: num(m.compactRevision as number) };
  if (m.leaseGrant) e.leaseGrant = { id: bigint(m.leaseGrant.id), ttl: num(m.leaseGrant.ttl) };
  if (m.leaseRevoke) e.leaseRevoke = { id: bigint(m.leaseRevoke.id) };
  if (m.auth) {
    const a = m.auth;
    e.auth = { ...a, authRevision: num(a.authRevision), putTokens: a.putTokens.map((t) => ({ ...t, expiresAtMs: num(t.expiresAtMs as unknown as Int64) })) };
  }
  return e;
}
