// Client-side encryption of object bodies, on the local directory store: what lands on disk is
// not the plaintext, a wrong key fails clearly, and plaintext and encrypted objects are never
// mixed silently (in either direction).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { loadEncryptionKey, parseEncryptionKey } from '../shared/objectstore/encryption.js';
import { openObjectStore, objectStoreOptions } from '../shared/objectstore/index.js';
import { objectStoreContract } from './objectstore-contract.js';
import { fileScope, tempDir } from '../testkit/harness.js';

const root = await tempDir(fileScope, 'kvs-objects-enc-');
const endpoint = pathToFileURL(root).href;
const key = randomBytes(32);

objectStoreContract('encrypted local store', () => ({ options: (prefix) => ({ endpoint, bucket: 'enc', prefix, encryptionKey: key }) }));

test('encryption: the stored body is not the plaintext, and reads back as the plaintext', async () => {
  const store = await openObjectStore({ endpoint, bucket: 'b', prefix: 'secret/', encryptionKey: key });
  const plain = Buffer.from('the quick brown fox jumps over the lazy dog '.repeat(50));
  await store.put('wal/1.wal', plain);
  const onDisk = await readFile(path.join(root, 'b', 'secret~', 'wal~', '1.wal'));
  assert.ok(!onDisk.includes(Buffer.from('quick brown fox')), 'the plaintext is visible on disk');
  assert.equal(onDisk.subarray(0, 8).toString('latin1'), '\x89KVS-ENC');
  assert.equal(onDisk.length, plain.length + 8 + 1 + 12 + 16);
  assert.equal((await store.head('wal/1.wal'))!.size, plain.length, 'sizes are those of the plaintext');
  assert.ok((await store.get('wal/1.wal'))!.body.equals(plain));
  store.close();
});

test('encryption: a wrong key fails with a clear error, never garbage', async () => {
  const right = await openObjectStore({ endpoint, bucket: 'b', prefix: 'wrongkey/', encryptionKey: key });
  await right.put('manifest/latest', Buffer.from('{"revision":5}'));
  const wrong = await openObjectStore({ endpoint, bucket: 'b', prefix: 'wrongkey/', encryptionKey: randomBytes(32) });
  await assert.rejects(wrong.get('manifest/latest'), /cannot decrypt object manifest\/latest .*wrong encryption key/);
  right.close();
  wrong.close();
});

test('encryption: a body moved to another key does not decrypt there', async (t) => {
  const dir = await tempDir(t, 'kvs-objects-move-');
  const store = await openObjectStore({ endpoint: pathToFileURL(dir).href, bucket: 'b', prefix: '', encryptionKey: key });
  await store.put('a', Buffer.from('for a'));
  await writeFile(path.join(dir, 'b', 'x'), await readFile(path.join(dir, 'b', 'a')));
  await assert.rejects(store.get('x'), /cannot decrypt object x/);
  store.close();
});

test('encryption: plaintext and encrypted objects are not mixed, in either direction', async () => {
  const plain = await openObjectStore({ endpoint, bucket: 'b', prefix: 'mixed/' });
  const enc = await openObjectStore({ endpoint, bucket: 'b', prefix: 'mixed/', encryptionKey: key });
  await plain.put('plain-object', Buffer.from('hello'));
  await enc.put('encrypted-object', Buffer.from('hello'));
  await assert.rejects(enc.get('plain-object'), /is not encrypted, but an encryption key was given.*Run without --object-store-encryption-key-file/s);
  await assert.rejects(plain.get('encrypted-object'), /is encrypted: pass the prefix's key with --object-store-encryption-key-file or --object-store-encryption-key-env/);
  plain.close();
  enc.close();
});

test('encryption keys: raw 32 bytes, 64 hex characters or base64, from a file or the environment', async (t) => {
  const dir = await tempDir(t, 'kvs-keys-');
  const k = randomBytes(32);
  const raw = path.join(dir, 'raw');
  const hex = path.join(dir, 'hex');
  const b64 = path.join(dir, 'b64');
  await writeFile(raw, k);
  await writeFile(hex, k.toString('hex') + '\n');
  await writeFile(b64, k.toString('base64') + '\n');
  for (const f of [raw, hex, b64]) assert.ok(loadEncryptionKey({ keyFile: f })!.equals(k), f);
  assert.ok(loadEncryptionKey({ keyEnv: 'K' }, { K: k.toString('hex') })!.equals(k));
  assert.ok(loadEncryptionKey({ keyEnv: 'K' }, { K: k.toString('base64') })!.equals(k));
  assert.equal(loadEncryptionKey({}), undefined);

  const short = path.join(dir, 'short');
  await writeFile(short, randomBytes(20).toString('hex') + '\n');
  assert.throws(() => loadEncryptionKey({ keyFile: short }), /from file .*short is not a 32-byte AES-256 key: expected raw 32 bytes, 64 hex characters or base64 of 32 bytes, got 41 bytes/);
  assert.throws(() => parseEncryptionKey(randomBytes(31), 'x'), /not a 32-byte AES-256 key.*got 31 bytes/);
  assert.throws(() => parseEncryptionKey(Buffer.from(randomBytes(16).toString('base64')), 'x'), /not a 32-byte/);
  assert.throws(() => loadEncryptionKey({ keyEnv: 'MISSING' }, {}), /MISSING, but that environment variable is not set/);
  assert.throws(() => loadEncryptionKey({ keyFile: path.join(dir, 'nope') }), /cannot read --object-store-encryption-key-file/);
  assert.throws(() => loadEncryptionKey({ keyFile: raw, keyEnv: 'K' }), /only one of/);

  const opts = objectStoreOptions({ s3Bucket: 'b', s3Prefix: 'p/', s3Endpoint: endpoint, objectStoreEncryptionKeyFile: hex });
  assert.ok(opts.encryptionKey!.equals(k));
  assert.throws(() => objectStoreOptions({ s3Prefix: '' }), /--s3-bucket is required/);
});
