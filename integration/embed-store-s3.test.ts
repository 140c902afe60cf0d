// An embedded node on S3 (a real Ceph RGW, started for this file, as archiver-s3.test.ts does):
// a lost data directory comes back from the bucket.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { open } from '../embed/index.js';
import { fileScope, onCleanup } from '../testkit/harness.js';
import { tempDir } from '../testkit/process.js';
import { startS3Server } from '../testkit/s3-server.js';

test('an embedded node on Ceph RGW whose data directory is lost comes back from the bucket', async (t) => {
  const s3 = await startS3Server(fileScope);
  const bucket = await s3.createBucket();
  const objectStore = { bucket, prefix: 'embedded/', endpoint: s3.endpoint, region: 'us-east-1', credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey } };
  const dataDir = await tempDir(t, 'kvs-embed-');
  const node = await open({ dataDir, objectStore });
  onCleanup(t, () => node.close());
  for (let i = 0; i < 20; i++) await node.put(`k${i}`, `v${i}`);
  await node.close();

  fs.rmSync(dataDir, { recursive: true, force: true });
  const back = await open({ dataDir, objectStore });
  onCleanup(t, () => back.close());
  const got = (await back.list('k')).kvs.map((kv) => `${kv.key}=${kv.value}`).sort();
  assert.deepEqual(got, Array.from({ length: 20 }, (_, i) => `k${i}=v${i}`).sort());
});
