import { test } from 'node:test';
import assert from 'node:assert/strict';
import { COMMIT_DELAY_ENV, DelayedCommits, commitDelayMs } from './commit-delay.js';

test('the commit-delay failpoint is off unless its variable is set, and refuses a value that is not a delay', () => {
  assert.equal(commitDelayMs({}), 0);
  assert.equal(commitDelayMs({ [COMMIT_DELAY_ENV]: '' }), 0);
  assert.equal(commitDelayMs({ [COMMIT_DELAY_ENV]: '5' }), 5);
  assert.throws(() => commitDelayMs({ [COMMIT_DELAY_ENV]: 'soon' }), /KVS_FAILPOINT_COMMIT_DELAY_MS=soon/);
  assert.throws(() => commitDelayMs({ [COMMIT_DELAY_ENV]: '-1' }), /expected a number of milliseconds/);
});

test('delayed commit positions reach storage in order, each the delay after it came, and none after the stream ended', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const released: number[] = [];
  const d = new DelayedCommits(20, (c) => released.push(c));
  assert.equal(d.hold(3), 0, 'nothing may be applied yet');
  t.mock.timers.tick(10);
  assert.equal(d.hold(5), 0);
  assert.equal(d.hold(5), 0, 'a position said again is not scheduled twice');
  assert.equal(d.hold(4), 0, 'nor one below what is scheduled');
  t.mock.timers.tick(10);
  assert.deepEqual(released, [3]);
  assert.equal(d.hold(5), 3, 'what was released may be applied with the next message');
  t.mock.timers.tick(10);
  assert.deepEqual(released, [3, 5]);
  d.hold(9);
  d.cancel();
  t.mock.timers.tick(100);
  assert.deepEqual(released, [3, 5]);
});
