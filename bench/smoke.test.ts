// Smoke test of the benchmark suite: a --quick run of seq-put, seq-put-store-local (kvs on a
// local-directory object store), seq-get and watch against kvs and etcd must produce a JSON report with positive throughput for both systems and ordered
// percentiles; so must a --quick run of json-seq-put and json-par-get (etcd's JSON gateway over
// HTTP/1.1); a --quick run of cluster-par-get (linearizable gets on a follower) and
// cluster-failover (one kill -9 of the leader) against three-member clusters of both must too;
// so must a --quick run with --client go (etcd's Go client as the load generator; skipped when
// go is not installed). The put workloads' results carry the WAL fsyncs scraped from both
// servers' metrics. No timing thresholds: this checks the machinery, not the numbers.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { goVersion } from './go-client.js';
import type { Report } from './report.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

type Result = Report['workloads'][number]['results'][number];

/** A timed workload's result: no errors, some throughput, ordered latency percentiles. */
function assertMeasured(r: Result, what: string): void {
  assert.equal(r.errors, 0, `${what}: ${r.firstError}`);
  assert.ok(r.opsPerSec > 0, `${what}: ops/s ${r.opsPerSec}`);
  const l = r.latencyMs!;
  assert.ok(l.p50 > 0 && l.p50 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max, `${what}: ${JSON.stringify(l)}`);
}

/** Runs `node <script> ...args` as a user would (not as a test file); its exit code and its output. */
async function run(script: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; output: string }> {
  const childEnv = { ...env };
  delete childEnv.NODE_TEST_CONTEXT; // the child is a plain program, not a test file
  const child = spawn(process.execPath, [script, ...args], { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b));
  child.stderr.on('data', (b: Buffer) => (output += b));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, output };
}

/** A directory for the test, removed after it. */
async function scratchDir(t: TestContext, prefix = 'kvs-bench-smoke-'): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs the bench with `args` and its report in a scratch directory; it must exit 0. Its report and its output. */
async function benchReport(t: TestContext, args: string[]): Promise<{ report: Report; output: string }> {
  const out = path.join(await scratchDir(t), 'results.json');
  const { code, output } = await run(MAIN, [...args, '--out', out]);
  assert.equal(code, 0, `bench exited with ${code}:\n${output}`);
  return { report: JSON.parse(await readFile(out, 'utf8')) as Report, output };
}

/**
 * The report holds `workloads`, in that order, each run on both systems; every result is
 * measured (assertMeasured) and passes `check` (`what`: the workload on the system, for messages).
 */
function assertResults(report: Report, workloads: string[], check: (r: Result, what: string, workload: string) => void): void {
  assert.deepEqual(report.workloads.map((w) => w.workload), workloads);
  for (const w of report.workloads) {
    assert.deepEqual(w.results.map((r) => r.system).sort(), ['etcd', 'kvs'], w.workload);
    for (const r of w.results) {
      const what = `${w.workload} on ${r.system}`;
      assertMeasured(r, what);
      check(r, what, w.workload);
    }
  }
}

/** Each workload has its kvs-to-etcd ratio of ops/s. */
function assertRatios(report: Report): void {
  for (const w of report.workloads) assert.ok(w.ratios && w.ratios.opsPerSec! > 0, `${w.workload}: ratio`);
}

const KVS_BIN = fileURLToPath(new URL('../../bin/kvs.js', import.meta.url));

test('bench --quick runs seq-put, seq-put-store-local, seq-get and watch against kvs and etcd', { timeout: 90_000 }, async (t) => {
  const { report, output } = await benchReport(t, ['--quick', '--workloads', 'seq-put,seq-put-store-local,seq-get,watch']);
  assert.equal(report.mode, 'kvs-vs-etcd');
  assert.ok(report.machine.cores > 0);
  assert.ok(report.machine.fsync.p50 > 0);
  assertResults(report, ['seq-put', 'seq-put-store-local', 'seq-get', 'watch'], (r, what, workload) => {
    assert.ok(r.cpuSeconds.server !== null && r.cpuSeconds.server >= 0, `${what}: server CPU`);
    for (const k of ['fsyncs', 'fsyncsPerSec', 'opsPerFsync'] as const) {
      assert.ok(k in r && (r[k] === null || (typeof r[k] === 'number' && Number.isFinite(r[k]))), `${what}: ${k} ${r[k]}`);
    }
    if (workload.startsWith('seq-put')) {
      // Every put appends to the WAL with an fdatasync: both servers' counters moved.
      assert.ok(r.fsyncs! > 0 && r.fsyncsPerSec! > 0 && r.opsPerFsync! > 0, `${what}: fsyncs ${r.fsyncs}, ${r.fsyncsPerSec}/s, ${r.opsPerFsync} ops per fsync`);
    } else {
      assert.deepEqual([r.fsyncs, r.fsyncsPerSec, r.opsPerFsync], [null, null, null], `${what}: not a write workload`);
    }
  });
  assertRatios(report);
  assert.match(output, /\| fsyncs\/s \| ops\/fsync \|/);
  assert.match(output, /\| seq-put/);
  assert.match(output, /\| seq-put-store-local/);
});

test('bench --quick runs json-seq-put and json-par-get (the JSON gateway over HTTP/1.1) against kvs and etcd', { timeout: 90_000 }, async (t) => {
  const { report, output } = await benchReport(t, ['--quick', '--workloads', 'json-seq-put,json-par-get']);
  // A request counts only if its answer was a 200 that parsed as JSON and held what was asked.
  assertResults(report, ['json-seq-put', 'json-par-get'], (r, what) => assert.ok(r.bytes > 0, `${what}: bytes`));
  assertRatios(report);
  for (const r of report.workloads[0]!.results) assert.ok(r.fsyncs! > 0, `json-seq-put on ${r.system}: fsyncs ${r.fsyncs}`);
});

test('bench --kvs-flags passes its flags to kvs run: an unknown one stops the node, and the run', { timeout: 60_000 }, async (t) => {
  const dir = await scratchDir(t);
  const { code, output } = await run(MAIN, ['--quick', '--systems', 'kvs', '--workloads', 'seq-put', '--kvs-flags=--log-level warn  --no-such-flag', '--out', path.join(dir, 'results.json')]);
  assert.equal(code, 1, output);
  assert.match(output, /kvs: unknown flag --no-such-flag/);
  const both = await run(MAIN, ['--kvs-flags=--log-level warn', '--endpoints', '127.0.0.1:1']);
  assert.equal(both.code, 2);
  assert.match(both.output, /--kvs-flags: not with --endpoints/);
});

test('kvs bench: the RGW workloads need --rgw', async () => {
  const { code, output } = await run(KVS_BIN, ['bench', '--workloads', 'seq-put-store-rgw']);
  assert.equal(code, 2);
  assert.match(output, /seq-put-store-rgw need --rgw \(Ceph RGW\)/);
});

test('bench --quick runs cluster-par-get and cluster-failover against 3-member kvs and etcd clusters', { timeout: 240_000 }, async (t) => {
  const { report, output } = await benchReport(t, ['--quick', '--workloads', 'cluster-par-get,cluster-failover']);
  assert.equal(report.settings.clusterNodes, 3);
  assert.deepEqual(report.workloads.map((w) => w.workload), ['cluster-par-get', 'cluster-failover']);
  const [get, failover] = report.workloads;
  for (const r of get!.results) {
    assert.equal(r.errors, 0, `cluster-par-get on ${r.system}: ${r.firstError}`);
    assert.ok(r.opsPerSec > 0, `cluster-par-get on ${r.system}: ops/s ${r.opsPerSec}`);
    assert.equal(r.metrics.leaderChanged, undefined, `cluster-par-get on ${r.system}: the leader changed`);
    // The whole cluster's processes: kvs three supervisors' families, etcd three members.
    assert.ok(Object.keys(r.cpuSeconds.byServerProcess ?? {}).length > 0);
  }
  assert.ok(get!.ratios && get!.ratios.opsPerSec! > 0);
  assert.deepEqual(failover!.results.map((r) => r.system).sort(), ['etcd', 'kvs']);
  for (const r of failover!.results) {
    assert.equal(r.errors, 0, `cluster-failover on ${r.system}: ${r.firstError}`);
    assert.equal(r.metrics.failoverRounds, 1);
    assert.ok(r.metrics.failoverMs! > 0, `cluster-failover on ${r.system}: ${JSON.stringify(r.metrics)}`);
  }
  assert.ok(failover!.ratios && failover!.ratios.failoverMs! > 0);
  assert.match(output, /\| cluster-failover/);
});

test('kvs bench: the cluster workloads are not for --endpoints', async () => {
  const { code, output } = await run(KVS_BIN, ['bench', '--endpoints', '127.0.0.1:1', '--workloads', 'cluster-seq-put']);
  assert.equal(code, 2);
  assert.match(output, /cluster-seq-put start clusters of their own: not with --endpoints/);
});

// `--client go` (bench/go-client.ts, bench/go/src/kvsbench): etcd's clientv3 as the load
// generator. CI need not install Go, so this one is skipped when `go` is not on PATH, and only
// then; with go but without golang-etcd-server-dev it fails, with the message saying what to install.
const GO = goVersion();

test('bench --quick --client go runs seq-put, par-get, mixed and range with etcd\'s Go client against kvs and etcd', { timeout: 300_000, skip: GO ? false : 'go is not installed (apt-get install golang-go golang-etcd-server-dev to run it)' }, async (t) => {
  // The first build of the Go load generator takes ~45 s; later ones find it up to date.
  const { report, output } = await benchReport(t, ['--quick', '--client', 'go', '--workloads', 'seq-put,par-get,mixed,range']);
  assert.equal(report.settings.client, 'go');
  assertResults(report, ['seq-put', 'par-get', 'mixed', 'range'], (r, what) => {
    assert.ok(r.bytes > 0, `${what}: bytes ${r.bytes}`);
    // The Go processes' CPU, from /proc/<pid>/stat as for the Node ones.
    assert.ok(r.cpuSeconds.client > 0, `${what}: client CPU ${r.cpuSeconds.client}`);
  });
  // range's first response of each client is checked to hold 1,000 key-values; MB/s follows from bytes.
  for (const r of report.workloads[3]!.results) assert.ok(r.metrics.mbPerSec! > 0, `range on ${r.system}: MB/s`);
  assert.match(output, /go client/);
});

test('kvs bench --client go refuses the workloads it does not run, naming them', async () => {
  const { code, output } = await run(KVS_BIN, ['bench', '--client', 'go', '--workloads', 'seq-put,watch,size']);
  assert.equal(code, 2);
  assert.match(output, /--client go does not run watch, size \(/);
});

test('kvs bench --client go without go says what to install', async (t) => {
  // A PATH without go (node is started by its absolute path).
  const dir = await scratchDir(t, 'kvs-bench-nogo-');
  const { code, output } = await run(MAIN, ['--client', 'go', '--workloads', 'seq-put'], { ...process.env, PATH: dir });
  assert.equal(code, 1);
  assert.match(output, /--client go needs Debian's golang-go and golang-etcd-server-dev: apt-get install -y --no-install-recommends golang-go golang-etcd-server-dev \(no `go` on PATH\)/);
});
