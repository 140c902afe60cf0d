// etcdctl 3.4's maintenance commands against kvs and a real etcd, side by side (the same
// normalised output, integration/etcdctl-compare.ts): endpoint status and hashkv, defrag,
// alarm, move-leader and snapshot save.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { test } from 'node:test';
import { etcdctl, startEtcd, startKvs, tempDir } from '../testkit/harness.js';
import { etcdctlSideBySide, lastError, parseJson } from './etcdctl-compare.js';

/** The member id of the node at `endpoint` as etcdctl prints and takes it: hex. */
async function memberHex(endpoint: string): Promise<string> {
  const [s] = parseJson((await etcdctl(endpoint, ['endpoint', 'status', '-w', 'json'])).stdout) as { Status: { leader: string | number } }[];
  return BigInt(s!.Status.leader).toString(16);
}

test('etcdctl maintenance commands print the same from kvs as from etcd', async (t) => {
  const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
  const { same, ok } = etcdctlSideBySide(kvs.endpoint, etcd.endpoint);

  for (let i = 0; i < 20; i++) await ok(['put', `key${i % 7}`, `value ${i}`]);
  await ok(['del', 'key3']);
  await ok(['txn'], { input: '\nput t1 a\nput t2 b\ndel key4\n\n\n' });

  await t.test('endpoint status', async () => {
    await ok(['endpoint', 'status', '-w', 'json']);
    const [k] = parseJson((await ok(['endpoint', 'status', '-w', 'json'])).stdout) as { Status: { header: { member_id: unknown }; leader: unknown } }[];
    assert.equal(k!.Status.leader, k!.Status.header.member_id, 'a single kvs node is its own leader');
  });

  await t.test('endpoint hashkv: the same hash as etcd', async () => {
    const text = await ok(['endpoint', 'hashkv']);
    assert.match(text.stdout, /^127\.0\.0\.1:\d+, \d+\n$/);
    await ok(['endpoint', 'hashkv', '-w', 'json']);
    await ok(['endpoint', 'hashkv', '--rev', '5']);
    await ok(['compact', '10']);
    await ok(['endpoint', 'hashkv', '-w', 'json']);
    await ok(['endpoint', 'hashkv', '--rev', '12']);
    const compacted = await same(['endpoint', 'hashkv', '--rev', '9']);
    assert.equal(lastError(compacted.kvs), 'Error: etcdserver: mvcc: required revision has been compacted');
    const future = await same(['endpoint', 'hashkv', '--rev', '1000']);
    assert.equal(lastError(future.kvs), 'Error: etcdserver: mvcc: required revision is a future revision');
  });

  await t.test('defrag', async () => {
    const r = await ok(['defrag']);
    assert.match(r.stdout, /^Finished defragmenting etcd member\[127\.0\.0\.1:\d+\]\n$/);
  });

  await t.test('alarm list and disarm', async () => {
    assert.equal((await ok(['alarm', 'list'])).stdout, '');
    assert.equal((await ok(['alarm', 'disarm'])).stdout, '');
    assert.equal((await ok(['alarm', 'list'])).stdout, '');
  });

  await t.test('move-leader', async () => {
    const [kvsHex, etcdHex] = await Promise.all([memberHex(kvs.endpoint), memberHex(etcd.endpoint)]);
    const self = await ok(['move-leader', '<self>'], { replace: [[kvsHex, etcdHex, '<self>']] });
    assert.equal(self.stdout, `Leadership transferred from ${kvsHex} to ${kvsHex}\n`);
    const unknown = await same(['move-leader', '1234abcd']);
    assert.notEqual(unknown.kvs.exitCode, 0);
    assert.equal(lastError(unknown.kvs), 'Error: etcdserver: bad leader transferee');
  });

  await t.test('snapshot save: a database file with its sha256 appended', async () => {
    const [kvsDir, etcdDir] = await Promise.all([tempDir(t, 'kvs-snap-'), tempDir(t, 'etcd-snap-')]);
    const r = await ok(['snapshot', 'save', '<dir>/snap.db'], { replace: [[kvsDir, etcdDir, '<dir>']] });
    assert.equal(r.stdout, `Snapshot saved at ${kvsDir}/snap.db\n`);
    for (const dir of [kvsDir, etcdDir]) {
      const file = readFileSync(path.join(dir, 'snap.db'));
      assert.equal(file.length % 512, 32, `${dir}: etcdctl snapshot restore looks for the sha256 by size`);
      const body = file.subarray(0, file.length - 32);
      assert.deepEqual(createHash('sha256').update(body).digest(), file.subarray(file.length - 32), `${dir}: sha256 trailer`);
    }
  });
});
