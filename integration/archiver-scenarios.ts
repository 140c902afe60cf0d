// Durability scenarios run on every object-store backend (a local directory, S3 on Ceph RGW):
// disk loss under write load, and the object store going down under write load.
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import { test, type TestContext } from 'node:test';
import { openObjectStore } from '../shared/objectstore/index.js';
import type { ObjectStore } from '../shared/objectstore/store.js';
import { listWalSegments } from '../shared/objectstore/catalog.js';
import { client, pollUntil, onCleanup, startKvs, type KvsNode, type KvsOptions, type ObjectStoreSpec } from '../testkit/harness.js';
import { Load, verify, assertRetryable } from './load.js';

export async function openStore(t: TestContext, spec: ObjectStoreSpec): Promise<ObjectStore> {
  const store = await openObjectStore({ endpoint: spec.endpoint, bucket: spec.bucket, prefix: spec.prefix });
  onCleanup(t, () => store.close());
  return store;
}

export async function keys(store: ObjectStore, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const o of store.list(prefix)) out.push(o.key);
  return out;
}

export interface Checkpoint {
  key: string;
  pieces: number;
  uploaded: number;
  /** Nothing changed since the latest checkpoint (e.g. the automatic first one): none taken. */
  unchanged: boolean;
}

/** `kvs ctl checkpoint`: a checkpoint now. */
export async function checkpoint(node: KvsNode): Promise<Checkpoint> {
  const r = await node.ctl(['checkpoint'], { timeoutMs: 120_000 });
  assert.equal(r.exitCode, 0, `kvs ctl checkpoint: ${r.stderr}`);
  const same = /^no change since (\S+)\n$/.exec(r.stdout);
  if (same) return { key: same[1]!, pieces: 0, uploaded: 0, unchanged: true };
  const m = /^checkpoint (\S+): (\d+) pieces, (\d+) uploaded\n$/.exec(r.stdout);
  assert.ok(m, `kvs ctl checkpoint printed ${JSON.stringify(r.stdout)}`);
  return { key: m[1]!, pieces: Number(m[2]), uploaded: Number(m[3]), unchanged: false };
}

/** The uploaded WAL is records 1..through, each exactly once: no hole, no overlap. */
export async function assertWalExactlyOnce(store: ObjectStore, through: number): Promise<void> {
  const objects = await listWalSegments(store);
  assert.ok(objects.length > 0, 'no WAL object uploaded');
  let next = 1n;
  for (const o of objects) {
    assert.equal(o.first, next, `WAL object ${o.key}: expected it to start at ${next} (a hole or a duplicate)`);
    next = o.last + 1n;
  }
  assert.equal(next - 1n, BigInt(through), 'the uploaded WAL ends at the last write');
}

/** An object store the scenarios can run a node on, and break. */
export interface Backend {
  name: string;
  open(t: TestContext): Promise<{
    /** startKvs options for a node on `prefix` (default: the backend's own). */
    nodeOptions(prefix?: string): KvsOptions;
    store(t: TestContext, prefix?: string): Promise<ObjectStore>;
    /** Every object-store request fails from now on... */
    down(): Promise<void>;
    /** ...until this. */
    up(): Promise<void>;
  }>;
}

export function diskLossScenario(backend: Backend): void {
  test(`${backend.name}: disk loss: kill -9 of the node under load, data directory deleted, restart: every acknowledged put is back`, async (t) => {
    const b = await backend.open(t);
    const node = await startKvs(t, b.nodeOptions());
    const load = new Load(t, node.endpoint, 8);
    await load.untilAcked(300);
    // A checkpoint in the middle: the restore combines it with the uploaded WAL after it.
    await checkpoint(node);
    await load.untilAcked(load.acked.length + 300);

    await node.kill9();
    const acksAtKill = load.acked.length;
    await rm(node.dataDir, { recursive: true, force: true });
    await node.restart();
    await load.untilAcked(acksAtKill + 200);
    await load.stop();

    t.diagnostic(`${acksAtKill} acknowledged before the kill; ${load.summary()}`);
    assertRetryable(load);
    assert.match(node.output(), /restored checkpoint/);
    const current = await verify(client(t, node.endpoint), load);
    await assertWalExactlyOnce(await b.store(t), current);
  });
}

export function storeDownScenario(backend: Backend): void {
  test(`${backend.name}: object store down under load (sync upload): writes stall with a clear error, resume when it is back, nothing is lost`, async (t) => {
    const b = await backend.open(t);
    const node = await startKvs(t, b.nodeOptions());
    const load = new Load(t, node.endpoint, 4);
    await load.untilAcked(200);

    await b.down();
    await pollUntil('the stall to be logged', async () => (/writes are stalled/.test(node.output()) ? true : undefined));
    assert.match(node.output(), /WAL upload to the object store is failing/);
    const stalledAt = load.acked.length;
    // An archiver restarted meanwhile does not fail the node: it starts, or waits for the store.
    let restartDone = false;
    const restart = node.ctl(['restart', 'archiver'], { timeoutMs: 120_000 }).finally(() => (restartDone = true));
    await pollUntil('the restarted archiver to start or to wait for the object store', async () =>
      restartDone || /archiver cannot start \(writes wait for it\); retrying/.test(node.output()) ? true : undefined,
    );

    await b.up();
    const restarted = await restart;
    assert.equal(restarted.exitCode, 0, restarted.stderr);
    await load.untilAcked(stalledAt + 200, 60_000);
    assert.match(node.output(), /WAL uploads caught up; writes continue/);

    // What was acknowledged before and while the store was down survives the disk's loss.
    await node.kill9();
    await rm(node.dataDir, { recursive: true, force: true });
    await node.restart();
    await load.stop();
    t.diagnostic(`${stalledAt} acknowledged when the stall was logged; ${load.summary()}`);
    assertRetryable(load);
    await verify(client(t, node.endpoint), load);
  });
}
