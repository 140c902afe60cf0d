// The object-store contract against the local directory store, plus what only it has:
// its on-disk layout keeps every key inside the bucket directory.
import assert from 'node:assert/strict';
import fsSync, { readdirSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test, type Mock } from 'node:test';
import { pathToFileURL } from 'node:url';
import { openObjectStore } from '../shared/objectstore/index.js';
import { LocalObjectStore } from '../shared/objectstore/local.js';
import { PreconditionFailedError } from '../shared/objectstore/store.js';
import { objectStoreContract } from './objectstore-contract.js';
import { fileScope, tempDir } from '../testkit/harness.js';
import { failed, keys, kvs } from './objectstore-fixtures.js';

const root = await tempDir(fileScope, 'kvs-objects-');
const endpoint = pathToFileURL(root).href;

objectStoreContract('local store', () => ({ options: (prefix) => ({ endpoint, bucket: 'bucket', prefix }) }));

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(path.join(e.parentPath, e.name));
  }
  return out;
}

test('local store: keys cannot leave the bucket directory', async (t) => {
  const root = await tempDir(t, 'kvs-objects-');
  const store = await openObjectStore({ endpoint: pathToFileURL(root).href, bucket: 'escape', prefix: '../p/' });
  const evil = ['../../outside', '..', '.', '/abs', 'a/../../b', '..\\x', 'x/./y', '.tmp-1-2'];
  for (const k of evil) await store.put(k, Buffer.from(k));
  for (const k of evil) assert.equal((await store.get(k))?.body.toString(), k);
  const files = await filesUnder(root);
  const bucketDir = path.join(root, 'escape');
  assert.equal(files.length, evil.length);
  for (const f of files) assert.ok(f.startsWith(bucketDir + path.sep), `${f} is outside ${bucketDir}`);
  const listed: string[] = [];
  for await (const o of store.list('')) listed.push(o.key);
  assert.deepEqual(listed.sort(), [...evil].sort());
  await store.deleteMany(evil);
  assert.deepEqual(await readdir(bucketDir), [], 'deletes leave no empty directories behind');
  store.close();
});

test('local store: the bucket name must be one directory name', async () => {
  await assert.rejects(openObjectStore({ endpoint, bucket: '../x', prefix: '' }), /invalid bucket name/);
  await assert.rejects(openObjectStore({ endpoint, bucket: '..', prefix: '' }), /invalid bucket name/);
});

test('local store: keeps no versions', async () => {
  const store = await openObjectStore({ endpoint, bucket: 'versions', prefix: 'p/' });
  await store.put('k', Buffer.from('1'));
  await store.put('k', Buffer.from('2'));
  const versions = [];
  for await (const v of store.listVersions('')) versions.push(v);
  assert.deepEqual(versions, []);
  assert.equal(await store.get('k', { versionId: 'anything' }), undefined);
  store.close();
});

test('local store: a prefix without a trailing slash names the same prefix', async () => {
  const a = await openObjectStore({ endpoint, bucket: 'norm', prefix: 'kvs' });
  const b = await openObjectStore({ endpoint, bucket: 'norm', prefix: 'kvs/' });
  await a.put('manifest/latest', Buffer.from('x'));
  assert.equal((await b.get('manifest/latest'))?.body.toString(), 'x');
  a.close();
  b.close();
});

test('local store: file-system errors name the store, the operation and the key', async (t) => {
  const dir = await tempDir(t, 'kvs-objects-');
  await writeFile(path.join(dir, 'b'), 'a file where the bucket directory should be');
  const store = await openObjectStore({ endpoint: pathToFileURL(dir).href, bucket: 'b', prefix: 'p/' });
  await assert.rejects(store.put('wal/1', Buffer.from('x')), new RegExp(`^Error: object store file://${dir}/b/p/: put wal/1 failed: ENOTDIR`));
  store.close();
});

test('local store: a damaged directory is an error for every read, never "no such object"', async (t) => {
  const dir = await tempDir(t, 'kvs-objects-');
  const endpoint = pathToFileURL(dir).href;
  const damage = /the local object store is damaged: .* is a file .*restore the directory from a backup/;
  // The bucket directory is a file.
  await writeFile(path.join(dir, 'b'), 'a file where the bucket directory should be');
  const store = await openObjectStore({ endpoint, bucket: 'b', prefix: 'p/' });
  await assert.rejects(store.get('manifest/latest'), new RegExp(`object store file://${dir}/b/p/: get manifest/latest failed: ` + damage.source));
  await assert.rejects(store.head('manifest/latest'), damage);
  await assert.rejects(store.delete('wal/1'), damage);
  await assert.rejects(keys(store, 'wal/'), damage);
  store.close();

  // A directory further down (the prefix's) is a file; and an object's path is a directory.
  await mkdir(path.join(dir, 'c'));
  await writeFile(path.join(dir, 'c', 'p~'), 'not a directory');
  const deeper = await openObjectStore({ endpoint, bucket: 'c', prefix: 'p/' });
  await assert.rejects(deeper.get('manifest/latest'), damage);
  await assert.rejects(keys(deeper, ''), damage);
  await mkdir(path.join(dir, 'd', 'p~', 'manifest~', 'latest'), { recursive: true });
  const dirObject = await openObjectStore({ endpoint, bucket: 'd', prefix: 'p/' });
  await assert.rejects(dirObject.get('manifest/latest'), /damaged: .*latest is not a regular file/);
  await assert.rejects(dirObject.head('manifest/latest'), /damaged: .*latest is not a regular file/);
  await assert.rejects(keys(dirObject, 'manifest/'), /damaged: .*latest is not a regular file/);
  deeper.close();
  dirObject.close();

  // A fresh data directory restored against it gets an error, not an empty node.
  const dataDir = await tempDir(t, 'kvs-node-');
  const r = await kvs(['restore', '--data-dir', dataDir, '--s3-endpoint', endpoint, '--s3-bucket', 'b', '--s3-prefix', 'p/']);
  failed(r, damage);
  assert.deepEqual(await readdir(dataDir), [], 'nothing restored');
  failed(await kvs(['status', '--s3-endpoint', endpoint, '--s3-bucket', 'c', '--s3-prefix', 'p/']), damage);
});

test('local store: a put holds the caller\'s event loop only with syncSmallPuts (the archiver), and only up to 256 KiB', async (t) => {
  const blocking = ['mkdirSync', 'openSync', 'writeSync', 'fsyncSync', 'fstatSync', 'statSync', 'renameSync', 'rmSync', 'closeSync'] as const;
  const calls = () => Object.fromEntries(blocking.map((m) => [m, (fsSync[m] as unknown as Mock<() => void>).mock.callCount()]));
  const none = Object.fromEntries(blocking.map((m) => [m, 0]));
  const counting = async (fn: () => Promise<unknown>) => {
    for (const m of blocking) t.mock.method(fsSync, m);
    try {
      await fn();
      return calls();
    } finally {
      t.mock.restoreAll();
    }
  };
  const mk = (bucket: string, syncSmallPuts: boolean) => new LocalObjectStore({ root, bucket, prefix: 'p/', syncSmallPuts });
  // The peer agent's store: no step of a put blocks, so its loop stays free for heartbeats and
  // ACKs while the disk is slow. The leader lock's puts are conditional.
  const plain = mk('async', false);
  assert.deepEqual(await counting(() => plain.put('leader/lock', Buffer.from('{"term":1}'), { ifNoneMatch: '*' })), none);
  const { etag } = (await plain.head('leader/lock'))!;
  assert.deepEqual(await counting(() => plain.put('leader/lock', Buffer.from('{"term":2}'), { ifMatch: etag })), none);
  await assert.rejects(counting(() => plain.put('leader/lock', Buffer.from('{"term":3}'), { ifMatch: etag })), PreconditionFailedError);
  // The archiver's: a small put writes, fsyncs and renames synchronously ...
  const sync = mk('sync', true);
  const small = await counting(() => sync.put('wal/1', Buffer.from('record')));
  assert.ok(small.fsyncSync! >= 2 && small.renameSync === 1, JSON.stringify(small));
  // ... a large one (a checkpoint's piece) does not.
  assert.deepEqual(await counting(() => sync.put('ckpt/1', Buffer.alloc(256 * 1024 + 1, 1))), none);
  for (const [store, key, body] of [[plain, 'leader/lock', '{"term":2}'], [sync, 'wal/1', 'record']] as const) {
    assert.equal((await store.get(key))?.body.toString(), body, key);
  }
  assert.equal((await sync.get('ckpt/1'))?.body.length, 256 * 1024 + 1);
  // No temporary file is left behind, the refused put's included.
  const leftovers = (dir: string) => readdirSync(dir, { recursive: true }).map(String).filter((f) => path.basename(f).startsWith('.tmp-'));
  assert.deepEqual([...leftovers(path.join(root, 'async')), ...leftovers(path.join(root, 'sync'))], []);
});
