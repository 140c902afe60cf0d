// `kvs status`, `kvs gc` and `kvs branch fork|unfork` as a user runs them (the real CLI, in
// its own process), over object-store prefixes laid out by hand with the layout helpers: on
// the local directory store, and on S3 (a real Ceph RGW).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { openObjectStore, type ObjectStore } from '../shared/objectstore/index.js';
import { objectPath } from '../shared/objectstore/local-keys.js';
import { sstKey, walKey, type CheckpointManifest } from '../shared/objectstore/layout.js';
import { KVS_BIN, fileScope, runCommand, tempDir } from '../testkit/harness.js';
import { failed, history, keys, kvs, ok, sha, writeCheckpoint, writeLatest } from './objectstore-fixtures.js';
import { startS3Server } from '../testkit/s3-server.js';

const root = await tempDir(fileScope, 'kvs-objects-cmd-');
const endpoint = pathToFileURL(root).href;
let seq = 0;

async function freshPrefix(encryptionKey?: Buffer): Promise<{ store: ObjectStore; flags: string[]; prefix: string }> {
  const prefix = `p${++seq}/`;
  const store = await openObjectStore({ endpoint, bucket: 'b', prefix, encryptionKey });
  return { store, prefix, flags: ['--s3-endpoint', endpoint, '--s3-bucket', 'b', '--s3-prefix', prefix] };
}

test('status: an empty prefix, then one with checkpoints, WAL segments and a branch', async () => {
  const { store, flags, prefix } = await freshPrefix();
  assert.equal(
    ok(await kvs(['status', ...flags])),
    `object store: file://${root}/b/${prefix}\nlatest checkpoint: none\nrevision: none\nterm: none\ncheckpoints: 0\nWAL segments: 0\nbranch forks: none\n`,
  );
  const [c1, , c3] = await history(store);
  assert.equal(ok(await kvs(['branch', 'fork', ...flags, '--branch-id', 'staging', '--checkpoint', c1!])), `${c1}\n`);
  const out = ok(await kvs(['status', ...flags]));
  assert.match(out, new RegExp(`^latest checkpoint: ${c3}$`, 'm'));
  assert.match(out, /^revision: 30$/m);
  assert.match(out, /^term: 2$/m);
  assert.match(out, /^checkpoints: 3$/m);
  assert.match(out, /^WAL segments: 4$/m);
  assert.match(out, new RegExp(`^branch forks: 1\\n  staging: ${c1} \\(registered .*\\)$`, 'm'));
  const json = JSON.parse(ok(await kvs(['status', ...flags, '--json'])));
  assert.equal(json.latest.checkpoint, c3);
  assert.equal(json.walSegments, 4);
  assert.deepEqual(json.branches.map((b: { branchId: string }) => b.branchId), ['staging']);
  store.close();
});

test('gc --keep 1: old checkpoints, the SSTs only they used, and the WAL the latest covers', async () => {
  const { store, flags } = await freshPrefix();
  const [, , c3] = await history(store);
  // Not referenced by any checkpoint and fresh: an upload in progress, left alone.
  await store.put(sstKey(sha('uploading')), Buffer.from('uploading'));
  const r = await kvs(['gc', ...flags, '--keep', '1']);
  assert.equal(ok(r), 'deleted checkpoints: 2\ndeleted orphan SSTs: 2\ndeleted WAL segments: 3\n');
  // Not a terminal: progress is logged as JSON lines on stderr.
  const logged = r.stderr.trim().split('\n').map((l) => JSON.parse(l));
  assert.deepEqual([...new Set(logged.map((l) => l.phase))], ['checkpoints', 'orphan SSTs', 'WAL segments']);
  assert.deepEqual(await keys(store, 'checkpoint/'), [c3]);
  assert.deepEqual((await keys(store, 'sst/')).sort(), [sha('c'), sha('d'), sha('uploading')].map(sstKey).sort());
  assert.deepEqual(await keys(store, 'wal/'), [walKey(31n, 40n)]);
  assert.equal(ok(await kvs(['gc', ...flags, '--keep', '1'])), 'deleted checkpoints: 0\ndeleted orphan SSTs: 0\ndeleted WAL segments: 0\n');
  store.close();
});

test('gc on a terminal shows its progress as a line updated in place', async () => {
  const { store, flags } = await freshPrefix();
  await history(store);
  // script(1) gives the command a pseudo-terminal.
  const cmd = [process.execPath, KVS_BIN, 'gc', ...flags, '--keep', '1'].map((a) => `'${a}'`).join(' ');
  const out = ok(await runCommand('/usr/bin/script', ['-qec', cmd, '/dev/null'], { timeoutMs: 60_000 }));
  assert.match(out, /\rgc: checkpoints 0\/2\x1b\[K\rgc: checkpoints 1\/2\x1b\[K\rgc: checkpoints 2\/2\x1b\[K\r?\n/);
  assert.match(out, /\rgc: WAL segments 3\/3\x1b\[K\r?\n/);
  assert.match(out, /deleted checkpoints: 2\r?\ndeleted orphan SSTs: 2\r?\ndeleted WAL segments: 3/);
  assert.doesNotMatch(out, /"level"/, 'no JSON log lines on a terminal');
  store.close();
});

test('gc: the default keeps 3; unreferenced SSTs older than an hour go (an interrupted gc)', async () => {
  const { store, flags, prefix } = await freshPrefix();
  await history(store);
  await store.put(sstKey(sha('left-behind')), Buffer.from('x'));
  const file = path.join(fileURLToPath(endpoint), 'b', objectPath(prefix + sstKey(sha('left-behind'))));
  const twoHoursAgo = new Date(Date.now() - 2 * 3600_000);
  await utimes(file, twoHoursAgo, twoHoursAgo);
  assert.equal(ok(await kvs(['gc', ...flags])), 'deleted checkpoints: 0\ndeleted orphan SSTs: 1\ndeleted WAL segments: 3\n');
  assert.equal((await keys(store, 'checkpoint/')).length, 3);
  assert.equal((await keys(store, 'sst/')).length, 4);
  store.close();
});

test('gc never deletes a checkpoint a branch pins, nor its SSTs; after unfork it does', async () => {
  const { store, flags } = await freshPrefix();
  const [c1, c2, c3] = await history(store);
  ok(await kvs(['branch', 'fork', ...flags, '--branch-id', 'dev', '--checkpoint', c1!]));
  assert.equal(ok(await kvs(['gc', ...flags, '--keep', '1'])), 'deleted checkpoints: 1\ndeleted orphan SSTs: 0\ndeleted WAL segments: 3\n');
  assert.deepEqual(await keys(store, 'checkpoint/'), [c1, c3]);
  assert.ok(!(await keys(store, 'checkpoint/')).includes(c2!));
  assert.equal((await keys(store, 'sst/')).length, 4, 'a, b (pinned by c1), c, d');

  assert.equal(ok(await kvs(['branch', 'unfork', ...flags, '--branch-id', 'dev'])), `unforked dev (was pinning ${c1})\n`);
  assert.equal(ok(await kvs(['gc', ...flags, '--keep', '1'])), 'deleted checkpoints: 1\ndeleted orphan SSTs: 2\ndeleted WAL segments: 0\n');
  assert.deepEqual(await keys(store, 'checkpoint/'), [c3]);
  assert.deepEqual((await keys(store, 'sst/')).sort(), [sha('c'), sha('d')].map(sstKey).sort());
  store.close();
});

test("gc on a branch prefix keeps the branch's own pieces of checkpoints that also name source pieces", async () => {
  const { store, flags } = await freshPrefix();
  const [c1, , c3] = await history(store);
  // The newest checkpoint of a branch: one piece from the source prefix, one of its own.
  const m = JSON.parse((await store.get(c3!))!.body.toString()) as CheckpointManifest;
  m.source_prefix = 'source/';
  await store.put(c3!, Buffer.from(JSON.stringify(m)));
  assert.equal(ok(await kvs(['gc', ...flags, '--keep', '1'])), 'deleted checkpoints: 2\ndeleted orphan SSTs: 2\ndeleted WAL segments: 3\n');
  assert.ok(!(await keys(store, 'checkpoint/')).includes(c1!));
  assert.deepEqual((await keys(store, 'sst/')).sort(), [sha('c'), sha('d')].map(sstKey).sort());
  store.close();
});

test('branch fork defaults to the latest checkpoint, repeats harmlessly, and refuses what it cannot pin', async () => {
  const { store, flags } = await freshPrefix();
  failed(await kvs(['branch', 'fork', ...flags, '--branch-id', 'x']), /no checkpoint in .*this prefix has none yet/);
  const [c1, , c3] = await history(store);
  assert.equal(ok(await kvs(['branch', 'fork', ...flags, '--branch-id', 'x'])), `${c3}\n`);
  assert.equal(ok(await kvs(['branch', 'fork', ...flags, '--branch-id', 'x'])), `${c3}\n`);
  failed(await kvs(['branch', 'fork', ...flags, '--branch-id', 'x', '--checkpoint', c1!]), /branch x is already registered at checkpoint\/0000000002\/.*unfork it first/);
  failed(await kvs(['branch', 'fork', ...flags, '--branch-id', 'y', '--checkpoint', 'checkpoint/0000000009/00000000000000000001/manifest.json']), /does not exist/);
  failed(await kvs(['branch', 'fork', ...flags, '--branch-id', 'y', '--checkpoint', 'wal/x']), /--checkpoint must be a checkpoint key/);
  failed(await kvs(['branch', 'fork', ...flags, '--branch-id', '../evil']), /--branch-id must be/);
  failed(await kvs(['branch', 'fork', ...flags]), /--branch-id must be/);
  failed(await kvs(['branch', 'unfork', ...flags, '--branch-id', 'nope']), /branch nope is not registered/);
  failed(await kvs(['gc', ...flags, '--keep', '0']), /--keep must be a whole number of at least 1/);
  failed(await kvs(['gc', ...flags, '--keep', 'two']), /--keep must be a whole number of at least 1 .*got "two"/);
  failed(await kvs(['status', '--s3-endpoint', endpoint]), /--s3-bucket is required/);
  store.close();
});

test('the commands on an encrypted prefix need its key, and say so', async (t) => {
  const key = randomBytes(32);
  const { store, flags } = await freshPrefix(key);
  await history(store);
  const keyFile = path.join(await tempDir(t, 'kvs-key-'), 'key');
  await writeFile(keyFile, key.toString('hex'));
  failed(await kvs(['status', ...flags]), /manifest\/latest .* is encrypted: pass the prefix's key with --object-store-encryption-key-file/);
  failed(await kvs(['status', ...flags, '--object-store-encryption-key-env', 'K'], { K: randomBytes(32).toString('base64') }), /cannot decrypt .*wrong encryption key/);
  assert.match(ok(await kvs(['status', ...flags, '--object-store-encryption-key-file', keyFile])), /^revision: 30$/m);
  assert.match(ok(await kvs(['status', ...flags], { KVS_OBJECT_STORE_ENCRYPTION_KEY_FILE: keyFile })), /^revision: 30$/m);
  assert.equal(
    ok(await kvs(['gc', ...flags, '--keep', '2', '--object-store-encryption-key-file', keyFile])),
    'deleted checkpoints: 1\ndeleted orphan SSTs: 1\ndeleted WAL segments: 3\n',
  );
  store.close();
});

test('status and gc on S3 (Ceph RGW), past 1000 WAL segments', async (t) => {
  const s3 = await startS3Server(t);
  const bucket = await s3.createBucket();
  const store = await openObjectStore(s3.storeOptions(bucket, 'prod/'));
  const flags = s3.kvsArgs(bucket, 'prod/');
  await history(store);
  const extra = Array.from({ length: 1100 }, (_, i) => walKey(BigInt(41 + i), BigInt(41 + i)));
  const queue = [...extra];
  await Promise.all(Array.from({ length: 16 }, async () => {
    for (let k = queue.shift(); k; k = queue.shift()) await store.put(k, Buffer.from('w'));
  }));
  const c = await writeCheckpoint(store, 2, 2000, ['d', 'e']);
  await writeLatest(store, c, 2, 1140);
  assert.match(ok(await kvs(['status', ...flags], s3.env)), /^checkpoints: 4\nWAL segments: 1104$/m);
  assert.equal(ok(await kvs(['gc', ...flags, '--keep', '2'], s3.env)), 'deleted checkpoints: 2\ndeleted orphan SSTs: 2\ndeleted WAL segments: 1104\n');
  assert.match(ok(await kvs(['status', ...flags], s3.env)), /^checkpoints: 2\nWAL segments: 0\n/m);
  store.close();
});
