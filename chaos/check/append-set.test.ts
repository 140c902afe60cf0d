// Tests of the append-set (lost acknowledged writes) check.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkAppendSet, formatAppendSetReport, type AppendAttempt } from './append-set.js';

const a = (key: string, value: string, outcome: AppendAttempt['outcome']): AppendAttempt => ({ key, value, outcome });

test('every acknowledged value present, unknown ones either way: ok', () => {
  const r = checkAppendSet([a('s1', '1', 'ok'), a('s1', '2', 'ok'), a('s1', '3', 'unknown'), a('s1', '4', 'unknown'), a('s1', '5', 'fail'), a('s2', '1', 'ok')], {
    s1: ['2', '1', '3'],
    s2: ['1'],
  });
  assert.equal(r.ok, true);
  assert.equal(r.acknowledged, 3);
  assert.equal(r.unknownPresent, 1);
  assert.equal(r.unknownAbsent, 1);
  assert.equal(r.lost, 0);
  assert.match(formatAppendSetReport(r), /^append-set: ok \(2 keys, 6 appends attempted, 3 acknowledged, 0 lost/);
});

test('lost, unexpected, failed-but-present and duplicated values are reported per key', () => {
  const r = checkAppendSet(
    [a('s1', '1', 'ok'), a('s1', '2', 'ok'), a('s1', '3', 'fail'), a('s2', 'x', 'ok'), a('s3', 'y', 'unknown')],
    new Map([
      ['s1', ['1', '3', '9']],
      ['s2', ['x', 'x']],
      ['s3', []],
    ]),
  );
  assert.equal(r.ok, false);
  const s1 = r.keys.find((k) => k.key === 's1')!;
  assert.deepEqual(s1.lost, ['2']);
  assert.deepEqual(s1.unexpected, ['9']);
  assert.deepEqual(s1.failedButPresent, ['3']);
  assert.deepEqual(r.keys.find((k) => k.key === 's2')!.duplicated, ['x']);
  assert.deepEqual(r.badKeys.map((k) => k.key), ['s1', 's2']);
  assert.equal(r.unknownAbsent, 1);
  const text = formatAppendSetReport(r);
  assert.match(text, /^append-set: FAILED .* 1 lost, 1 unexpected, 1 failed-but-present, 1 duplicated/);
  assert.match(text, /key "s1": 2 acknowledged, 3 read\n {4}lost \(acknowledged, missing\): "2"\n {4}unexpected \(never attempted\): "9"/);
});

test('a key never read is not ok; a whole key gone is all lost; values must be unique', () => {
  const unread = checkAppendSet([a('s1', '1', 'ok'), a('s2', '1', 'ok')], { s1: ['1'] });
  assert.equal(unread.ok, false);
  assert.deepEqual(unread.unreadKeys, ['s2']);
  assert.equal(unread.acknowledged, 2);
  assert.match(formatAppendSetReport(unread), /no final read for "s2"/);
  const gone = checkAppendSet([a('s1', '1', 'ok'), a('s1', '2', 'ok')], { s1: [] });
  assert.deepEqual(gone.keys[0]!.lost, ['1', '2']);
  assert.throws(() => checkAppendSet([a('s1', '1', 'ok'), a('s1', '1', 'unknown')], { s1: [] }), /appended twice/);
});

test('large sets are checked in linear time; long lists are abbreviated', () => {
  const attempts: AppendAttempt[] = [];
  const read: string[] = [];
  for (let i = 0; i < 50_000; i++) {
    attempts.push(a(`s${i % 10}`, String(i), 'ok'));
    if (i % 1000 !== 7) read.push(String(i));
  }
  const reads: Record<string, string[]> = {};
  for (const v of read) (reads[`s${Number(v) % 10}`] ??= []).push(v);
  const r = checkAppendSet(attempts, reads);
  assert.equal(r.lost, 50);
  assert.deepEqual(r.badKeys.map((k) => k.key), ['s7']); // i % 1000 = 7 implies i % 10 = 7
  assert.match(formatAppendSetReport(r, 3), /lost \(acknowledged, missing\): "7", "1007", "2007", … \(47 more\)/);
});
