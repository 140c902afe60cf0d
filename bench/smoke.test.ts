// Smoke test of the benchmark suite: a --quick run of seq-put, seq-put-store-local (kvs on a
// local-directory object store), seq-get and watch against kvs and etcd must produce a JSON report with positive throughput for both systems and ordered
// percentiles. No timing thresholds: this checks the machinery, not the numbers.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Report } from './report.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));
const KVS_BIN = fileURLToPath(new URL('../../bin/kvs.js', import.meta.url));

test('bench --quick runs seq-put, seq-put-store-local, seq-get and watch against kvs and etcd', { timeout: 90_000 }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-bench-smoke-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'results.json');

  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT; // the child is a plain program, not a test file
  const child = spawn(process.execPath, [MAIN, '--quick', '--workloads', 'seq-put,seq-put-store-local,seq-get,watch', '--out', out], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b));
  child.stderr.on('data', (b: Buffer) => (output += b));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, `bench exited with ${code}:\n${output}`);

  const report = JSON.parse(await readFile(out, 'utf8')) as Report;
  assert.equal(report.mode, 'kvs-vs-etcd');
  assert.ok(report.machine.cores > 0);
  assert.ok(report.machine.fsync.p50 > 0);
  assert.deepEqual(report.workloads.map((w) => w.workload), ['seq-put', 'seq-put-store-local', 'seq-get', 'watch']);
  for (const w of report.workloads) {
    assert.deepEqual(w.results.map((r) => r.system).sort(), ['etcd', 'kvs'], w.workload);
    for (const r of w.results) {
      const what = `${w.workload} on ${r.system}`;
      assert.equal(r.errors, 0, `${what}: ${r.firstError}`);
      assert.ok(r.opsPerSec > 0, `${what}: ops/s ${r.opsPerSec}`);
      const l = r.latencyMs!;
      assert.ok(l.p50 > 0 && l.p50 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max, `${what}: ${JSON.stringify(l)}`);
      assert.ok(r.cpuSeconds.server !== null && r.cpuSeconds.server >= 0, `${what}: server CPU`);
    }
    assert.ok(w.ratios && w.ratios.opsPerSec! > 0, `${w.workload}: ratio`);
  }
  assert.match(output, /\| seq-put/);
  assert.match(output, /\| seq-put-store-local/);
});

test('kvs bench: the RGW workloads need --rgw', async () => {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn(process.execPath, [KVS_BIN, 'bench', '--workloads', 'seq-put-store-rgw'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stderr.on('data', (b: Buffer) => (output += b));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 2);
  assert.match(output, /seq-put-store-rgw need --rgw \(Ceph RGW\)/);
});
