import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { open } from 'lmdb';
import { dbPath, openMvcc, META, SCHEMA_VERSION, SchemaVersionError } from './schema.js';

function tempDir(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-schema-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A database as kvs wrote it before schema versions: a `kv` table, meta without a version. */
async function writeVersion1(dataDir: string): Promise<void> {
  fs.mkdirSync(dbPath(dataDir), { recursive: true });
  const env = open<Buffer, Buffer>({ path: dbPath(dataDir), maxDbs: 16, encoding: 'binary', keyEncoding: 'binary' });
  const binary = { encoding: 'binary', keyEncoding: 'binary' } as const;
  const kv = env.openDB<Buffer, Buffer>({ name: 'kv', ...binary });
  env.openDB<Buffer, Buffer>({ name: 'history', ...binary });
  env.openDB<Buffer, Buffer>({ name: 'keyrevs', dupSort: true, ...binary });
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  await env.transaction(() => {
    kv.put(Buffer.from('k'), Buffer.from('v'));
    meta.put(META.revision, 7);
  });
  await env.close();
}

/** The named tables and the meta entries of the database, read without kvs. */
async function contents(dataDir: string): Promise<{ tables: string[]; meta: Record<string, unknown> }> {
  const env = open<Buffer, Buffer>({ path: dbPath(dataDir), maxDbs: 16, readOnly: true, encoding: 'binary', keyEncoding: 'binary' });
  const tables = [...env.getKeys()].map((k) => Buffer.from(k as Uint8Array).toString('utf8').replace(/\0$/, '')).sort();
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  const entries = Object.fromEntries([...meta.getRange({})].map(({ key, value }) => [key, value]));
  await env.close();
  return { tables, meta: entries };
}

test('a new database records the schema version, and opens again', async (t) => {
  const dir = tempDir(t);
  const db = openMvcc(dir, { readOnly: false });
  assert.equal(db.meta.get(META.schemaVersion), SCHEMA_VERSION);
  await db.env.close();
  const again = openMvcc(dir, { readOnly: false });
  const reader = openMvcc(dir, { readOnly: true });
  assert.equal(reader.meta.get(META.schemaVersion), SCHEMA_VERSION);
  await reader.env.close();
  await again.env.close();
});

test('a database of the layout before schema versions is refused, read-write (as storage opens it) and read-only, its data unchanged', async (t) => {
  const dir = tempDir(t);
  await writeVersion1(dir);
  const before = await contents(dir);
  for (const readOnly of [false, true]) {
    assert.throws(
      () => openMvcc(dir, { readOnly, writemap: !readOnly }),
      (err: unknown) => {
        assert.ok(err instanceof SchemaVersionError);
        assert.equal(err.found, 1);
        assert.match(err.message, new RegExp(`the database in ${dbPath(dir).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} uses storage layout version 1, and this kvs reads only version ${SCHEMA_VERSION} \\(it was written by an older kvs\\)`));
        assert.match(err.message, /restore a snapshot or object-store checkpoint taken with this version/);
        assert.match(err.message, /empty data directory/);
        return true;
      },
      `readOnly ${readOnly}`,
    );
  }
  assert.deepEqual(await contents(dir), before, 'no table created, no version written');
  assert.deepEqual(before.tables, ['history', 'keyrevs', 'kv', 'meta']);
});

test('a database of a newer layout is refused', async (t) => {
  const dir = tempDir(t);
  const db = openMvcc(dir, { readOnly: false });
  await db.env.transaction(() => db.meta.put(META.schemaVersion, SCHEMA_VERSION + 1));
  await db.env.close();
  assert.throws(() => openMvcc(dir, { readOnly: false }), new RegExp(`uses storage layout version ${SCHEMA_VERSION + 1}, and this kvs reads only version ${SCHEMA_VERSION} \\(it was written by a newer kvs\\)`));
});
