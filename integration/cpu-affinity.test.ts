// `kvs run --cpu-affinity LIST`: every component process (and each of its threads) runs on the
// listed CPUs, from its first start and after every restart; the pid `kvs ctl status` shows is
// the component's node process itself (taskset execs it), so signals sent to it reach it. A
// CPU the machine does not have, or no taskset on PATH, stops `kvs run` with a message.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import { test } from 'node:test';
import { KVS_BIN, client, component, freePort, runCommand, startKvs, status, tempDir, waitComponent, type KvsNode } from '../testkit/harness.js';
import { startCluster } from '../testkit/node-cluster.js';

/** The CPU list of every thread of a process (/proc/PID/task/TID/status, Cpus_allowed_list). */
function threadCpus(pid: number): string[] {
  return fs.readdirSync(`/proc/${pid}/task`).map((tid) => {
    const m = /^Cpus_allowed_list:\s*(\S+)$/m.exec(fs.readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8'));
    assert.ok(m, `no Cpus_allowed_list in /proc/${pid}/task/${tid}/status`);
    return m[1]!;
  });
}

/** Cpus_allowed_list of the process (its main thread). */
function processCpus(pid: number): string {
  return /^Cpus_allowed_list:\s*(\S+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]!;
}

/** The component's pid is its node process (`node .../kvs.js component NAME ...`), pinned to `cpus`. */
function assertPinned(pid: number, name: string, cpus: string): void {
  const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  assert.equal(argv[0], process.execPath, `pid ${pid} (${name}) is ${argv.join(' ')}, not node`);
  assert.deepEqual(argv.slice(1, 4), [KVS_BIN, 'component', name], `pid ${pid}: ${argv.join(' ')}`);
  assert.equal(processCpus(pid), cpus, `${name} (pid ${pid}) Cpus_allowed_list`);
  const threads = threadCpus(pid);
  assert.ok(threads.length > 1, `${name} has ${threads.length} threads`);
  assert.deepEqual(new Set(threads), new Set([cpus]), `${name}'s threads: ${threads.join(' ')}`);
}

async function assertAllPinned(node: KvsNode, names: string[], cpus: string): Promise<void> {
  const s = await status(node);
  assert.deepEqual(s.components.map((c) => c.name).sort(), [...names].sort());
  for (const c of s.components) {
    assert.equal(c.state, 'ready', `${c.name}: ${JSON.stringify(c)}`);
    assertPinned(c.pid, c.name, cpus);
  }
  // The supervisor itself is left where it was started.
  assert.equal(processCpus(node.pid), processCpus(process.pid));
}

test('kvs run --cpu-affinity 0: every component on CPU 0, also after a kill -9 and a ctl restart', async (t) => {
  const node = await startKvs(t, { args: ['--cpu-affinity', '0'] });
  await assertAllPinned(node, ['storage', 'gateway'], '0');

  const c = client(t, node.endpoint);
  await c.put('pinned').value('yes');
  assert.equal(await c.get('pinned').string(), 'yes');

  // A crash: the supervisor starts storage again, still through taskset.
  const before = await component(node, 'storage');
  process.kill(before.pid, 'SIGKILL');
  const after = await waitComponent(node, 'storage', (s) => s.state === 'ready' && s.pid !== before.pid);
  assert.equal(after.lastExit, 'signal SIGKILL', 'the SIGKILL sent to the pid in kvs ctl status killed the component');
  assert.equal(after.restarts, 1);
  assertPinned(after.pid, 'storage', '0');

  // A restart on request (SIGTERM from the supervisor, then a new start).
  const gw = await component(node, 'gateway');
  const r = await node.ctl(['restart', 'gateway']);
  assert.equal(r.exitCode, 0, r.stderr);
  const gwAfter = await component(node, 'gateway');
  assert.notEqual(gwAfter.pid, gw.pid);
  assert.equal(gwAfter.lastExit, 'code 0', 'the gateway stopped on the supervisor\'s SIGTERM');
  await assertAllPinned(node, ['storage', 'gateway'], '0');

  assert.equal(await c.get('pinned').string(), 'yes');
  await c.put('pinned').value('still');
  assert.equal(await c.get('pinned').string(), 'still');

  const exit = await node.stop();
  assert.equal(exit.code, 0, node.output().slice(-4000));
});

test('cluster mode: a node\'s archiver, peer agent, storage and gateway are all pinned', async (t) => {
  const cluster = await startCluster(t, 1, { args: ['--cpu-affinity', '0'] });
  const n1 = cluster.nodes[0]!;
  await assertAllPinned(n1.kvs, ['archiver', 'peer', 'storage', 'gateway'], '0');
  await n1.client.put('k').value('v');
  assert.equal(await n1.client.get('k').string(), 'v');

  const peer = await component(n1.kvs, 'peer');
  process.kill(peer.pid, 'SIGKILL');
  const back = await waitComponent(n1.kvs, 'peer', (p) => p.state === 'ready' && p.pid !== peer.pid);
  assert.equal(back.lastExit, 'signal SIGKILL');
  assertPinned(back.pid, 'peer', '0');
});

test('a CPU the machine does not have, or no taskset on PATH: kvs run exits 2 saying so', async (t) => {
  const dataDir = await tempDir(t, 'kvs-affinity-');
  const run = async (cpus: string, env: Record<string, string> = {}) =>
    runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', dataDir, '--listen', `127.0.0.1:${await freePort()}`, '--cpu-affinity', cpus], { env });

  const n = os.cpus().length;
  const valid = n === 1 ? '0' : `0-${n - 1}`;
  for (const cpus of [String(n), '99', `0,${n}`]) {
    const r = await run(cpus);
    assert.equal(r.exitCode, 2, `--cpu-affinity ${cpus}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, new RegExp(`^kvs: --cpu-affinity: "${cpus.split(',').pop()}" names CPU \\d+, which does not exist \\(valid CPUs on this machine: ${valid}\\)\n$`));
  }
  const bad = await run('zero');
  assert.equal(bad.exitCode, 2);
  assert.match(bad.stderr, /--cpu-affinity: "zero" in "zero" is not a CPU number or a range such as 0-1/);

  const noTaskset = await run('0', { PATH: dataDir });
  assert.equal(noTaskset.exitCode, 2, noTaskset.stdout + noTaskset.stderr);
  assert.match(noTaskset.stderr, new RegExp(`^kvs: --cpu-affinity 0 needs taskset \\(util-linux.*\\) on PATH, and there is none on ${dataDir}\n$`));
  assert.ok(!fs.existsSync(`${dataDir}/run`), 'nothing was started');
});
