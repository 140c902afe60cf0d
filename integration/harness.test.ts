// Tests of the integration harness itself, against the real /usr/bin/etcd and /usr/bin/etcdctl,
// and real kvs nodes.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { access } from 'node:fs/promises';
import { test } from 'node:test';
import { ETCD_BIN, RESERVED_PORTS_FROM, client, etcdctl, freePort, freePorts, pollUntil, portClaimName, reservePort, startEtcd, startKvs, startProcess, status, tempDir, type EtcdNode } from '../testkit/harness.js';
import { etcdArgs } from '../testkit/loopback.js';
import { Endpoint, encodeRequest } from './differential.js';
import { bindAbstract } from '../shared/data-dir-lock.js';

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

/** Whether this process can claim the abstract socket `name` now (another one holds it otherwise). */
async function claimable(name: string): Promise<boolean> {
  const srv = await bindAbstract(name);
  srv?.close();
  return srv !== undefined;
}

test('reservePort: a port below the ephemeral range, held for the test against every other test process', async (t) => {
  const ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  let ports: number[] = [];
  await t.test('held while the test runs', async (st) => {
    ports = [await reservePort(st), await reservePort(st)];
    assert.notEqual(ports[0], ports[1]);
    for (const p of ports) {
      assert.ok(p >= RESERVED_PORTS_FROM && p < ephemeralLow, `${p} is below ${ephemeralLow}`);
      assert.equal(await claimable(portClaimName(p)), false, `no process can claim ${p} while it is held`);
    }
  });
  for (const p of ports) assert.equal(await claimable(portClaimName(p)), true, `${p} is released when its test ends`);
});

test('restart() after kill9() does not take an answer from another server on the node\'s port for the node\'s', async (t) => {
  const MAINTENANCE = 'etcdserverpb.Maintenance';
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  for (let i = 0; i < 5; i++) await c.put(`k${i}`).value('v');
  const revision = String((await c.get('k0').exec()).header.revision);
  const hashKV = new Endpoint(t, 'node', node.endpoint);
  const current = async () => {
    const r = await hashKV.call('HashKV', encodeRequest('HashKV', { revision: 0 }, MAINTENANCE), MAINTENANCE);
    assert.ok('ok' in r, JSON.stringify(r));
    return r.ok.header.revision as string;
  };
  assert.equal(await current(), revision);
  const pids = (await status(node)).components.map((x) => x.pid);
  await node.kill9();
  for (const pid of pids) {
    // Dead, or a zombie: nothing of the node runs on when kill9() returns.
    const state = (() => {
      try {
        return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]![0];
      } catch {
        return 'gone';
      }
    })();
    assert.ok(state === 'gone' || state === 'Z', `component ${pid} is ${state} after kill9()`);
  }
  // While the node is down, another server gets its port (any test's bind(0) could, before the
  // node's port was reserved): an etcd, which answers the readiness probe and a HashKV with its
  // own revision.
  const other = await startProcess(t, ETCD_BIN, etcdArgs('other', await tempDir(t, 'kvs-other-etcd'), node.port, await freePort()));
  const otherClient = client(t, node.endpoint);
  await pollUntil('the other server answering on the node\'s port', () => otherClient.put('other').value('x').then(() => true, () => undefined));
  // The node cannot listen there: restart() says so, instead of reporting it ready.
  await assert.rejects(node.restart(), /kvs exited \(code 1\) before its gateway served 127\.0\.0\.1:\d+: 127\.0\.0\.1:\d+ is taken by another process, which answered the readiness probe in its place/);
  await other.stop();
  await node.restart();
  assert.equal(await current(), revision, 'the node itself answers, with all it had');
});
