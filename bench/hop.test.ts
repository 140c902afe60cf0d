// `npm run hop` (bench/hop.ts) for real: each transport's echo process starts, every round trip
// comes back, and the table has a row per transport with p50 <= p90 <= p99. No timing
// thresholds. A bad flag prints its message and the usage and exits 2.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const HOP = fileURLToPath(new URL('./hop.js', import.meta.url));

async function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT; // the child is a plain program, not a test file
  const child = spawn(process.execPath, [HOP, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b));
  child.stderr.on('data', (b: Buffer) => (stderr += b));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, stdout, stderr };
}

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
