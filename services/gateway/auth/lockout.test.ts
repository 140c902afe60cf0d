import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Lockout, LOCKOUT, lockoutKey } from './lockout.js';

test('5 consecutive failures within 5 minutes lock a name for 15 minutes', () => {
  let now = 1_000_000;
  const l = new Lockout(() => now);
  for (let i = 0; i < 4; i++) assert.equal(l.fail('u'), false);
  assert.equal(l.locked('u'), false);
  assert.equal(l.fail('u'), true);
  assert.equal(l.locked('u'), true);
  assert.equal(l.locked('other'), false);
  now += LOCKOUT.lockMs - 1;
  assert.equal(l.locked('u'), true);
  now += 1;
  assert.equal(l.locked('u'), false, 'the lock runs out');
  assert.equal(l.fail('u'), false, 'and the count starts again');
});

test('failures spread over more than 5 minutes, or broken by a success, do not lock', () => {
  let now = 0;
  const l = new Lockout(() => now);
  for (let i = 0; i < 10; i++) {
    assert.equal(l.fail('slow'), false);
    now += LOCKOUT.windowMs / 4 + 1;
  }
  for (let i = 0; i < 4; i++) l.fail('mixed');
  l.succeed('mixed');
  assert.equal(l.fail('mixed'), false);
  assert.equal(l.locked('mixed'), false);
});

test('a flood of distinct names stays bounded', () => {
  const l = new Lockout(() => 0);
  for (let i = 0; i < LOCKOUT.maxEntries + 1000; i++) l.fail(`n${i}`);
  assert.ok(l.size <= LOCKOUT.maxEntries);
});

test('names of a megabyte are kept as a short digest (a flood of them holds little), and lock like any name', () => {
  const big = 'x'.repeat(1 << 20);
  const a = `${big}a`;
  const b = `${big}b`;
  assert.ok(lockoutKey(a).length <= 64);
  assert.notEqual(lockoutKey(a), lockoutKey(b));
  assert.equal(lockoutKey('alice'), 'alice', 'short names are kept as they are');
  const l = new Lockout(() => 1_000_000);
  for (let i = 0; i < 5; i++) l.fail(a);
  assert.equal(l.locked(a), true);
  assert.equal(l.locked(b), false, 'a name differing in its last character is another name');
  l.succeed(a);
  assert.equal(l.locked(a), false);
});
