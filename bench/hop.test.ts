// `npm run hop` (bench/hop.ts) for real: each transport's echo process starts, every round trip
// comes back, and the table has a row per transport with p50 <= p90 <= p99. No timing
// thresholds but one that only a round trip counting its sleeps can miss. A bad flag prints its message and the usage and exits 2.
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
    const [p50, p90, p99, there, back, sender, echo] = row.split('|').slice(2, 9).map(Number);
    assert.ok(p50! > 0 && p50! <= p90! && p90! <= p99!, row);
    assert.ok(there! > 0 && back! > 0, row);
    assert.ok(sender! > 0 && echo! > 0, row);
  }
});

test('hop --idle-ms 20: each side sleeps before it sends, and the round trip leaves the sleeps out', { timeout: 60_000 }, async () => {
  const r = await run(['--round-trips', '20', '--idle-ms', '20', '--transports', 'unix']);
  assert.equal(r.code, 0, r.stderr);
  const row = r.stdout.split('\n').find((l) => l.startsWith('| unix |'));
  assert.ok(row, r.stdout);
  const [p50, , , there, back] = row.split('|').slice(2, 9).map(Number);
  assert.ok(there! > 0 && back! > 0, row);
  // From the send to the answer's arrival the echo sleeps 20 ms: counting that in would put
  // the median above it.
  assert.ok(p50! > 0 && p50! < 20_000, row);
});

test('hop --idle-ms soon: the message and the usage, exit 2', async () => {
  const r = await run(['--idle-ms', 'soon']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--idle-ms takes a whole number of milliseconds, 0 or more/);
});

test('hop with an unknown transport: the message and the usage, exit 2', async () => {
  const r = await run(['--transports', 'h2,carrier-pigeon']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /unknown transport "carrier-pigeon" \(grpc-js, h2, unix\)/);
  assert.match(r.stderr, /Usage: npm run hop/);
});
