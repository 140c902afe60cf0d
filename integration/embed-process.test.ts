// The embedded node beside real processes: a program embedding a node is killed with kill -9
// under load and every put it saw acknowledged is there when the directory is opened again;
// a data directory written by an embedded node is served by `kvs run` (read with etcdctl), and
// one written through `kvs run` is opened by an embedded node, revisions continuing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { KVS_BIN, etcdctl, runCommand, startKvs, tempDir } from '../testkit/harness.js';
import { open } from '../embed/index.js';
import { killWriterAfter, lostPuts } from './embed-crash.js';

test('kill -9 of a program that embeds a node under load: every acknowledged put survives', async (t) => {
  const dir = await tempDir(t, 'kvs-embed-crash');
  const acked = await killWriterAfter(t, dir, 3000);
  const node = await open({ dataDir: dir });
  t.after(() => node.close());
  const missing = await lostPuts(node, acked);
  assert.equal(missing, 0, `${missing} acknowledged puts lost`);
  assert.equal(acked.size, 8);
});

test('a data directory moves between an embedded node and `kvs run`, both ways', async (t) => {
  const dir = await tempDir(t, 'kvs-embed-interop');
  const embedded = await open({ dataDir: dir });
  for (let i = 0; i < 10; i++) await embedded.put(`e/${i}`, `embedded ${i}`);
  const lease = await embedded.grantLease(3600);
  await embedded.put('e/leased', 'x', { lease });
  const written = embedded.currentRevision();
  // Never both at once: they take the same lock on the directory.
  const refused = await runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', dir, '--listen', '127.0.0.1:1']);
  assert.equal(refused.exitCode, 2, refused.stderr);
  assert.match(refused.stderr, new RegExp(`another kvs \\(pid ${process.pid}\\) is running on data directory`));
  await embedded.close();

  const kvs = await startKvs(t, { dataDir: dir });
  const got = await etcdctl(kvs.endpoint, ['get', '--prefix', 'e/', '-w', 'json']);
  assert.equal(got.exitCode, 0, got.stderr);
  const body = JSON.parse(got.stdout) as { header: { revision: number }; kvs: { key: string; value: string; lease?: number }[] };
  assert.equal(body.header.revision, written);
  assert.equal(body.kvs.length, 11);
  assert.equal(Buffer.from(body.kvs.find((kv) => Buffer.from(kv.key, 'base64').toString() === 'e/3')!.value, 'base64').toString(), 'embedded 3');
  const leases = await etcdctl(kvs.endpoint, ['lease', 'list']);
  assert.match(leases.stdout, new RegExp(lease.id.toString(16)));
  assert.equal((await etcdctl(kvs.endpoint, ['put', 'r/1', 'from kvs run'])).exitCode, 0);
  assert.equal((await etcdctl(kvs.endpoint, ['del', 'e/0'])).exitCode, 0);
  await assert.rejects(open({ dataDir: dir }), /another kvs \(pid \d+\) is running on data directory/);
  await kvs.stop();

  const again = await open({ dataDir: dir });
  t.after(() => again.close());
  assert.equal(again.currentRevision(), written + 2);
  assert.equal((await again.get('r/1'))?.value.toString(), 'from kvs run');
  assert.equal(await again.get('e/0'), undefined);
  assert.equal((await again.get('e/leased'))?.lease, lease.id);
  assert.equal((await again.put('e/after', 'y')).revision, written + 3);
});
