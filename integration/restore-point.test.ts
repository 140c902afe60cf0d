// Versioned point-in-time restore: `kvs restore-point` records the versions a restore reads,
// and the RestorePointStore view serves exactly them, after later checkpoints, overwrites and
// gc. On a versioned bucket of a real Ceph RGW.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { openObjectStore, type ObjectStore } from '../shared/objectstore/index.js';
import { MANIFEST_LATEST, walKey, type Latest } from '../shared/objectstore/layout.js';
import { RestorePointStore, parseRestorePoint } from '../shared/objectstore/restore-point.js';
import { fileScope, tempDir } from '../testkit/harness.js';
import { failed, history, keys, kvs, ok, sha, writeCheckpoint, writeLatest } from './objectstore-fixtures.js';
import { startS3Server } from '../testkit/s3-server.js';

const s3 = await startS3Server(fileScope);

async function body(store: ObjectStore, key: string): Promise<string | undefined> {
  return (await store.get(key))?.body.toString();
}

test('a restore point serves the recorded versions after new checkpoints, overwrites and gc', async (t) => {
  const bucket = await s3.createBucket({ versioned: true });
  const key = randomBytes(32);
  const keyFile = path.join(await tempDir(t, 'kvs-rp-'), 'key');
  await writeFile(keyFile, key.toString('base64'));
  const store = await openObjectStore(s3.storeOptions(bucket, 'prod/', key));
  const flags = [...s3.kvsArgs(bucket, 'prod/'), '--object-store-encryption-key-file', keyFile];
  const [, , c3] = await history(store); // latest: c3 at 30; WAL 1..40
  const file = path.join(await tempDir(t, 'kvs-rp-'), 'point.json');
  const out = ok(await kvs(['restore-point', ...flags, '--output', file], s3.env));
  assert.match(out, new RegExp(`^restore point at revision 30 \\(${c3}, 5 objects\\) written to ${file}\\n$`));
  const point = parseRestorePoint(await readFile(file, 'utf8'), file);
  // manifest/latest, the checkpoint, its two SSTs, and the one WAL segment after it.
  assert.deepEqual(Object.keys(point.objects).sort(), [MANIFEST_LATEST, c3!, `sst/${sha('c')}`, `sst/${sha('d')}`, walKey(31n, 40n)].sort());

  // Life goes on: more WAL, a newer checkpoint, a WAL segment rewritten, then gc --keep 1.
  await store.put(walKey(41n, 50n), Buffer.from('later wal'));
  await store.put(walKey(31n, 40n), Buffer.from('rewritten'));
  const c4 = await writeCheckpoint(store, 2, 50, ['e']);
  await writeLatest(store, c4, 2, 50);
  ok(await kvs(['gc', ...flags, '--keep', '1'], s3.env));
  assert.deepEqual(await keys(store, 'checkpoint/'), [c4]);
  assert.deepEqual(await keys(store, 'wal/'), []);

  const view = new RestorePointStore(await openObjectStore(s3.storeOptions(bucket, 'prod/', key)), point);
  const latest = JSON.parse((await body(view, MANIFEST_LATEST))!) as Latest;
  assert.equal(latest.checkpoint, c3);
  assert.equal(latest.revision, 30);
  assert.match((await body(view, c3!))!, /"revision":30/);
  assert.equal(await body(view, `sst/${sha('c')}`), 'c');
  assert.equal(await body(view, `sst/${sha('d')}`), 'd');
  assert.equal(await body(view, walKey(31n, 40n)), 'wal', 'the version of the point, not the rewrite');
  assert.equal(await body(view, c4), undefined, 'nothing after the point');
  assert.deepEqual(await keys(view, 'wal/'), [walKey(31n, 40n)]);
  assert.deepEqual(await keys(view, 'checkpoint/'), [c3]);
  assert.equal((await view.head(`sst/${sha('c')}`))?.size, 1);
  await assert.rejects(view.put('x', Buffer.from('x')), /read-only/);
  await assert.rejects(view.delete(MANIFEST_LATEST), /read-only/);
  view.close();
  store.close();
});

test('a restore point needs a versioned bucket and a checkpoint', async (t) => {
  const dir = await tempDir(t, 'kvs-rp-');
  const plain = await s3.createBucket();
  const store = await openObjectStore(s3.storeOptions(plain, 'p/'));
  const out = path.join(dir, 'point.json');
  failed(await kvs(['restore-point', ...s3.kvsArgs(plain, 'p/'), '--output', out], s3.env), /no manifest\/latest .*nothing to record/);
  await history(store);
  failed(await kvs(['restore-point', ...s3.kvsArgs(plain, 'p/'), '--output', out], s3.env), /keeps no object versions: a restore point needs versioning enabled/);
  const local = pathToFileURL(dir).href;
  const localStore = await openObjectStore({ endpoint: local, bucket: 'b', prefix: '' });
  await history(localStore);
  failed(await kvs(['restore-point', '--s3-endpoint', local, '--s3-bucket', 'b', '--output', out]), /keeps no object versions/);
  failed(await kvs(['restore-point', ...s3.kvsArgs(plain, 'p/')], s3.env), /--output is required/);
  assert.throws(() => parseRestorePoint('{"format":"other"}', 'x.json'), /x.json is not a kvs restore point/);
  store.close();
  localStore.close();
});
