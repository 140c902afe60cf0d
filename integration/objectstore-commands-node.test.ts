// gc and branch registrations against what a real node writes (WAL objects, checkpoints by
// `kvs ctl checkpoint`, boot-time restore), on the local directory store and on S3 (Ceph RGW).
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { client, localObjectStore, objectStoreArgs, startKvs, type KvsNode, type ObjectStoreSpec } from '../testkit/harness.js';
import { checkpoint } from './archiver-scenarios.js';
import { kvs, ok } from './objectstore-fixtures.js';
import { startS3Server } from '../testkit/s3-server.js';

async function everything(c: Etcd3): Promise<Record<string, string>> {
  return c.getAll().prefix('').strings();
}

async function putMany(c: Etcd3, prefix: string, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i += 25) {
    await Promise.all(Array.from({ length: Math.min(25, to - i) }, (_, j) => c.put(`${prefix}/${i + j}`).value(`${prefix}-${i + j}`)));
  }
}

function gcCounts(out: string): { checkpoints: number; ssts: number; wal: number } {
  const m = /^deleted checkpoints: (\d+)\ndeleted orphan SSTs: (\d+)\ndeleted WAL segments: (\d+)\n$/.exec(out);
  assert.ok(m, `gc printed ${JSON.stringify(out)}`);
  return { checkpoints: Number(m[1]), ssts: Number(m[2]), wal: Number(m[3]) };
}

function count(status: string, what: string): number {
  const m = new RegExp(`^${what}: (\\d+)$`, 'm').exec(status);
  assert.ok(m, `no "${what}" in ${status}`);
  return Number(m[1]);
}

async function gcThenRestore(t: TestContext, spec: ObjectStoreSpec, env: Record<string, string>): Promise<void> {
  const flags = objectStoreArgs(spec);
  const node = await startKvs(t, { objectStore: spec, env });
  const c = client(t, node.endpoint);
  for (let round = 0; round < 3; round++) {
    await putMany(c, `round${round}`, 0, 100);
    await c.delete().key(`round${round}/0`);
    await checkpoint(node);
  }
  await putMany(c, 'after', 0, 50); // only in the WAL objects
  const before = await everything(c);
  assert.equal(Object.keys(before).length, 3 * 99 + 50);

  const statusBefore = ok(await kvs(['status', ...flags], env));
  assert.ok(count(statusBefore, 'checkpoints') >= 3, statusBefore);
  const deleted = gcCounts(ok(await kvs(['gc', ...flags, '--keep', '1'], env)));
  assert.equal(deleted.checkpoints, count(statusBefore, 'checkpoints') - 1);
  assert.ok(deleted.wal > 0, 'the WAL the latest checkpoint covers is gone');
  const statusAfter = ok(await kvs(['status', ...flags], env));
  assert.equal(count(statusAfter, 'checkpoints'), 1);
  assert.equal(count(statusAfter, 'WAL segments'), count(statusBefore, 'WAL segments') - deleted.wal);

  // A fresh node (empty data directory) on the prefix has every key.
  await node.stop();
  const fresh = await startKvs(t, { objectStore: spec, env });
  const fc = client(t, fresh.endpoint);
  assert.deepEqual(await everything(fc), before);
  await fc.put('after-restore').value('ok');
  assert.equal(await fc.get('after-restore').string(), 'ok');
}

test('after gc --keep 1, a fresh node still restores every key (local directory store)', async (t) => {
  await gcThenRestore(t, await localObjectStore(t), {});
});

test('after gc --keep 1, a fresh node still restores every key (S3 on Ceph RGW)', async (t) => {
  const s3 = await startS3Server(t);
  const spec = { endpoint: s3.endpoint, bucket: await s3.createBucket(), prefix: 'prod/' };
  await gcThenRestore(t, spec, s3.env);
});

test('a checkpoint pinned by a branch survives gc and serves the branch; after unfork gc reclaims it', async (t) => {
  const source = await localObjectStore(t, 'source/');
  const flags = objectStoreArgs(source);
  const node = await startKvs(t, { objectStore: source });
  const c = client(t, node.endpoint);
  await putMany(c, 'shared', 0, 200);
  const fork = await checkpoint(node);
  assert.equal(ok(await kvs(['branch', 'fork', ...flags, '--branch-id', 'staging', '--checkpoint', fork.key])), `${fork.key}\n`);

  // The source moves on: its data changes entirely, and two newer checkpoints follow.
  await c.delete().prefix('shared/');
  await putMany(c, 'later', 0, 200);
  await checkpoint(node);
  await c.put('later/x').value('y');
  await checkpoint(node);
  const deleted = gcCounts(ok(await kvs(['gc', ...flags, '--keep', '1'])));
  assert.ok(deleted.checkpoints >= 1);
  const status = ok(await kvs(['status', ...flags]));
  assert.equal(count(status, 'checkpoints'), 2, 'the latest and the pinned one');
  assert.match(status, new RegExp(`^  staging: ${fork.key} `, 'm'));

  // A branch node's first boot starts from the pinned checkpoint, in place in the source.
  const branchSpec = { ...source, prefix: 'staging/' };
  const branch: KvsNode = await startKvs(t, { objectStore: branchSpec, args: ['--branch-prefix', source.prefix, '--branch-checkpoint', fork.key] });
  const bc = client(t, branch.endpoint);
  const shared = await bc.getAll().prefix('shared/').strings();
  assert.equal(Object.keys(shared).length, 200);
  assert.equal(shared['shared/7'], 'shared-7');
  assert.deepEqual(await bc.getAll().prefix('later/').keys(), []);

  // Decommission the branch, unfork, and gc reclaims the checkpoint and its pieces.
  await branch.stop();
  ok(await kvs(['branch', 'unfork', ...flags, '--branch-id', 'staging']));
  const reclaimed = gcCounts(ok(await kvs(['gc', ...flags, '--keep', '1'])));
  assert.equal(reclaimed.checkpoints, 1);
  assert.ok(reclaimed.ssts > 0, 'the pieces only the pinned checkpoint used are deleted');
  const after = ok(await kvs(['status', ...flags]));
  assert.equal(count(after, 'checkpoints'), 1);
  assert.match(after, /^branch forks: none$/m);

  // The source is still whole.
  await node.stop();
  const fresh = await startKvs(t, { objectStore: source });
  const fc = client(t, fresh.endpoint);
  assert.equal(Object.keys(await fc.getAll().prefix('later/').strings()).length, 201);
  assert.deepEqual(await fc.getAll().prefix('shared/').keys(), []);
});
