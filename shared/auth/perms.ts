// etcd's permission rules (auth/range_perm_cache.go and pkg/adt), as pure functions.
//
// A permission is an interval of keys: [key, range_end), a single key when range_end is empty
// (the point [key, key+"\0")), or [key, +inf) when range_end is "\0" (from-key). etcd compares
// interval ends as "BytesAffine": the empty byte string is +inf. A user's permissions are the
// union over their roles, and a request's range passes only when that union covers ALL of it
// (etcd's IntervalTree.Contains); a single key passes when some permission contains it.
import type { Permission, Role } from './tables.js';
import { PermType } from './tables.js';
import { asBuffer as asBuf } from '../bytes.js';

export interface Interval {
  begin: Buffer;
  /** Exclusive; empty means +inf. */
  end: Buffer;
}

/** etcd's BytesAffineComparable.Compare: the empty string is greater than everything else. */
export function affineCompare(a: Uint8Array, b: Uint8Array): number {
  if (a.length === 0) return b.length === 0 ? 0 : 1;
  if (b.length === 0) return -1;
  return Buffer.compare(a, b);
}

/** etcd's Interval.Compare: -1 when a lies left of b, 1 when right of it, 0 when they overlap. */
export function intervalCompare(a: Interval, b: Interval): number {
  if (affineCompare(a.begin, b.begin) < 0 && affineCompare(a.end, b.begin) <= 0) return -1;
  if (affineCompare(a.begin, b.end) >= 0) return 1;
  return 0;
}

const ZERO = Buffer.from([0]);
const EMPTY = Buffer.alloc(0);

export function point(key: Uint8Array): Interval {
  return { begin: asBuf(key), end: Buffer.concat([key, ZERO]) };
}

const isOpenEnded = (end: Uint8Array) => end.length === 1 && end[0] === 0;

/** The interval a stored permission grants. */
export function permissionInterval(p: Pick<Permission, 'key' | 'rangeEnd'>): Interval {
  if (p.rangeEnd.length === 0) return point(p.key);
  return { begin: asBuf(p.key), end: isOpenEnded(p.rangeEnd) ? EMPTY : asBuf(p.rangeEnd) };
}

/**
 * etcd's isValidPermissionRange: a key is needed, and a range_end must lie above it (or be
 * "\0", from-key). Anything else is refused with "invalid auth management".
 */
export function isValidPermissionRange(key: Uint8Array, rangeEnd: Uint8Array): boolean {
  if (key.length === 0) return false;
  if (rangeEnd.length === 0) return true;
  return affineCompare(key, rangeEnd) < 0 || isOpenEnded(rangeEnd);
}

/** A user's merged permissions: what they may read and what they may write. */
export interface UserPerms {
  read: Interval[];
  write: Interval[];
}

/** Merges the permissions of a user's roles (missing roles grant nothing), each list sorted by begin. */
export function mergePerms(roles: (Role | undefined)[]): UserPerms {
  const read: Interval[] = [];
  const write: Interval[] = [];
  for (const role of roles) {
    if (!role) continue;
    for (const p of role.perms) {
      const ivl = permissionInterval(p);
      if (p.permType === PermType.READ || p.permType === PermType.READWRITE) read.push(ivl);
      if (p.permType === PermType.WRITE || p.permType === PermType.READWRITE) write.push(ivl);
    }
  }
  const byBegin = (a: Interval, b: Interval) => affineCompare(a.begin, b.begin);
  return { read: read.sort(byBegin), write: write.sort(byBegin) };
}

/**
 * etcd's IntervalTree.Contains: the permissions overlapping `q`, in order of their start, must
 * join without a gap, start at or before q's start and reach q's end.
 */
export function covers(perms: Interval[], q: Interval): boolean {
  let minBegin: Buffer | undefined;
  let maxEnd: Buffer = EMPTY;
  for (const p of perms) {
    if (intervalCompare(q, p) !== 0) continue;
    if (minBegin === undefined) {
      minBegin = p.begin;
      maxEnd = p.end;
      continue;
    }
    if (affineCompare(maxEnd, p.begin) < 0) return false;
    if (affineCompare(p.end, maxEnd) > 0) maxEnd = p.end;
  }
  return minBegin !== undefined && affineCompare(maxEnd, q.end) >= 0 && affineCompare(minBegin, q.begin) <= 0;
}

/** etcd's IntervalTree.Intersects for a single key. */
export function containsKey(perms: Interval[], key: Uint8Array): boolean {
  const q = point(key);
  return perms.some((p) => intervalCompare(q, p) === 0);
}

/**
 * Whether `perms` allow an operation on key (with range_end, as the request gives it): a single
 * key when range_end is empty, a from-key range when it is "\0", else [key, range_end).
 */
export function permitted(perms: Interval[], key: Uint8Array, rangeEnd: Uint8Array): boolean {
  if (rangeEnd.length === 0) return containsKey(perms, key);
  return covers(perms, { begin: asBuf(key), end: isOpenEnded(rangeEnd) ? EMPTY : asBuf(rangeEnd) });
}

/** The reserved key space: keys starting with "\0auth/". */
export const RESERVED_PREFIX = Buffer.from('\0auth/', 'latin1');
const RESERVED_END = Buffer.from('\0auth0', 'latin1');

/**
 * A request for key (range_end) lies inside the reserved space: a single key under the prefix,
 * or a range whose both ends are in it. A range that merely overlaps it is allowed: the auth
 * state is not stored in the key space, so such a range can only return ordinary keys.
 */
export function inReservedSpace(key: Uint8Array, rangeEnd: Uint8Array): boolean {
  const k = asBuf(key);
  if (!k.subarray(0, RESERVED_PREFIX.length).equals(RESERVED_PREFIX)) return false;
  if (rangeEnd.length === 0) return true;
  if (isOpenEnded(rangeEnd)) return false;
  return Buffer.compare(asBuf(rangeEnd), RESERVED_END) <= 0;
}
