// The object store of an embedded node (embed/object-store.ts): restore at open after a lost
// data directory, the same prefix served by `kvs run` and back (with encryption), an ObjectStore
// object of the program's own, a branch forked from an embedded node's checkpoint, and
// walSyncUpload's promise under SIGKILL of the embedding process. On the local-directory store;
// embed-store-s3.test.ts runs the disk loss on Ceph RGW.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { open, fork, unfork, type Node } from '../embed/index.js';
import { etcdctl, localObjectStore, pollUntil, startKvs, type ObjectStoreSpec } from '../testkit/harness.js';
import { onCleanup, tempDir, type Ctx } from '../testkit/process.js';
import { killWriterAfter, lostPuts } from './embed-crash.js';
import { openObjectStore } from '../shared/objectstore/index.js';
import { LocalObjectStore } from '../shared/objectstore/local.js';
import { readLatest, requireCheckpointManifest } from '../shared/objectstore/catalog.js';
import { branchKey } from '../shared/objectstore/layout.js';
import { ENCRYPTED_MAGIC } from '../shared/objectstore/encryption.js';
import type { ObjectStore } from '../shared/objectstore/store.js';

const location = (s: ObjectStoreSpec, prefix = s.prefix) => ({ bucket: s.bucket, prefix, endpoint: s.endpoint });

/** Opens a node that is closed when the test ends (if the test did not close it). */
async function openNode(t: Ctx, options: Parameters<typeof open>[0]): Promise<Node> {
  const node = await open(options);
  onCleanup(t, () => node.close());
  return node;
}

async function putAll(node: Node, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) await node.put(`k${i}`, `v${i}`);
}

/** The keys under `k` and their values, as the node has them. */
async function contents(node: Node): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const kv of (await node.list('k')).kvs) out[kv.key.toString()] = kv.value.toString();
  return out;
}

function expected(from: number, to: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = from; i < to; i++) out[`k${i}`] = `v${i}`;
  return out;
}

/** Waits until the prefix's latest checkpoint holds `revision`. */
async function checkpointAt(spec: ObjectStoreSpec, prefix: string, revision: number, encryptionKey?: Buffer): Promise<string> {
  const store = await openObjectStore({ ...location(spec, prefix), encryptionKey });
  try {
    return await pollUntil(`a checkpoint of ${prefix} at revision ${revision}`, async () => {
      const latest = await readLatest(store);
      return latest && latest.revision >= revision ? latest.checkpoint : undefined;
    });
  } finally {
    store.close();
  }
}

test('an embedded node whose data directory is lost comes back whole from the object store (checkpoint and WAL)', async (t) => {
  const objects = await localObjectStore(t);
  const dataDir = await tempDir(t, 'kvs-embed-');
  const node = await openNode(t, { dataDir, objectStore: location(objects) });
  await putAll(node, 0, 20);
  // The first checkpoint of a prefix comes soon after open; what follows it is in WAL objects.
  await checkpointAt(objects, objects.prefix, 2);
  await putAll(node, 20, 40);
  const revision = node.currentRevision();
  await node.close();

  fs.rmSync(dataDir, { recursive: true, force: true });
  const back = await openNode(t, { dataDir, objectStore: location(objects) });
  assert.deepEqual(await contents(back), expected(0, 40));
  assert.equal(back.currentRevision(), revision);
  await back.put('k40', 'v40');
  assert.equal(back.currentRevision(), revision + 1);
});

test('a data directory that ran without an object store adopts one: checkpointed at open, then it survives disk loss', async (t) => {
  const objects = await localObjectStore(t);
  const dataDir = await tempDir(t, 'kvs-embed-');
  const plain = await openNode(t, { dataDir });
  await putAll(plain, 0, 10);
  await plain.close();
  const archived = await openNode(t, { dataDir, objectStore: location(objects) });
  await putAll(archived, 10, 20);
  await archived.close();

  fs.rmSync(dataDir, { recursive: true, force: true });
  const back = await openNode(t, { dataDir, objectStore: location(objects) });
  assert.deepEqual(await contents(back), expected(0, 20));
});

test('a prefix an embedded node wrote is served by kvs run, and what kvs run wrote is opened embedded (encrypted)', async (t) => {
  const objects = await localObjectStore(t);
  const key = randomBytes(32);
  const keyFile = path.join(await tempDir(t, 'kvs-key-'), 'key');
  fs.writeFileSync(keyFile, key.toString('hex'));
  const dataDir = await tempDir(t, 'kvs-embed-');
  const embedded = await openNode(t, { dataDir, objectStore: location(objects), encryptionKey: key });
  await putAll(embedded, 0, 10);
  await embedded.close();
  // What went to the bucket is encrypted.
  const raw = new LocalObjectStore({ root: objects.root, bucket: objects.bucket, prefix: objects.prefix });
  onCleanup(t, () => raw.close());
  const walObjects = [];
  for await (const o of raw.list('wal/')) walObjects.push(o.key);
  assert.ok(walObjects.length > 0, 'WAL objects were uploaded');
  for (const k of walObjects) assert.ok((await raw.get(k))!.body.subarray(0, ENCRYPTED_MAGIC.length).equals(ENCRYPTED_MAGIC), `${k} is encrypted`);

  // kvs run on another data directory restores the prefix; on the same one it continues it.
  const keyArgs = ['--object-store-encryption-key-file', keyFile];
  const fresh = await startKvs(t, { objectStore: objects, args: keyArgs });
  assert.equal((await etcdctl(fresh.endpoint, ['get', 'k3', '--print-value-only'])).stdout, 'v3\n');
  await fresh.stop();
  const same = await startKvs(t, { objectStore: objects, args: keyArgs, dataDir });
  assert.equal((await etcdctl(same.endpoint, ['get', 'k9', '--print-value-only'])).stdout, 'v9\n');
  assert.equal((await etcdctl(same.endpoint, ['put', 'k10', 'v10'])).exitCode, 0);
  await same.stop();

  const again = await openNode(t, { dataDir: await tempDir(t, 'kvs-embed-'), objectStore: location(objects), encryptionKey: key });
  assert.deepEqual(await contents(again), expected(0, 11));
  await again.close();
  // Without the key the node says it needs one, and lets go of the directory: with it, it opens.
  const keyless = await tempDir(t, 'kvs-embed-');
  await assert.rejects(open({ dataDir: keyless, objectStore: location(objects) }), /is encrypted: pass the prefix's key with the encryptionKey option/);
  const keyed = await openNode(t, { dataDir: keyless, objectStore: location(objects), encryptionKey: key });
  assert.equal((await keyed.get('k10'))?.value.toString(), 'v10');
});

/** The program's own store: counts puts, and must stay open after the node closes. */
class CountingStore extends LocalObjectStore {
  puts = 0;
  closed = false;
  override put(...args: Parameters<ObjectStore['put']>): ReturnType<ObjectStore['put']> {
    this.puts++;
    return super.put(...args);
  }
  override close(): void {
    this.closed = true;
    super.close();
  }
}

test('objectStore as an object implementing ObjectStore: the node uploads through it and leaves it open', async (t) => {
  const objects = await localObjectStore(t);
  const store = new CountingStore({ root: objects.root, bucket: objects.bucket, prefix: objects.prefix });
  onCleanup(t, () => store.close());
  const dataDir = await tempDir(t, 'kvs-embed-');
  const node = await openNode(t, { dataDir, objectStore: store });
  await putAll(node, 0, 5);
  assert.ok(store.puts >= 5, `every acknowledged batch went through the program's store (${store.puts} puts)`);
  await node.close();
  assert.equal(store.closed, false, 'the node does not close a store it was given');

  fs.rmSync(dataDir, { recursive: true, force: true });
  const back = await openNode(t, { dataDir, objectStore: store });
  assert.deepEqual(await contents(back), expected(0, 5));
});

/** A store that fails every put while `down`; `failing` resolves at the first put it failed since fail(). */
class FlakyStore extends LocalObjectStore {
  down = false;
  private failed!: () => void;
  failing!: Promise<void>;
  fail(): void {
    this.down = true;
    this.failing = new Promise<void>((resolve) => (this.failed = resolve));
  }
  override put(...args: Parameters<ObjectStore['put']>): ReturnType<ObjectStore['put']> {
    if (this.down) {
      this.failed();
      return Promise.reject(new Error('store unavailable (test)'));
    }
    return super.put(...args);
  }
}

test('while the object store fails, a put waits and resolves once it answers; close() ends the wait', async (t) => {
  const objects = await localObjectStore(t);
  const store = new FlakyStore({ root: objects.root, bucket: objects.bucket, prefix: objects.prefix });
  onCleanup(t, () => store.close());
  const node = await openNode(t, { dataDir: await tempDir(t, 'kvs-embed-'), objectStore: store });
  await node.put('k0', 'v0');
  store.fail();
  let settled = '';
  const waiting = node.put('k1', 'v1').then(
    () => (settled = 'resolved'),
    (err: Error) => (settled = `rejected: ${err.message}`),
  );
  await store.failing;
  assert.equal(settled, '', 'the put waits for its upload');
  assert.equal(await node.get('k1'), undefined, 'no reader sees a write the object store lacks');
  store.down = false;
  await waiting;
  assert.equal(settled, 'resolved');
  assert.equal((await node.get('k1'))?.value.toString(), 'v1');

  store.fail();
  const cut = node.put('k2', 'v2').then(
    () => 'resolved',
    (err: Error) => err.message,
  );
  await store.failing;
  await node.close();
  assert.match(await cut, /outcome is unknown/);
});

test('fork a branch from an embedded node\'s checkpoint, open it embedded, lose its disk, unfork', async (t) => {
  const objects = await localObjectStore(t, 'source/');
  const source = await openNode(t, { dataDir: await tempDir(t, 'kvs-embed-'), objectStore: location(objects), checkpointInterval: 200 });
  await putAll(source, 0, 10);
  // 3 MiB of incompressible values: the database spans several checkpoint pieces, which the branch's share.
  for (let i = 0; i < 24; i++) await source.put(`big/${i}`, randomBytes(128 * 1024));
  await checkpointAt(objects, 'source/', source.currentRevision());
  const checkpointKey = await fork(location(objects), 'b1');
  assert.match(checkpointKey, /^checkpoint\/\d+\/\d+\/manifest\.json$/);
  await source.put('k0', 'changed after the fork');

  const branchDir = await tempDir(t, 'kvs-embed-');
  const branchOptions = { dataDir: branchDir, objectStore: location(objects, 'branch/'), branchPoint: { sourceStore: location(objects), checkpointKey }, checkpointInterval: 200 };
  const branch = await openNode(t, branchOptions);
  assert.deepEqual(await contents(branch), expected(0, 10));
  await branch.put('k10', 'v10');
  assert.equal((await source.get('k10')), undefined, 'a branch write stays in the branch');
  assert.equal((await source.get('k0'))?.value.toString(), 'changed after the fork');
  // The branch's own checkpoint shares pieces with the source; a lost disk comes back through them.
  const branchCheckpoint = await checkpointAt(objects, 'branch/', branch.currentRevision());
  const branchStore = await openObjectStore(location(objects, 'branch/'));
  onCleanup(t, () => branchStore.close());
  assert.equal((await requireCheckpointManifest(branchStore, branchCheckpoint)).source_prefix, 'source/');
  await branch.close();
  fs.rmSync(branchDir, { recursive: true, force: true });
  const back = await openNode(t, { ...branchOptions, branchPoint: undefined });
  assert.deepEqual(await contents(back), expected(0, 11));
  await back.close();

  // The same through ObjectStore objects: the source's pieces are found through ancestorStore.
  const own = new LocalObjectStore({ root: objects.root, bucket: objects.bucket, prefix: 'branch2/' });
  const ancestor = new LocalObjectStore({ root: objects.root, bucket: objects.bucket, prefix: 'source/' });
  onCleanup(t, () => (own.close(), ancestor.close()));
  const objectDir = await tempDir(t, 'kvs-embed-');
  const viaObjects = await openNode(t, { dataDir: objectDir, objectStore: own, branchPoint: { sourceStore: ancestor, checkpointKey }, checkpointInterval: 200 });
  await viaObjects.put('k10', 'v10');
  await pollUntil('a checkpoint of branch2/', async () => ((await readLatest(own))?.revision ?? 0) >= viaObjects.currentRevision() || undefined);
  assert.equal((await requireCheckpointManifest(own, (await readLatest(own))!.checkpoint)).source_prefix, ancestor.location);
  await viaObjects.close();
  fs.rmSync(objectDir, { recursive: true, force: true });
  await assert.rejects(open({ dataDir: objectDir, objectStore: own }), /pass that store as ancestorStore/);
  const viaAncestor = await openNode(t, { dataDir: objectDir, objectStore: own, ancestorStore: ancestor });
  assert.deepEqual(await contents(viaAncestor), expected(0, 11));
  await viaAncestor.close();

  const registrations = await openObjectStore(location(objects));
  onCleanup(t, () => registrations.close());
  assert.ok(await registrations.head(branchKey('b1')), 'fork registered the branch in the source prefix');
  await unfork(location(objects), 'b1');
  assert.equal(await registrations.head(branchKey('b1')), undefined, 'unfork removed the registration');
  await assert.rejects(unfork(location(objects), 'b1'), /not registered/);
  await assert.rejects(fork(location(objects), '../b2'), /branchId must be 1-128 characters/);
  await assert.rejects(fork(location(objects), 'b2', { checkpointKey: 'wal/x' }), /checkpointKey must be a checkpoint key/);
});

test('walSyncUpload: every put acknowledged before SIGKILL of the embedding process is in the object store', async (t) => {
  const objects = await localObjectStore(t);
  const dataDir = await tempDir(t, 'kvs-embed-');
  // Killed in the middle of its writes: some are in flight.
  const acked = await killWriterAfter(t, dataDir, 400, { objectStore: location(objects), walSyncUpload: true });
  fs.rmSync(dataDir, { recursive: true, force: true });
  const node = await openNode(t, { dataDir, objectStore: location(objects) });
  const missing = await lostPuts(node, acked);
  assert.equal(missing, 0, `${missing} acknowledged puts lost with the data directory`);
});
