import test from 'node:test';
import assert from 'node:assert/strict';
import { prefixEnd, prefixStart } from './keys.js';

test('prefixEnd increments the last byte below 0xff, as clientv3.GetPrefixRangeEnd', () => {
  assert.deepEqual(prefixEnd(Buffer.from('app/')), Buffer.from('app0'));
  assert.deepEqual(prefixEnd(Buffer.from([0x61, 0xff])), Buffer.from([0x62]));
  assert.deepEqual(prefixEnd(Buffer.from([0xff, 0xff])), Buffer.from([0]));
  assert.deepEqual(prefixEnd(Buffer.alloc(0)), Buffer.from([0]));
});

test('prefixStart of the empty prefix is the smallest key etcd takes', () => {
  assert.deepEqual(prefixStart(Buffer.alloc(0)), Buffer.from([0]));
  assert.deepEqual(prefixStart(Buffer.from('a')), Buffer.from('a'));
});
