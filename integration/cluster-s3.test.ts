// Cluster mode on a real S3 server (Ceph RGW, an unversioned bucket: its conditional writes
// guard the leader lock; see s3-server.ts): election, forwarding, follower reads, a kill -9
// failover without losing an acknowledged write, and a fresh node restoring from the bucket.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileScope, pollUntil } from '../testkit/harness.js';
import { startS3Server } from '../testkit/s3-server.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';

const s3 = await startS3Server(fileScope);

test('a three-node cluster on Ceph RGW: forwarding, follower reads, kill -9 failover, a fresh node joins', async (t) => {
  const bucket = await s3.createBucket({ versioned: false });
  const store = { args: s3.kvsArgs(bucket, 'cluster/'), env: s3.env };
  const cluster = await startCluster(t, 3, { store });
  const leader = await waitForLeader(cluster.nodes);
  const [f1, f2] = cluster.nodes.filter((n) => n !== leader);

  const acked = new Map<string, number>();
  for (let i = 0; i < 30; i++) {
    const via = [leader, f1, f2][i % 3];
    const r = await via.client.put(`s3/${i}`).value(String(i)).exec();
    acked.set(`s3/${i}`, Number(r.header.revision));
    assert.equal(await [f2, leader, f1][i % 3].client.get(`s3/${i}`).string(), String(i), 'read at once on another node');
  }

  await leader.kvs.kill9();
  const next = await waitForLeader([f1, f2]);
  for (let i = 30; i < 40; i++) {
    const r = await f1.client.put(`s3/${i}`).value(String(i)).exec();
    acked.set(`s3/${i}`, Number(r.header.revision));
  }
  for (const n of [f1, f2]) {
    for (const [key, rev] of acked) assert.equal(Number((await n.client.get(key).exec()).kvs[0]?.mod_revision), rev, `${key} on ${n.id}`);
  }

  await leader.kvs.restart();
  const fresh = await cluster.add('n4');
  const all = await waitForLeader([...cluster.nodes, fresh]);
  assert.equal(all.id, next.id);
  for (const n of [leader, fresh]) {
    await pollUntil(`${n.id} has every key`, async () => ((await n.client.getAll().prefix('s3/').keys()).length === 40 ? true : undefined), 60_000);
    for (const [key, rev] of acked) assert.equal(Number((await n.client.get(key).exec()).kvs[0]?.mod_revision), rev, `${key} on ${n.id}`);
  }
});
