// `npm run breakdown` (bench/breakdown.ts) on a real single node and a real 3-node cluster:
// exit 0, every measured put has every stage, each process's stamps are in the path's order,
// no stage is stamped before its cause, and every process's CPU and wake-ups per put are
// reported. No timing thresholds. And the join on its own.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Stage, STAGE_NAMES, type StageFile } from '../shared/stages.js';
import { joinBreakdown, stageDefs, type Breakdown } from './breakdown-join.js';
import type { ProcessCost } from '../testkit/proc.js';
import { perfUnavailable } from './syscall-trace.js';

const BREAKDOWN = fileURLToPath(new URL('./breakdown.js', import.meta.url));

async function run(args: string[]): Promise<{ code: number | null; output: string }> {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT; // the child is a plain program, not a test file
  const child = spawn(process.execPath, [BREAKDOWN, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b));
  child.stderr.on('data', (b: Buffer) => (output += b));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { code, output };
}

function assertComplete(b: Breakdown, puts: number, output: string): void {
  assert.equal(b.puts, puts, output);
  for (const [stage, n] of Object.entries(b.missing)) assert.equal(n, 0, `${n} puts lack "${stage}"\n${output}`);
  for (const [proc, n] of Object.entries(b.outOfOrder)) assert.equal(n, 0, `${n} puts with ${proc} stamps out of order\n${output}`);
  for (const s of b.stages) assert.equal(s.beforePrev, 0, `${s.beforePrev} puts with "${s.name}" before "${s.prev}"\n${output}`);
  assert.ok(b.total.p50 > 0 && b.total.p50 <= b.total.p99, output);
}

for (const cluster of [false, true]) {
  const mode = cluster ? '--cluster' : 'single node';
  test(`breakdown --puts 200 --warmup 20 --no-etcd, ${mode}: every put has every stage, in order`, { timeout: 90_000 }, async (t) => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-breakdown-test-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const out = path.join(dir, 'breakdown.json');
    const { code, output } = await run(['--puts', '200', '--warmup', '20', '--no-etcd', '--out', out, ...(cluster ? ['--cluster'] : [])]);
    assert.equal(code, 0, `breakdown exited with ${code}:\n${output}`);
    const report = JSON.parse(await readFile(out, 'utf8')) as { mode: string; kvs: Breakdown; etcd?: unknown; kvsProcesses: ProcessCost[] };
    assert.equal(report.mode, cluster ? 'cluster' : 'single');
    assert.equal(report.etcd, undefined);
    // Every component of every node, named; each put wakes each node's storage (its entries
    // arrive) and the leader's gateway (the client's request arrives).
    const names = report.kvsProcesses.map((p) => p.name).sort();
    const nodes = cluster ? ['n1 ', 'n2 ', 'n3 '] : [''];
    for (const n of nodes) for (const c of ['gateway', 'storage', 'supervisor']) assert.ok(names.includes(n + c), `no ${n + c} in ${names.join(', ')}\n${output}`);
    for (const p of report.kvsProcesses) assert.ok(p.cpuMicrosPerOp >= 0 && p.wakeupsPerOp >= 0, JSON.stringify(p));
    for (const p of report.kvsProcesses.filter((p) => p.name.endsWith('storage'))) assert.ok(p.wakeupsPerOp >= 1, JSON.stringify(p));
    assert.match(output, /kvs total +\d+ µs +\d+\.\d\d wake-ups/);
    assert.deepEqual(report.kvs.stages.map((s) => s.name), stageDefs(cluster).map((d) => d.name));
    assertComplete(report.kvs, 200, output);
    if (cluster) assert.equal(Object.values(report.kvs.firstAck!).reduce((a, b) => a + b, 0), 200);
    assert.match(output, /client: answer received/);
  });
}

const noPerf = perfUnavailable();
test('breakdown --syscalls on a real single node: every measured put joined with its syscalls, both hops of the gateway and storage shown', { timeout: 90_000, skip: noPerf }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'kvs-breakdown-test-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'breakdown.json');
  const { code, output } = await run(['--puts', '200', '--warmup', '20', '--no-etcd', '--syscalls', '--out', out]);
  assert.equal(code, 0, `breakdown exited with ${code}:\n${output}`);
  const report = JSON.parse(await readFile(out, 'utf8')) as { kvsSyscalls: { unmatched: number; stages: Record<string, { p50: number; p99: number }> } };
  const { unmatched, stages } = report.kvsSyscalls;
  assert.ok(unmatched <= 4, `${unmatched} of 200 puts not joined\n${output}`);
  for (const name of ['client write() → server read()', 'request: gateway → storage', 'of which fdatasync', 'answer: storage → gateway', 'answer written → client read()', 'total']) {
    assert.ok(stages[name], `no stage "${name}"\n${output}`);
    assert.ok(stages[name].p50 > 0 && stages[name].p50 <= stages[name].p99, `${name}: ${JSON.stringify(stages[name])}\n${output}`);
  }
  assert.ok(stages['of which fdatasync']!.p50 < stages['total']!.p50);
  assert.match(output, /as the kernel saw them/);
});

/** A stage file of synthetic stamps: [stage, key, time, aux?]. */
function file(processName: string, node: string, stamps: [number, number, number, number?][], labels: string[] = []): StageFile {
  return {
    process: processName,
    node,
    pid: 1,
    stages: [...STAGE_NAMES],
    labels,
    stage: stamps.map((s) => s[0]),
    key: stamps.map((s) => s[1]),
    time: stamps.map((s) => s[2]),
    aux: stamps.map((s) => s[3] ?? 0),
  };
}

test('the join: revision and index meet through storage\'s link; the first follower to ACK is shown', () => {
  // One put: revision 7, WAL index 3. n3's ACK reaches the leader first (at 200), n2's at 260.
  const files = [
    file('gateway', 'n1', [[Stage.GATEWAY_RECEIVE, 7, 10], [Stage.GATEWAY_ANSWER_RECEIVED, 7, 300], [Stage.GATEWAY_ANSWER_SENT, 7, 305]]),
    file('storage', 'n1', [
      [Stage.STORAGE_EXECUTED, 3, 30], [Stage.STORAGE_TO_PEER, 3, 31], [Stage.STORAGE_WAL_WRITTEN, 3, 40], [Stage.STORAGE_FSYNCED, 3, 90],
      [Stage.STORAGE_COMMITTED, 3, 280], [Stage.STORAGE_RECEIVE, 3, 20], [Stage.LINK, 3, 0, 7], [Stage.STORAGE_REPLICATED, 3, 275],
      [Stage.STORAGE_ANSWERED, 3, 285], [Stage.STORAGE_ANSWER_SENT, 3, 290],
    ]),
    file('peer', 'n1', [
      [Stage.PEER_LEADER_RECEIVE, 3, 50], [Stage.PEER_LEADER_SENT, 3, 55],
      [Stage.PEER_LEADER_ACK, 2, 150, 0], [Stage.PEER_LEADER_ACK, 3, 260, 0], [Stage.PEER_LEADER_ACK, 3, 200, 1], [Stage.PEER_LEADER_ACK, 3, 400, 1],
      [Stage.PEER_LEADER_REPLICATED, 3, 270],
    ], ['n2', 'n3']),
    ...['n2', 'n3'].map((node, i) => file('peer', node, [[Stage.PEER_FOLLOWER_RECEIVE, 3, 100 + i], [Stage.PEER_FOLLOWER_ACK_SENT, 3, 180 + i]])),
    ...['n2', 'n3'].map((node, i) => file('storage', node, [
      [Stage.FOLLOWER_STORAGE_RECEIVE, 3, 110 + i], [Stage.FOLLOWER_WAL_WRITTEN, 3, 120 + i], [Stage.FOLLOWER_FSYNCED, 3, 160 + i], [Stage.FOLLOWER_PROGRESS_SENT, 3, 170 + i],
    ])),
  ];
  const b = joinBreakdown(files, [{ send: 0, receive: 320, revision: 7 }], 'n1', true);
  const at = (name: string) => b.stages.find((s) => s.name === name)!;
  assert.deepEqual(b.firstAck, { n3: 1 });
  assert.equal(at('follower peer: batch received').cumulative.p50, 101); // n3's
  assert.equal(at('peer (leader): first ACK received').cumulative.p50, 200);
  assert.equal(at('peer (leader): last ACK received').cumulative.p50, 260);
  assert.equal(at('peer (leader): first ACK received').since!.p50, 19);
  assert.equal(at('storage: request received').since!.p50, 10);
  assert.equal(b.total.p50, 320);
  for (const n of Object.values(b.missing)) assert.equal(n, 0);
  for (const n of Object.values(b.outOfOrder)) assert.equal(n, 0);
  // A put storage never linked (its revision unknown there) misses every index-keyed stage.
  const lost = joinBreakdown(files, [{ send: 0, receive: 320, revision: 8 }], 'n1', true);
  assert.equal(lost.missing['storage: LMDB committed'], 1);
  assert.equal(lost.missing['gateway: Put handler called'], 1);
});
