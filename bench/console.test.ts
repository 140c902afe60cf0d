// `npm run console-bench` (bench/console.ts) for real, small: a node starts, the keys and both
// histories (and a key's earlier life) are written, and the table has its four rows with
// p50 <= p90 <= max. A bad flag
// prints its message and the usage and exits 2.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from './run-cli.js';

const BENCH = fileURLToPath(new URL('./console.js', import.meta.url));

test('console-bench --keys 2000 --revisions 30 --samples 3: a row per request, in order', { timeout: 180_000 }, async () => {
  const r = await runCli(BENCH, ['--keys', '2000', '--revisions', '30', '--samples', '3']);
  assert.equal(r.code, 0, r.stderr);
  const rows = r.stdout.split('\n').filter((l) => l.startsWith('| /api/'));
  const names = rows.map((l) => l.split('|')[1]!.trim());
  assert.deepEqual(
    names.slice(0, 3),
    ['/api/keys first page (100 of 2000)', '/api/history (30 revisions, consecutive)', '/api/history (30 revisions, 1 in 10)'],
    r.stdout,
  );
  // The earlier life's row names how many revisions its watch scanned, which depends on the run.
  assert.equal(names.length, 4, r.stdout);
  assert.match(names[3]!, /^\/api\/history\/earlier \(30 revisions of an earlier life, \d+ revisions scanned; 3 requests\)$/, r.stdout);
  for (const row of rows) {
    const [p50, p90, max] = row.split('|').slice(2, 5).map(Number);
    assert.ok(p50! > 0 && p50! <= p90! && p90! <= max!, row);
  }
});

test('console-bench with a bad flag: the message and the usage, exit 2', async () => {
  for (const [args, message] of [
    [['--keys', 'many'], /--keys must be a whole number of at least 1, got "many"/],
    [['--kyes', '5'], /Unknown option '--kyes'/],
  ] as const) {
    const r = await runCli(BENCH, [...args]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.match(r.stderr, /Usage: npm run console-bench/);
  }
});
