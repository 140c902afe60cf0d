// etcd's backend schema (etcd 3.4 and 3.5; mvcc/kvstore.go, mvcc/revision.go, lease/lessor.go,
// auth/store.go): the bbolt buckets a snapshot holds and how their keys are encoded. Shared by
// the reader (read.ts) and a writer of etcd-format snapshots.
//
//   key        revision key (below) -> mvccpb.KeyValue; a deletion's record holds only the key
//   meta       finishedCompactRev, scheduledCompactRev (17-byte revision keys),
//              consistent_index (8-byte big-endian); 3.5 adds term, confState
//   lease      8-byte big-endian lease id -> leasepb.Lease {ID, TTL, RemainingTTL}
//   auth       authEnabled (1 byte: 1 on), authRevision (8-byte big-endian)
//   authUsers  user name -> authpb.User
//   authRoles  role name -> authpb.Role
//   members, members_removed, cluster, alarm: membership and alarms, not carried over (a
//   restore makes a new member, as etcd's does)

export const BUCKET = {
  key: 'key',
  meta: 'meta',
  lease: 'lease',
  auth: 'auth',
  authUsers: 'authUsers',
  authRoles: 'authRoles',
  members: 'members',
  membersRemoved: 'members_removed',
  cluster: 'cluster',
  alarm: 'alarm',
} as const;

/** Keys of the meta bucket. */
export const META_KEY = {
  finishedCompactRev: 'finishedCompactRev',
  scheduledCompactRev: 'scheduledCompactRev',
  consistentIndex: 'consistent_index',
  /** etcd 3.5: the raft term of consistent_index. */
  term: 'term',
  /** etcd 3.5: the raft ConfState. */
  confState: 'confState',
} as const;

/** Keys of the auth bucket. */
export const AUTH_KEY = {
  enabled: 'authEnabled',
  revision: 'authRevision',
} as const;

/** Buckets a kvs import reads or knowingly leaves behind; others are reported, not refused. */
export const KNOWN_BUCKETS: ReadonlySet<string> = new Set(Object.values(BUCKET));

/** A revision key is 17 bytes: 8-byte big-endian main, '_', 8-byte big-endian sub. */
export const REVISION_KEY_BYTES = 17;
const SEPARATOR = 0x5f; // '_'
const TOMBSTONE = 0x74; // 't'

export interface EtcdRevision {
  main: number;
  sub: number;
  /** The key ends in 't': the change is a deletion. */
  tombstone: boolean;
}

/** etcd's on-disk revision key: main '_' sub, and a 't' mark for a deletion. */
export function encodeRevisionKey(main: number, sub: number, tombstone = false): Buffer {
  const b = Buffer.alloc(tombstone ? REVISION_KEY_BYTES + 1 : REVISION_KEY_BYTES);
  b.writeBigInt64BE(BigInt(main), 0);
  b[8] = SEPARATOR;
  b.writeBigInt64BE(BigInt(sub), 9);
  if (tombstone) b[REVISION_KEY_BYTES] = TOMBSTONE;
  return b;
}

/** Decodes a revision key, or says why `b` is not one. */
export function decodeRevisionKey(b: Uint8Array): EtcdRevision | string {
  if (b.length !== REVISION_KEY_BYTES && b.length !== REVISION_KEY_BYTES + 1) return `a revision key is 17 or 18 bytes, this one ${b.length}`;
  if (b[8] !== SEPARATOR) return `a revision key has '_' at byte 8, this one 0x${b[8]!.toString(16)}`;
  if (b.length === REVISION_KEY_BYTES + 1 && b[REVISION_KEY_BYTES] !== TOMBSTONE) return `an 18-byte revision key ends in 't', this one in 0x${b[REVISION_KEY_BYTES]!.toString(16)}`;
  const buf = Buffer.from(b.buffer, b.byteOffset, b.length);
  const main = buf.readBigInt64BE(0);
  const sub = buf.readBigInt64BE(9);
  if (main < 0n || main > BigInt(Number.MAX_SAFE_INTEGER) || sub < 0n || sub > BigInt(Number.MAX_SAFE_INTEGER)) return `revision ${main}_${sub} is out of range`;
  return { main: Number(main), sub: Number(sub), tombstone: b.length === REVISION_KEY_BYTES + 1 };
}

/** An 8-byte big-endian integer (consistent_index, authRevision, a lease id as unsigned). */
export function encodeUint64(n: number | bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
}
