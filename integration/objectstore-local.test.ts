// The object-store contract against the local directory store, plus what only it has:
// its on-disk layout keeps every key inside the bucket directory.
import assert from 'node:assert/strict';
import { readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { openObjectStore } from '../shared/objectstore/index.js';
import { objectStoreContract } from './objectstore-contract.js';
import { fileScope, tempDir } from './harness.js';

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
  assert.equal(await store.get('wal/1'), undefined);
  store.close();
});
