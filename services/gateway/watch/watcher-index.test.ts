import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WatcherIndex } from './watcher-index.js';
import { contains, isPrefixRange, prefixEnd, watchRange, type KeyRange } from './key-range.js';

const b = (s: string) => Buffer.from(s, 'latin1');
const range = (key: string, end?: string) => watchRange(b(key), b(end ?? ''));

function matches<T>(idx: WatcherIndex<T>, key: string): T[] {
  const out: T[] = [];
  idx.match(b(key), (x) => out.push(x));
  return out.sort();
}

test('key ranges: the forms etcd accepts', () => {
  assert.equal(range('a').end, undefined);
  assert.equal(range('a', '\0').end, null);
  assert.deepEqual(range('', 'b').key, b('\0'), 'an empty key is "\\0"');
  assert.equal(isPrefixRange(range('ab', 'ac')), true);
  assert.equal(isPrefixRange(range('a\xff', 'b')), true);
  assert.equal(isPrefixRange(range('\xff\xff', '\0')), true);
  assert.equal(isPrefixRange(range('ab', 'ad')), false);
  assert.deepEqual(prefixEnd(b('a\xff\xff')), b('b'));
  assert.equal(contains(range('b', 'd'), b('c')), true);
  assert.equal(contains(range('b', 'd'), b('d')), false);
  assert.equal(contains(range('b', '\0'), b('zzz')), true);
});

test('the index finds exactly the watchers whose range holds a key', () => {
  const idx = new WatcherIndex<string>();
  const all: [string, KeyRange][] = [
    ['key a', range('a')],
    ['key ab', range('ab')],
    ['prefix a', range('a', 'b')],
    ['prefix ab', range('ab', 'ac')],
    ['prefix a\\xff', range('a\xff', 'b')],
    ['range b-d', range('b', 'd')],
    ['from c', range('c', '\0')],
    ['range a-ab', range('a', 'ab')],
  ];
  for (const [name, r] of all) idx.add(r, name);
  assert.equal(idx.size, all.length);
  assert.deepEqual(idx.counts(), { keys: 2, prefixes: 3, ranges: 3 });
  // Against the definition, for a spread of keys.
  for (const key of ['a', 'aa', 'ab', 'abc', 'a\xff', 'a\xff\x01', 'b', 'c', 'cz', 'd', 'z', '\0']) {
    const want = all.filter(([, r]) => contains(r, b(key))).map(([n]) => n).sort();
    assert.deepEqual(matches(idx, key), want, `key ${JSON.stringify(key)}`);
  }
  for (const [name, r] of all) idx.remove(r, name);
  assert.equal(idx.size, 0);
  assert.deepEqual(idx.counts(), { keys: 0, prefixes: 0, ranges: 0 });
  assert.deepEqual(matches(idx, 'ab'), []);
});

test('several watchers on one prefix; removing one keeps the others', () => {
  const idx = new WatcherIndex<number>();
  for (let i = 0; i < 5; i++) idx.add(range('p/', 'p0'), i);
  idx.remove(range('p/', 'p0'), 2);
  assert.deepEqual(matches(idx, 'p/x'), [0, 1, 3, 4]);
  assert.deepEqual(idx.counts().prefixes, 1);
});
