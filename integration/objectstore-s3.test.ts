// The object-store contract against S3 on a real Ceph RGW, plus what only a versioned bucket
// has: old versions by id, and the listing of versions and delete markers.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { openObjectStore, type ObjectVersion } from '../shared/objectstore/index.js';
import { objectStoreContract } from './objectstore-contract.js';
import { fileScope } from '../testkit/harness.js';
import { startS3Server } from '../testkit/s3-server.js';

const s3 = await startS3Server(fileScope);
const bucket = await s3.createBucket();

objectStoreContract('S3 (Ceph RGW)', () => ({ options: (prefix) => s3.storeOptions(bucket, prefix), env: s3.env }));
objectStoreContract('encrypted S3 (Ceph RGW)', () => {
  const key = randomBytes(32);
  return { options: (prefix) => s3.storeOptions(bucket, prefix, key), env: s3.env };
});

test('S3 versioned bucket: get by version id, list versions and delete markers', async () => {
  const versioned = await s3.createBucket({ versioned: true });
  const store = await openObjectStore(s3.storeOptions(versioned, 'pitr/'));
  const v1 = await store.put('manifest/latest', Buffer.from('one'));
  const v2 = await store.put('manifest/latest', Buffer.from('two'));
  assert.ok(v1.versionId && v2.versionId && v1.versionId !== v2.versionId);
  assert.equal((await store.get('manifest/latest', { versionId: v1.versionId }))?.body.toString(), 'one');
  assert.equal((await store.get('manifest/latest', { versionId: v2.versionId }))?.body.toString(), 'two');
  assert.equal((await store.get('manifest/latest'))?.versionId, v2.versionId);

  await store.delete('manifest/latest');
  assert.equal(await store.get('manifest/latest'), undefined);
  assert.equal((await store.get('manifest/latest', { versionId: v1.versionId }))?.body.toString(), 'one', 'old versions survive a delete');
  assert.equal(await store.get('manifest/latest', { versionId: 'no-such-version-id' }), undefined);

  const versions: ObjectVersion[] = [];
  for await (const v of store.listVersions('manifest/')) versions.push(v);
  assert.deepEqual(
    versions.map((v) => [v.key, v.deleteMarker, v.isLatest]),
    [
      ['manifest/latest', true, true],
      ['manifest/latest', false, false],
      ['manifest/latest', false, false],
    ],
  );
  assert.deepEqual(versions.filter((v) => !v.deleteMarker).map((v) => v.versionId), [v2.versionId, v1.versionId]);
  store.close();
});

test('S3: a missing bucket and wrong credentials fail with the location in the message', async () => {
  const missing = await openObjectStore(s3.storeOptions('no-such-bucket-here', 'p/'));
  await assert.rejects(missing.put('k', Buffer.from('x')), /s3:\/\/no-such-bucket-here\/p\/ .*put k failed: NoSuchBucket/);
  // Not "absent": a node reading manifest/latest from a wrong bucket would boot EMPTY.
  await assert.rejects(missing.get('manifest/latest'), /get manifest\/latest failed: NoSuchBucket/);
  missing.close();
});

test('S3: requests fail while the gateway is down, and work again after it restarts, data kept', async () => {
  const store = await openObjectStore(s3.storeOptions(bucket, 'restart/'));
  await store.put('k', Buffer.from('before'));
  await s3.stopGateway();
  await assert.rejects(store.get('k'), /get k failed/);
  await s3.startGateway();
  assert.equal((await store.get('k'))?.body.toString(), 'before');
  store.close();
});
