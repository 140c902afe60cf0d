// `npm run hop` (bench/hop.ts) for real: each transport's echo process starts, every round trip
// comes back, and the table has a row per transport with p50 <= p90 <= p99. No timing
// thresholds. A bad flag prints its message and the usage and exits 2.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from './run-cli.js';

const HOP = fileURLToPath(new URL('./hop.js', import.meta.url));

const run = (args: string[]) => runCli(HOP, args);

test('hop --round-trips 50: a row per transport, percentiles in order', { timeout: 60_000 }, async () => {
  const r = await run(['--round-trips', '50']);
  assert.equal(r.code, 0, r.stderr);
  const rows = r.stdout.split('\n').filter((l) => /^\| (grpc-js|h2|unix) \|/.test(l));
  assert.deepEqual(rows.map((l) => l.split('|')[1]!.trim()), ['grpc-js', 'h2', 'unix'], r.stdout);
  for (const row of rows) {
    const [p50, p90, p99, sender, echo] = row.split('|').slice(2, 7).map(Number);
    assert.ok(p50! > 0 && p50! <= p90! && p90! <= p99!, row);
    assert.ok(sender! > 0 && echo! > 0, row);
  }
});

test('hop with an unknown transport: the message and the usage, exit 2', async () => {
  const r = await run(['--transports', 'h2,carrier-pigeon']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown transport "carrier-pigeon" \(grpc-js, h2, unix\)/);
  assert.match(r.stderr, /Usage: npm run hop/);
});
