// Tests of the report printers: the verdict line, the text timeline, the HTML/SVG page.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkLinearizability } from './linearizability.js';
import { formatReport, renderHtml, textTimeline } from './render.js';
import { normalise, type KvOperation } from './history.js';
import { simulateRegister } from './simulate.js';

const put = (client: number, value: string, call: number, ret?: number): KvOperation =>
  ret === undefined ? { client, key: 'k', input: { f: 'put', value }, call } : { client, key: 'k', input: { f: 'put', value }, call, return: ret, output: {} };
const get = (client: number, value: string | null, call: number, ret: number): KvOperation => ({ client, key: 'k', input: { f: 'get' }, call, return: ret, output: { value } });

test('a linearizable history prints "linearizable: yes" and nothing more', () => {
  const text = formatReport(checkLinearizability(simulateRegister({ seed: 1, clients: 3, ops: 50 })));
  assert.match(text, /^linearizable: yes \(\d+ operations on 1 key, 0 with unknown outcome/);
  assert.equal(text.split('\n').length, 1);
});

test('a violation prints "linearizable: no", the timeline, the table and the explanation', () => {
  const h = [put(1, '1', 0, 1_000_000), put(1, '2', 2_000_000, 3_000_000), put(3, 'lost', 500_000), get(2, '1', 4_000_000, 5_000_000)];
  const text = formatReport(checkLinearizability(h));
  const lines = text.split('\n');
  assert.match(lines[0]!, /^linearizable: no \(1 of 1 keys fail/);
  assert.match(text, /key "k": not linearizable — counterexample of 3 operations \(from 4, shrunk to a minimum\)/);
  // one row per client, bars with labels, the blocked read drawn with '#'
  const c1 = lines.find((l) => l.startsWith('c1 '))!;
  const c2 = lines.find((l) => l.startsWith('c2 '))!;
  assert.match(c1, /\[-+A put "1"-+\]\s+\[-+B put "2"-+\]/);
  assert.match(c2, /\[#+C get → "1"#+\]/);
  // the read starts after the second write returned: its bar starts to the right
  assert.ok(c2.indexOf('[') > c1.lastIndexOf(']'));
  assert.match(text, /C\s+#3\s+client 2\s+get → "1"\s+call\s+\+4\.000 ms\s+return\s+\+5\.000 ms\s+<- cannot be placed/);
  assert.match(text, /The longest order found is A → B, leaving the key "2"\./);
});

test('unknown outcomes are drawn open-ended, and a client that gave up gets a second row', () => {
  const { ops } = normalise([put(1, 'a', 0), put(1, 'b', 10, 20), get(2, 'a', 30, 40)]);
  const t = textTimeline(ops);
  const rows = t.split('\n');
  assert.equal(rows.length, 3);
  assert.match(rows[0]!, /^c1\s+\[~+A put "a" \?~+>$/);
  assert.match(rows[1]!, /^c1 \(2\)\s+\[-+B put "b"-+\]/);
  assert.match(rows[2]!, /^c2\s+\[-+C get → "a"-+\]/);
});

test('an undecided history prints "linearizable: unknown", never yes', () => {
  const h: KvOperation[] = [];
  for (let i = 0; i < 25; i++) h.push(put(i, `v${i}`, 0, 100), get(100 + i, `v${i}`, 0, 100));
  h.push(put(200, 'z', 200, 210), get(201, 'v0', 220, 230));
  const text = formatReport(checkLinearizability(h, { maxStepsPerKey: 5000 }));
  assert.match(text, /^linearizable: unknown .*the search budget ran out on "k" \(steps budget/);
});

test('the HTML page has the verdict, an SVG per counterexample and escapes what it shows', () => {
  const h = [put(1, '<b>&', 0, 10), get(2, null, 20, 30)];
  const html = renderHtml(checkLinearizability(h));
  assert.match(html, /^<!doctype html>/);
  assert.match(html, /linearizable: no/);
  assert.equal((html.match(/<svg /g) ?? []).length, 1);
  assert.ok(html.includes('&lt;b&gt;&amp;'));
  assert.ok(!html.includes('"<b>&"'));
  assert.match(html, /fill="#fca5a5"/); // the blocked operation
});
