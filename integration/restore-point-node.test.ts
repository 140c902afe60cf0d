// Versioned point-in-time restore end to end: a real node on a versioned Ceph RGW bucket, a
// restore point recorded with `kvs restore-point` while it runs, then more writes, overwrites,
// deletes, a newer checkpoint and gc; `kvs restore --restore-point` (the node's own restore,
// run over the recorded versions) rebuilds exactly the state of the point.
import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import type { Etcd3 } from 'etcd3';
import { client, objectStoreArgs, startKvs, tempDir } from '../testkit/harness.js';
import { checkpoint } from './archiver-scenarios.js';
import { failed, kvs, ok } from './objectstore-fixtures.js';
import { startS3Server } from '../testkit/s3-server.js';

async function everything(c: Etcd3): Promise<Record<string, string>> {
  return c.getAll().prefix('').strings();
}

test('kvs restore --restore-point rebuilds exactly the state at the point, after later writes and gc', async (t) => {
  const s3 = await startS3Server(t);
  const spec = { endpoint: s3.endpoint, bucket: await s3.createBucket({ versioned: true }), prefix: 'prod/' };
  const flags = objectStoreArgs(spec);
  const node = await startKvs(t, { objectStore: spec, env: s3.env });
  const c = client(t, node.endpoint);
  for (let i = 0; i < 100; i++) await c.put(`k/${i}`).value(`v1-${i}`);
  await checkpoint(node);
  for (let i = 0; i < 50; i++) await c.put(`k/${i}`).value(`v2-${i}`); // after the checkpoint: WAL only
  await c.delete().key('k/99');
  const atPoint = await everything(c);
  const revisionAtPoint = (await c.get('k/0').exec()).header.revision;

  const dir = await tempDir(t, 'kvs-pitr-');
  const pointFile = path.join(dir, 'point.json');
  assert.match(ok(await kvs(['restore-point', ...flags, '--output', pointFile], s3.env)), /^restore point at revision \d+ /);

  // Later: overwrites, deletes, new keys, a newer checkpoint, gc.
  for (let i = 0; i < 100; i++) await c.put(`k/${i}`).value(`v3-${i}`);
  await c.delete().key('k/1');
  await c.put('new').value('later');
  await checkpoint(node);
  ok(await kvs(['gc', ...flags, '--keep', '1'], s3.env));

  const target = path.join(dir, 'restored');
  assert.match(ok(await kvs(['restore', ...flags, '--data-dir', target, '--restore-point', pointFile], s3.env)), /^restored /);
  // The restored directory runs as a node of its own (no object store: the prefix has moved on).
  const restored = await startKvs(t, { dataDir: target });
  const rc = client(t, restored.endpoint);
  assert.deepEqual(await everything(rc), atPoint);
  assert.equal((await rc.get('k/0').exec()).header.revision, revisionAtPoint);

  failed(await kvs(['restore', ...flags, '--data-dir', path.join(dir, 'other'), '--restore-point', path.join(dir, 'missing.json')], s3.env), /restore point/);
});
