// `npm run event-lag` (bench/event-lag.ts) against a real kvs and a real etcd 3.4: every put's
// event reaches the watcher (the run would hang otherwise), a row per system with its
// percentiles in order. No timing thresholds. A bad flag prints its message and the usage.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from './run-cli.js';

const EVENT_LAG = fileURLToPath(new URL('./event-lag.js', import.meta.url));

const run = (args: string[]) => runCli(EVENT_LAG, args);

test('event-lag --puts 50 --rounds 1: a row per system, every event seen, percentiles in order', { timeout: 120_000 }, async () => {
  const r = await run(['--puts', '50', '--rounds', '1']);
  assert.equal(r.code, 0, r.stderr);
  const rows = r.stdout.split('\n').filter((l) => /^\| 1 \| (kvs|etcd) \|/.test(l));
  assert.deepEqual(rows.map((l) => l.split('|')[2]!.trim()), ['kvs', 'etcd'], r.stdout);
  for (const row of rows) {
    const cells = row.split('|').map((c) => c.trim());
    for (const cell of cells.slice(3, 6)) {
      const [p50, p90, p99] = cell.split(' / ').map(Number);
      assert.ok(p50! >= 0 && p50! <= p90! && p90! <= p99!, row);
    }
    const first = /^(\d+) of 50$/.exec(cells[6]!);
    assert.ok(first && Number(first[1]) <= 50, row);
  }
});

test('event-lag with an unknown system: the message and the usage, exit 2', async () => {
  const r = await run(['--systems', 'kvs,zookeeper']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown system "zookeeper" \(kvs, etcd\)/);
  assert.match(r.stderr, /Usage: npm run event-lag/);
});
