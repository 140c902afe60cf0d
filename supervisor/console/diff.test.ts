// console/diff.js is the browser's own module (plain JavaScript, not compiled): loaded by path.
import test from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { CONSOLE_DIR } from './api.js';

const { lineDiff } = (await import(pathToFileURL(path.join(CONSOLE_DIR, 'diff.js')).href)) as { lineDiff: (a: string, b: string, max?: number) => { op: string; line: string }[] };
const show = (a: string, b: string, max?: number) => lineDiff(a, b, max).map((d) => `${d.op}${d.line}`);

test('lineDiff: the changed lines between common head and tail', () => {
  assert.deepEqual(show('a\nb\nc', 'a\nB\nc'), [' a', '-b', '+B', ' c']);
  assert.deepEqual(show('a\nc', 'a\nb\nc'), [' a', '+b', ' c']);
  assert.deepEqual(show('same', 'same'), [' same']);
  assert.deepEqual(show('', 'x'), ['-', '+x']);
  assert.deepEqual(show('x\ny\nz', 'y\nz\nw'), ['-x', ' y', ' z', '+w']);
});

test('lineDiff: texts past the line cap are shown whole, old then new', () => {
  assert.deepEqual(show('a\nb\nc', 'a\nb\nd', 2), ['-a', '-b', '-c', '+a', '+b', '+d']);
});
