import { test } from 'node:test';
import assert from 'node:assert/strict';
import { covers, inReservedSpace, isValidPermissionRange, mergePerms, permitted } from './perms.js';
import { PermType, type Role } from './tables.js';
import { checkTxn, type Checks } from './requests.js';

const b = (s: string) => Buffer.from(s, 'latin1');
const role = (...perms: [string, string, number][]): Role => ({ name: b('r'), perms: perms.map(([key, end, t]) => ({ key: b(key), rangeEnd: b(end), permType: t })) });

test('a range passes only when the union of permissions covers all of it', () => {
  const p = mergePerms([role(['a', 'c', PermType.READ]), role(['c', 'e', PermType.READ])]);
  assert.ok(permitted(p.read, b('a'), b('e')));
  assert.ok(permitted(p.read, b('b'), b('d')));
  assert.ok(!permitted(p.read, b('a'), b('f')), 'reaches past the end');
  assert.ok(!permitted(p.write, b('a'), b('b')), 'read does not grant write');
  const gap = mergePerms([role(['a', 'c', PermType.READ], ['d', 'e', PermType.READ])]);
  assert.ok(!permitted(gap.read, b('a'), b('e')), 'a gap');
});

test('single keys, prefixes and from-key permissions (the spec\'s rule 5)', () => {
  const p = mergePerms([role(['k', '', PermType.READWRITE], ['p/', 'p0', PermType.READ], ['m', '\0', PermType.WRITE])]);
  assert.ok(permitted(p.read, b('k'), b('')));
  assert.ok(!permitted(p.read, b('k0'), b('')));
  assert.ok(!permitted(p.read, b('k'), b('l')), 'a range is not a key');
  assert.ok(permitted(p.read, b('p/x'), b('')));
  assert.ok(permitted(p.read, b('p/'), b('p0')));
  assert.ok(!permitted(p.read, b('p/'), b('\0')), 'from-key reaches past the prefix');
  assert.ok(permitted(p.write, b('zzz'), b('')));
  assert.ok(permitted(p.write, b('m'), b('\0')));
  assert.ok(!permitted(p.write, b('l'), b('\0')));
  assert.ok(covers(p.write, { begin: b('n'), end: b('') }));
});

test('permission ranges: a key is needed and the end must lie above it, or be "\\0"', () => {
  assert.ok(isValidPermissionRange(b('a'), b('')));
  assert.ok(isValidPermissionRange(b('a'), b('b')));
  assert.ok(isValidPermissionRange(b('a'), b('\0')));
  assert.ok(!isValidPermissionRange(b('b'), b('a')));
  assert.ok(!isValidPermissionRange(b('a'), b('a')));
  assert.ok(!isValidPermissionRange(b(''), b('a')));
});

test('the reserved key space: keys and ranges inside it, not ranges that only overlap it', () => {
  assert.ok(inReservedSpace(b('\0auth/users'), b('')));
  assert.ok(inReservedSpace(b('\0auth/'), b('\0auth0')));
  assert.ok(!inReservedSpace(b('\0'), b('\0')));
  assert.ok(!inReservedSpace(b('\0auth/'), b('\0')));
  assert.ok(!inReservedSpace(b('auth/x'), b('')));
});

test('a Txn needs read on compares and ranges, write on puts and deletes, nested Txns included', () => {
  const seen: string[] = [];
  const c: Checks = {
    read: (k, e) => void seen.push(`r ${Buffer.from(k)}-${Buffer.from(e)}`),
    write: (k, e) => void seen.push(`w ${Buffer.from(k)}-${Buffer.from(e)}`),
    leaseKeys: () => void seen.push('lease'),
  };
  checkTxn(c, {
    compare: [{ key: b('c'), rangeEnd: b('') }],
    success: [{ requestPut: { key: b('p'), lease: 0, prevKv: true } }, { requestTxn: { compare: [], success: [{ requestDeleteRange: { key: b('d'), rangeEnd: b('e'), prevKv: false } }], failure: [] } }],
    failure: [{ requestRange: { key: b('r'), rangeEnd: b('s') } }],
  });
  assert.deepEqual(seen, ['r c-', 'w p-', 'lease', 'r p-', 'w d-e', 'r r-s']);
});
