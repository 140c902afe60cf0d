import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Lockout, LOCKOUT } from './lockout.js';

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
