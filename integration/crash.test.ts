// Durability under crashes and restarts. Concurrent writers put distinct keys (each key
// exactly once: client-side retries are off, so a put reaches the server at most once) and
// record every acknowledged put with its response revision. Then a component, or the whole
// node, is killed or restarted under that load, and afterwards:
//   - every acknowledged put is there, with its value and exactly its acknowledged revision;
//   - no two acknowledged puts share a revision;
//   - the revisions have no gaps: the keys present have exactly the mod revisions
//     2..current (each key is written once, nothing else writes), so every revision the
//     node handed out belongs to an acknowledged put or to a put whose answer was lost;
//   - nothing is there that no writer sent.

import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { Etcd3, GRPCUnavailableError, GRPCDeadlineExceededError } from 'etcd3';
import { noop } from 'cockatiel';
import { client, component, onCleanup, startKvs, waitComponent } from './harness.js';

interface Ack {
  key: string;
  value: string;
  revision: number;
}

interface Failure {
  key: string;
  value: string;
  error: Error;
}

/** `count` writers, each its own etcd3 client, putting `prefix/w<i>/<n>` in a loop. */
class Load {
  readonly acked: Ack[] = [];
  readonly failed: Failure[] = [];
  private readonly events = new EventEmitter();
  private stopping = false;
  private readonly writers: Promise<void>[] = [];

  constructor(
    t: TestContext,
    private readonly endpoint: string,
    private readonly count: number,
    private readonly prefix = 'load',
  ) {
    this.events.setMaxListeners(0);
    for (let i = 0; i < count; i++) {
      const c = new Etcd3({
        hosts: `http://${endpoint}`,
        // No retries and no circuit breaker: every put is sent at most once and its outcome
        // (acknowledged or failed) is what the server said.
        faultHandling: { host: () => noop, global: noop },
        // Reconnect quickly once the node is back.
        grpcOptions: { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 500 },
      });
      onCleanup(t, () => c.close());
      this.writers.push(this.write(c, i));
    }
  }

  private async write(c: Etcd3, writer: number): Promise<void> {
    for (let seq = 0; !this.stopping; seq++) {
      const key = `${this.prefix}/w${writer}/${String(seq).padStart(6, '0')}`;
      const value = `${writer}:${seq}:${Math.random().toString(36).slice(2)}`;
      try {
        const res = await c.put(key).value(value).options({ deadline: Date.now() + 10_000 }).exec();
        this.acked.push({ key, value, revision: Number(res.header.revision) });
        this.events.emit('ack', this.acked.length);
      } catch (error) {
        this.failed.push({ key, value, error: error as Error });
        this.events.emit('fail', this.failed.length);
        // The node (or part of it) is down: try again shortly, not in a hot loop.
        await delay(20);
      }
    }
  }

  /** Resolves once `n` puts in total have been acknowledged; rejects after `timeoutMs`. */
  untilAcked(n: number, timeoutMs = 20_000): Promise<void> {
    return this.until('ack', () => this.acked.length >= n, `${n} acknowledged puts (have ${this.acked.length})`, timeoutMs);
  }

  /** Resolves once `n` puts in total have failed; rejects after `timeoutMs`. */
  untilFailed(n: number, timeoutMs = 20_000): Promise<void> {
    return this.until('fail', () => this.failed.length >= n, `${n} failed puts (have ${this.failed.length})`, timeoutMs);
  }

  private until(event: string, done: () => boolean, what: string, timeoutMs: number): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!done()) return;
        cleanup();
        resolve();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.events.off(event, check);
      };
      this.events.on(event, check);
    });
  }

  /** Stops the writers and waits for their last puts to finish. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.writers);
  }

  summary(): string {
    const kinds = new Map<string, number>();
    for (const f of this.failed) {
      const k = `${f.error.constructor.name}: ${f.error.message.split('\n')[0]}`;
      kinds.set(k, (kinds.get(k) ?? 0) + 1);
    }
    return `${this.acked.length} acknowledged, ${this.failed.length} failed${[...kinds].map(([k, n]) => `; ${n} x ${k}`).join('')}`;
  }
}

/**
 * Every acknowledged put present with its revision; revisions 2..current, no gaps, no
 * strangers. `extra` are keys written once outside the load (their revisions count too).
 */
async function verify(c: Etcd3, load: Load, extra: string[] = [], prefix = 'load'): Promise<number> {
  const extraRevisions = await Promise.all(extra.map(async (k) => Number((await c.get(k).exec()).kvs[0]!.mod_revision)));
  const res = await c.getAll().prefix(`${prefix}/`).exec();
  const current = Number(res.header.revision);
  const present = new Map(res.kvs.map((kv) => [kv.key.toString(), kv]));

  const seen = new Map<number, string>();
  for (const ack of load.acked) {
    const other = seen.get(ack.revision);
    assert.equal(other, undefined, `revision ${ack.revision} acknowledged for both ${other} and ${ack.key}`);
    seen.set(ack.revision, ack.key);
    const kv = present.get(ack.key);
    assert.ok(kv, `acknowledged put of ${ack.key} at revision ${ack.revision} is lost (current revision ${current})`);
    assert.equal(kv.value.toString(), ack.value, `value of ${ack.key}`);
    assert.equal(Number(kv.mod_revision), ack.revision, `mod_revision of ${ack.key}`);
    assert.equal(Number(kv.create_revision), ack.revision, `create_revision of ${ack.key}`);
    assert.equal(kv.version, '1', `version of ${ack.key}`);
  }

  const sent = new Map<string, string>();
  for (const p of [...load.acked, ...load.failed]) sent.set(p.key, p.value);
  const revisions: number[] = [...extraRevisions];
  for (const [key, kv] of present) {
    assert.equal(sent.get(key), kv.value.toString(), `${key} is present but no writer sent that value`);
    revisions.push(Number(kv.mod_revision));
  }
  revisions.sort((a, b) => a - b);
  assert.equal(revisions.length, current - 1, `keys present ${revisions.length}, current revision ${current}: gaps or duplicates`);
  revisions.forEach((rev, i) => assert.equal(rev, i + 2, `revision ${i + 2} is not accounted for`));

  // The next write continues right after.
  const next = await c.put(`${prefix}-after/next`).value('x');
  assert.equal(Number(next.header.revision), current + 1);
  return current;
}

/** The errors a writer may see while a component is down: retryable ones. */
function assertRetryable(load: Load): void {
  for (const f of load.failed) {
    assert.ok(
      f.error instanceof GRPCUnavailableError || f.error instanceof GRPCDeadlineExceededError,
      `put of ${f.key} failed with ${f.error.constructor.name}: ${f.error.message}`,
    );
  }
}

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
