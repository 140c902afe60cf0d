// The object store as durable truth (spec: Durability, Limits, Startup failures, branching):
// real kvs nodes with a local-directory object store, under write load, losing their disk,
// their archiver or their object store.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { SST_PREFIX, MANIFEST_LATEST } from '../shared/objectstore/layout.js';
import { listWalSegments } from '../shared/objectstore/catalog.js';
import {
  client,
  pollUntil,
  freePort,
  KVS_BIN,
  runCommand,
  component,
  localObjectStore,
  objectStoreArgs,
  startKvs,
  tempDir,
  type ObjectStoreSpec,
} from '../testkit/harness.js';
import { assertWalExactlyOnce, checkpoint, diskLossScenario, keys, openStore, storeDownScenario, type Backend } from './archiver-scenarios.js';
import { Load, verify } from './load.js';

const local: Backend = {
  name: 'local directory',
  async open(t) {
    const objects = await localObjectStore(t);
    // The bucket directory is a symlink, swapped atomically (rename) to one pointing at a file:
    // then every object-store request fails, and nothing can recreate the directory meanwhile.
    const bucketDir = path.join(objects.root, objects.bucket);
    await mkdir(`${bucketDir}.data`);
    await writeFile(`${bucketDir}.file`, 'not a directory');
    await symlink(`${bucketDir}.data`, bucketDir);
    const point = async (target: string) => {
      await symlink(target, `${bucketDir}.swap`);
      await rename(`${bucketDir}.swap`, bucketDir);
    };
    return {
      nodeOptions: (prefix = objects.prefix) => ({ objectStore: { ...objects, prefix } }),
      store: (t2, prefix = objects.prefix) => openStore(t2, { ...objects, prefix }),
      down: () => point(`${bucketDir}.file`),
      up: () => point(`${bucketDir}.data`),
    };
  },
};

diskLossScenario(local);
test('kvs ctl restart archiver under write load (twice): writes continue, no WAL object lost or duplicated', async (t) => {
  const objects = await localObjectStore(t);
  const node = await startKvs(t, { objectStore: objects });
  const load = new Load(t, node.endpoint, 4);
  await load.untilAcked(200);
  for (let i = 1; i <= 2; i++) {
    const before = await component(node, 'archiver');
    const r = await node.ctl(['restart', 'archiver']);
    assert.equal(r.exitCode, 0, r.stderr);
    const after = await component(node, 'archiver');
    assert.notEqual(after.pid, before.pid);
    assert.equal(after.restarts, i);
    await load.untilAcked(load.acked.length + 200);
  }
  await load.stop();
  t.diagnostic(load.summary());
  // The writes waited for the archiver; none failed.
  assert.equal(load.failed.length, 0, load.summary());
  const storage = await component(node, 'storage');
  assert.equal(storage.restarts, 0);
  assert.match((await component(node, 'archiver')).detail, /^uploaded through \d+/);

  const current = await verify(client(t, node.endpoint), load);
  await assertWalExactlyOnce(await openStore(t, objects), current);
});

storeDownScenario(local);

test('checkpoints are content-addressed: a second checkpoint after a small change uploads few pieces', async (t) => {
  const objects = await localObjectStore(t);
  const node = await startKvs(t, { objectStore: objects });
  const c = client(t, node.endpoint);
  for (let i = 0; i < 2000; i += 50) {
    await Promise.all(Array.from({ length: 50 }, (_, j) => c.put(`big/${i + j}`).value(randomBytes(8192))));
  }
  const store = await openStore(t, objects);
  const first = await checkpoint(node);
  assert.ok(first.pieces >= 16, `a database of 16 MB in 1 MiB pieces, got ${first.pieces}`);
  await c.put('small').value('change');
  const before = (await keys(store, SST_PREFIX)).length;
  const second = await checkpoint(node);
  t.diagnostic(`first: ${JSON.stringify(first)}; second: ${JSON.stringify(second)}`);
  assert.notEqual(second.key, first.key);
  assert.ok(second.pieces >= first.pieces);
  // One put relocates a few LMDB pages (copy-on-write along the history and keyrevs paths,
  // the meta and free-list trees, ~10 pages), each of which may land in a different 1 MiB
  // piece: most pieces are unchanged and must not be uploaded again (7 of 24 were seen).
  assert.ok(second.uploaded <= second.pieces / 2, `the small change uploaded ${second.uploaded} of ${second.pieces} pieces`);
  assert.equal((await keys(store, SST_PREFIX)).length, before + second.uploaded, 'new sst/ objects: exactly the uploaded pieces');
});

test('startup failures: an unreadable manifest, and a data directory with data but no local manifest', async (t) => {
  const objects = await localObjectStore(t);
  const store = await openStore(t, objects);
  const port = await freePort();
  const run = (dataDir: string, spec: ObjectStoreSpec = objects, env?: Record<string, string>) =>
    runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', dataDir, '--listen', `127.0.0.1:${port}`, ...objectStoreArgs(spec)], { env, timeoutMs: 120_000 });

  await store.put(MANIFEST_LATEST, Buffer.from('{ not json'));
  const garbled = await run(await tempDir(t, 'kvs-node-'));
  assert.notEqual(garbled.exitCode, 0);
  assert.match(garbled.stderr + garbled.stdout, /failed to read the object-store manifest .*manifest\/latest/);

  // An S3 endpoint nobody answers on.
  const unreachable = await run(await tempDir(t, 'kvs-node-'), { endpoint: `http://127.0.0.1:${await freePort()}`, bucket: 'b', prefix: 'p/' }, {
    KVS_S3_ACCESS_KEY_ID: 'test',
    KVS_S3_SECRET_ACCESS_KEY: 'test',
  });
  assert.notEqual(unreachable.exitCode, 0);
  assert.match(unreachable.stderr + unreachable.stdout, /failed to read the object-store manifest.*Check that the object store is reachable/);

  // A prefix with a checkpoint, and a data directory holding something but no local manifest.
  await store.delete(MANIFEST_LATEST);
  const node = await startKvs(t, { objectStore: objects });
  await client(t, node.endpoint).put('k').value('v');
  await checkpoint(node);
  await node.stop();
  const partial = await tempDir(t, 'kvs-node-');
  await mkdir(path.join(partial, 'db'));
  await writeFile(path.join(partial, 'db', 'data.mdb'), 'half a restore');
  const refused = await run(partial);
  assert.notEqual(refused.exitCode, 0);
  assert.match(refused.stderr + refused.stdout, /data directory .* is not empty but has no local manifest .*Clear the directory to restore it/);
});

test('kvs restore: a new data directory from the object store, then a node on it', async (t) => {
  const objects = await localObjectStore(t);
  const node = await startKvs(t, { objectStore: objects });
  const load = new Load(t, node.endpoint, 4);
  await load.untilAcked(150);
  await checkpoint(node);
  await load.untilAcked(load.acked.length + 150);
  await load.stop();
  await node.stop();

  const target = path.join(await tempDir(t, 'kvs-restore-'), 'data');
  const r = await runCommand(process.execPath, [KVS_BIN, 'restore', '--data-dir', target, ...objectStoreArgs(objects)], { timeoutMs: 60_000 });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.match(r.stdout, /^restored checkpoint checkpoint\/0000000001\/\d{20}\/manifest\.json and \d+ uploaded WAL records from file:\/\/.* into /);
  const again = await runCommand(process.execPath, [KVS_BIN, 'restore', '--data-dir', target, ...objectStoreArgs(objects)], { timeoutMs: 60_000 });
  assert.notEqual(again.exitCode, 0);
  assert.match(again.stderr, /is not empty .*kvs restore fills a new or empty directory/);

  const restored = await startKvs(t, { objectStore: objects, dataDir: target });
  assert.doesNotMatch(restored.output(), /restored checkpoint/, 'the node found a complete data directory');
  await verify(client(t, restored.endpoint), load);
});

test('async upload (--wal-sync-upload=false): segments uploaded on rotation, and after a crash what was not uploaded yet', async (t) => {
  const objects = await localObjectStore(t);
  const store = await openStore(t, objects);
  const node = await startKvs(t, { objectStore: objects, args: ['--wal-sync-upload=false'] });
  const c = client(t, node.endpoint);
  for (let i = 1; i <= 50; i++) await c.put(`async/${i}`).value(String(i));
  const uploaded = async (through: number) => {
    const o = await listWalSegments(store);
    return o.length > 0 && o[o.length - 1]!.last >= BigInt(through);
  };
  // Sealed after 10 s, then uploaded.
  await pollUntil('the segment holding records 1..50 to be uploaded', async () => ((await uploaded(50)) ? true : undefined));

  for (let i = 51; i <= 80; i++) await c.put(`async/${i}`).value(String(i));
  await node.kill9(); // records 51..80 are in the local WAL only
  await node.restart();
  await pollUntil('the WAL left by the crash to be uploaded', async () => ((await uploaded(80)) ? true : undefined));

  await node.kill9();
  await rm(node.dataDir, { recursive: true, force: true });
  await node.restart();
  const res = await client(t, node.endpoint).getAll().prefix('async/').strings();
  assert.equal(Object.keys(res).length, 80);
  for (let i = 1; i <= 80; i++) assert.equal(res[`async/${i}`], String(i));
});

test('branch: first boot from the source checkpoint without copying it; branch and source then diverge', async (t) => {
  const objects = await localObjectStore(t, 'source/');
  const source = await startKvs(t, { objectStore: objects });
  const sc = client(t, source.endpoint);
  for (let i = 0; i < 200; i++) await sc.put(`shared/${i}`).value(`v${i}`);
  const fork = await checkpoint(source);

  const branchSpec = { ...objects, prefix: 'branch/' };
  const branch = await startKvs(t, {
    objectStore: branchSpec,
    args: ['--branch-prefix', objects.prefix, '--branch-checkpoint', fork.key],
  });
  const bc = client(t, branch.endpoint);
  assert.equal(Object.keys(await bc.getAll().prefix('shared/').strings()).length, 200);

  await bc.put('x').value('branch');
  await sc.put('x').value('source');
  await bc.delete().key('shared/0');
  assert.equal(await bc.get('x').string(), 'branch');
  assert.equal(await sc.get('x').string(), 'source');
  assert.equal(await sc.get('shared/0').string(), 'v0');
  assert.equal(await bc.get('shared/0').string(), null);

  // The branch's own checkpoint shares the source's pieces instead of copying them.
  await checkpoint(branch);
  const sourceStore = await openStore(t, objects);
  const branchStore = await openStore(t, branchSpec);
  const sourceSsts = new Set(await keys(sourceStore, SST_PREFIX));
  const copied = (await keys(branchStore, SST_PREFIX)).filter((k) => sourceSsts.has(k));
  assert.deepEqual(copied, [], 'sst/ objects of the source copied into the branch prefix');

  // The branch recovers from its own prefix (and the source's pieces it references).
  await branch.kill9();
  await rm(branch.dataDir, { recursive: true, force: true });
  await branch.restart();
  assert.equal(await bc.get('x').string(), 'branch');
  assert.equal(await bc.get('shared/0').string(), null);
  assert.equal(await bc.get('shared/199').string(), 'v199');
});

test('a node that ran without an object store adopts one: its database is checkpointed first, then survives disk loss', async (t) => {
  const objects = await localObjectStore(t);
  const plain = await startKvs(t);
  const c = client(t, plain.endpoint);
  for (let i = 0; i < 50; i++) await c.put(`before/${i}`).value(String(i));
  await plain.stop();

  const node = await startKvs(t, { objectStore: objects, dataDir: plain.dataDir });
  const nc = client(t, node.endpoint);
  for (let i = 0; i < 50; i++) await nc.put(`after/${i}`).value(String(i));
  await node.kill9();
  await rm(node.dataDir, { recursive: true, force: true });
  await node.restart();
  assert.equal(Object.keys(await nc.getAll().prefix('before/').strings()).length, 50);
  assert.equal(Object.keys(await nc.getAll().prefix('after/').strings()).length, 50);
  assert.equal((await nc.get('after/49').exec()).header.revision, '101');
});

test('watchers see each write of the sync upload path once, in order, after it is archived', async (t) => {
  const objects = await localObjectStore(t);
  const node = await startKvs(t, { objectStore: objects });
  const c = client(t, node.endpoint);
  const watcher = await c.watch().prefix('w/').create();
  const seen: number[] = [];
  const all = new Promise<void>((resolve) =>
    watcher.on('put', (kv) => {
      seen.push(Number(kv.mod_revision));
      if (seen.length === 200) resolve();
    }),
  );
  // Concurrent writers: batches of several writes each.
  await Promise.all(Array.from({ length: 10 }, async (_, w) => {
    for (let i = 0; i < 20; i++) await c.put(`w/${w}/${i}`).value('x');
  }));
  await all;
  await watcher.cancel();
  assert.deepEqual(seen, Array.from({ length: 200 }, (_, i) => i + 2));
  const uploaded = await listWalSegments(await openStore(t, objects));
  assert.equal(uploaded[uploaded.length - 1]!.last, 200n);
});
