// Durability under crashes and restarts: a write load (load.ts) runs while a component, or the
// whole node, is killed or restarted, and afterwards every acknowledged put is there, exactly
// once, with no gap in the revisions (load.ts, verify).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { client, component, startKvs, waitComponent } from '../testkit/harness.js';
import { Load, verify, assertRetryable } from './load.js';

test('kill -9 of the storage process under load (three times) loses no acknowledged put', async (t) => {
  const node = await startKvs(t);
  const load = new Load(t, node.endpoint, 8);
  await load.untilAcked(300);
  const gatewayBefore = await component(node, 'gateway');

  for (let kill = 1; kill <= 3; kill++) {
    const before = await component(node, 'storage');
    process.kill(before.pid, 'SIGKILL');
    const after = await waitComponent(node, 'storage', (c) => c.state === 'ready' && c.pid !== before.pid);
    assert.equal(after.restarts, kill);
    assert.equal(after.lastExit, 'signal SIGKILL');
    // The writers go on: many more puts are acknowledged after the restart.
    await load.untilAcked(load.acked.length + 200);
  }
  await load.stop();

  t.diagnostic(load.summary());
  assertRetryable(load);
  const gateway = await component(node, 'gateway');
  assert.equal(gateway.pid, gatewayBefore.pid, 'the gateway was not restarted');
  await verify(client(t, node.endpoint), load);
});

test('kill -9 of the whole node under load, restart on the same data dir: nothing acknowledged is lost', async (t) => {
  const node = await startKvs(t);
  const load = new Load(t, node.endpoint, 8);
  await load.untilAcked(400);

  const exit = await node.kill9();
  assert.equal(exit.signal, 'SIGKILL');
  const acksAtKill = load.acked.length;
  const highestBeforeKill = Math.max(...load.acked.map((a) => a.revision));
  // Writers fail while the node is down...
  await load.untilFailed(load.failed.length + 8);
  await node.restart();
  // ...and carry on once it is back.
  await load.untilAcked(acksAtKill + 300);
  await load.stop();

  t.diagnostic(`${acksAtKill} acknowledged before the kill (highest revision ${highestBeforeKill}); ${load.summary()}`);
  const afterRestart = load.acked.slice(acksAtKill);
  assert.ok(afterRestart.length >= 300);
  for (const a of afterRestart) assert.ok(a.revision > highestBeforeKill, `${a.key} got revision ${a.revision} after the restart`);
  await verify(client(t, node.endpoint), load);
  const storage = await component(node, 'storage');
  assert.equal(storage.restarts, 0, 'a fresh supervisor');
});

test('kill -9 of the gateway: the supervisor restarts it and clients reconnect', async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint); // a default etcd3 client, as an application has
  await c.put('before').value('gateway crash');
  const load = new Load(t, node.endpoint, 4);
  await load.untilAcked(200);

  const storageBefore = await component(node, 'storage');
  const before = await component(node, 'gateway');
  assert.equal(before.restarts, 0);
  process.kill(before.pid, 'SIGKILL');

  const after = await waitComponent(node, 'gateway', (g) => g.state === 'ready' && g.pid !== before.pid);
  assert.equal(after.restarts, 1);
  assert.equal(after.lastExit, 'signal SIGKILL');
  assert.notEqual(after.pid, before.pid);

  assert.equal(await c.get('before').string(), 'gateway crash');
  await c.put('after').value('gateway restart');
  assert.equal(await c.get('after').string(), 'gateway restart');

  await load.untilAcked(load.acked.length + 200);
  await load.stop();
  t.diagnostic(load.summary());
  assertRetryable(load);
  const storage = await component(node, 'storage');
  assert.deepEqual([storage.pid, storage.restarts], [storageBefore.pid, 0], 'storage was not restarted');

  // Everything (the two single puts and the load) with no gap.
  await verify(c, load, ['before', 'after']);
});

test('kvs ctl restart gateway, then storage, under light load: nothing acknowledged is lost', async (t) => {
  const node = await startKvs(t);
  const load = new Load(t, node.endpoint, 2);
  await load.untilAcked(100);

  for (const name of ['gateway', 'storage']) {
    const before = await component(node, name);
    const started = Date.now();
    const r = await node.ctl(['restart', name]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^${name} restarted: pid \\d+, state ready\\n$`));
    const after = await component(node, name);
    assert.equal(after.state, 'ready');
    assert.notEqual(after.pid, before.pid);
    assert.equal(after.restarts, before.restarts + 1);
    t.diagnostic(`kvs ctl restart ${name} took ${Date.now() - started} ms`);
    await load.untilAcked(load.acked.length + 100);
  }
  await load.stop();
  t.diagnostic(load.summary());
  assertRetryable(load);
  await verify(client(t, node.endpoint), load);
});

test('SIGTERM of the node under load (graceful stop), then restart: nothing acknowledged is lost', async (t) => {
  const node = await startKvs(t);
  const load = new Load(t, node.endpoint, 8);
  await load.untilAcked(300);

  const exit = await node.stop('SIGTERM');
  assert.deepEqual(exit, { code: 0, signal: null }, `graceful stop\n${node.output().slice(-4000)}`);
  const acksAtStop = load.acked.length;
  await node.restart();
  await load.untilAcked(acksAtStop + 200);
  await load.stop();

  t.diagnostic(`${acksAtStop} acknowledged before the stop; ${load.summary()}`);
  assertRetryable(load);
  await verify(client(t, node.endpoint), load);
});
