// Tests of the integration harness itself, against the real /usr/bin/etcd and /usr/bin/etcdctl.

import assert from 'node:assert/strict';
import { access } from 'node:fs/promises';
import { test } from 'node:test';
import { client, etcdctl, freePorts, startEtcd, tempDir, type EtcdNode } from './harness.js';

function assertGone(pid: number): void {
  assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, `process ${pid} is still alive`);
}

test('two etcd instances side by side, cleaned up when the test ends', async (t) => {
  const started: EtcdNode[] = [];
  let scratch = '';

  await t.test('etcd3 client on one, etcdctl on the other', async (st) => {
    scratch = await tempDir(st, 'kvs-harness');
    const [a, b] = await Promise.all([startEtcd(st), startEtcd(st)]);
    started.push(a, b);
    assert.notEqual(a.endpoint, b.endpoint);
    assert.notEqual(a.dataDir, b.dataDir);
    await access(a.dataDir);
    await access(b.dataDir);

    const c = client(st, a.endpoint);
    await c.put('greeting').value('hello');
    assert.equal(await c.get('greeting').string(), 'hello');

    const put = await etcdctl(b.endpoint, ['put', 'color', 'blue']);
    assert.equal(put.exitCode, 0, put.stderr);
    assert.equal(put.stdout, 'OK\n');
    const get = await etcdctl(b.endpoint, ['get', 'color']);
    assert.equal(get.exitCode, 0, get.stderr);
    assert.equal(get.stdout, 'color\nblue\n');

    // The instances are independent.
    const other = await etcdctl(b.endpoint, ['get', 'greeting']);
    assert.equal(other.exitCode, 0, other.stderr);
    assert.equal(other.stdout, '');
    assert.equal(await c.get('color').string(), null);

    // A value given on stdin.
    const piped = await etcdctl(b.endpoint, ['put', 'piped'], { input: 'from stdin' });
    assert.equal(piped.exitCode, 0, piped.stderr);
    assert.equal((await etcdctl(b.endpoint, ['get', 'piped', '--print-value-only'])).stdout, 'from stdin\n');

    const bad = await etcdctl(b.endpoint, ['get', '--no-such-flag', 'color']);
    assert.notEqual(bad.exitCode, 0);
    assert.match(bad.stderr, /unknown flag/);
  });

  // The subtest's cleanup has run: processes are dead, directories are gone.
  assert.equal(started.length, 2);
  for (const node of started) {
    assertGone(node.pid);
    await assert.rejects(access(node.dataDir), { code: 'ENOENT' });
  }
  await assert.rejects(access(scratch), { code: 'ENOENT' });
});

test('stop() awaits exit and is idempotent', async (t) => {
  const node = await startEtcd(t);
  await node.stop();
  assert.ok(node.process.exitCode !== null || node.process.signalCode !== null);
  assertGone(node.pid);
  await node.stop();
  assert.match(node.stderr(), /serving client traffic/);
  const down = await etcdctl(node.endpoint, ['get', 'x', '--dial-timeout=300ms', '--command-timeout=500ms']);
  assert.notEqual(down.exitCode, 0);
});

test('etcdctl times out instead of hanging', async (t) => {
  const node = await startEtcd(t);
  const started = Date.now();
  const watch = await etcdctl(node.endpoint, ['watch', 'never'], { timeoutMs: 500 });
  assert.equal(watch.timedOut, true);
  assert.equal(watch.exitCode, 128 + 15); // SIGTERM
  assert.ok(Date.now() - started < 5_000);
});

test('freePorts returns distinct ports', async () => {
  const ports = await freePorts(4);
  assert.equal(new Set(ports).size, 4);
  for (const p of ports) assert.ok(p > 0 && p < 65536);
});
