import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { open } from 'lmdb';
import { dbPath, NotCreatedError, openMvcc, META, SCHEMA_VERSION, SchemaVersionError } from './schema.js';
import { HISTORY_DICTIONARY } from './dictionary.js';
import { decodeKeyValue, encodeKeyValue } from './keyvalue.js';
import { revKey } from './revision.js';
import { rawTables } from './tables.js';

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
        assert.match(err.message, new RegExp(`the database in ${dbPath(dir).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} uses storage layout version 1, and this kvs reads only versions 2 and ${SCHEMA_VERSION} \\(it was written by an older kvs\\)`));
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
  assert.throws(() => openMvcc(dir, { readOnly: false }), new RegExp(`uses storage layout version ${SCHEMA_VERSION + 1}, and this kvs reads only versions 2 and ${SCHEMA_VERSION} \\(it was written by a newer kvs\\)`));
});

/** A ConfigMap as Kubernetes stores one, as a KeyValue record at revision `rev`. */
function configMapRecord(rev: number): { key: Buffer; record: Buffer } {
  const key = Buffer.from(`/registry/configmaps/default/cm-${rev}`);
  const value = Buffer.from(JSON.stringify({
    kind: 'ConfigMap', apiVersion: 'v1',
    metadata: { name: `cm-${rev}`, namespace: 'default', uid: randomUUID(), resourceVersion: String(rev), creationTimestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, rev)).toISOString(), labels: { app: 'web' } },
    data: { mode: 'on' },
  }));
  return { key, record: encodeKeyValue({ key, createRevision: rev, modRevision: rev, version: 1, value, lease: 0n }) };
}

/** The bytes LMDB holds for history[revKey(rev)], read without decompression. */
async function rawRecord(dataDir: string, rev: number): Promise<Buffer> {
  const env = open<Buffer, Buffer>({ path: dbPath(dataDir), maxDbs: 16, readOnly: true, encoding: 'binary', keyEncoding: 'binary' });
  const raw = Buffer.from(env.openDB<Buffer, Buffer>({ name: 'history', encoding: 'binary', keyEncoding: 'binary' }).getBinary(revKey(rev, 0))!);
  await env.close();
  return raw;
}

test('history records are stored compressed against the database\'s dictionary and read back as written', async (t) => {
  const dir = tempDir(t);
  const db = openMvcc(dir, { readOnly: false, writemap: true });
  assert.deepEqual(Buffer.from(db.meta.get(META.historyDictionary)), HISTORY_DICTIONARY);
  const written = [2, 3, 4].map((rev) => configMapRecord(rev));
  await db.env.transaction(() => written.forEach(({ record }, i) => db.history.put(revKey(2 + i, 0), record)));
  await db.env.close();

  const raw = await rawRecord(dir, 3);
  assert.ok(raw.length * 2 < written[1]!.record.length, `stored ${raw.length} bytes for a ${written[1]!.record.length}-byte record`);
  const reader = openMvcc(dir, { readOnly: true });
  t.after(() => reader.env.close());
  // getBinaryFast, as the range path reads: a view of lmdb-js's buffer, its length set per read.
  const fast = reader.history.getBinaryFast(revKey(3, 0))!;
  assert.deepEqual(Buffer.from(new Uint8Array(fast.buffer, fast.byteOffset, fast.length)), written[1]!.record);
  assert.deepEqual([...reader.history.getRange({})].map(({ value }) => Buffer.from(value)), written.map((w) => w.record));
  assert.deepEqual(decodeKeyValue(reader.history.getBinary(revKey(4, 0))!).key, written[2]!.key);
  const history = rawTables(reader).find((r) => r.name === 'history')!;
  assert.deepEqual([...history.table.getRange({})].map(({ value }) => Buffer.from(value)), written.map((w) => w.record), 'Hash reads the records, not their compressed bytes');
});

test('a layout 2 database is upgraded by its writer: its records stay readable beside compressed ones, and a kvs before compression would refuse it', async (t) => {
  const dir = tempDir(t);
  // As layout 2 wrote it: version 2, no dictionary, records as they are.
  const old = openMvcc(dir, { readOnly: false });
  await old.env.close();
  const env = open<Buffer, Buffer>({ path: dbPath(dir), maxDbs: 16, encoding: 'binary', keyEncoding: 'binary' });
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  const first = configMapRecord(2);
  await env.transaction(() => {
    env.openDB<Buffer, Buffer>({ name: 'history', encoding: 'binary', keyEncoding: 'binary' }).put(revKey(2, 0), first.record);
    meta.put(META.schemaVersion, 2);
    meta.remove(META.historyDictionary);
  });
  await env.close();

  // A reader before the writer (never in a node: storage opens first) sees layout 2 as it is;
  // it reads with the dictionary the upgrade writes (schema.ts).
  const early = openMvcc(dir, { readOnly: true });
  assert.equal(early.meta.get(META.schemaVersion), 2);
  assert.deepEqual(Buffer.from(early.history.getBinary(revKey(2, 0))!), first.record);
  await early.env.close();

  const db = openMvcc(dir, { readOnly: false, writemap: true });
  assert.equal(db.meta.get(META.schemaVersion), SCHEMA_VERSION);
  const second = configMapRecord(3);
  await db.env.transaction(() => db.history.put(revKey(3, 0), second.record));
  await db.env.close();
  assert.deepEqual(await rawRecord(dir, 2), first.record, 'the old record is left as it was');
  assert.ok((await rawRecord(dir, 3)).length < second.record.length, 'the new one is compressed');
  const reader = openMvcc(dir, { readOnly: true });
  t.after(() => reader.env.close());
  assert.deepEqual([...reader.history.getRange({})].map(({ value }) => Buffer.from(value)), [first.record, second.record]);
  assert.equal((await contents(dir)).meta[META.schemaVersion], SCHEMA_VERSION, 'a kvs reading only layout 2 refuses version 3');
});

test('a reader opening a database its writer has not created yet is told so, and opens it once its layout version is written', async (t) => {
  const dataDir = tempDir(t);
  fs.mkdirSync(dbPath(dataDir), { recursive: true });
  // The writer has created the file, then its meta table, then the version in it: a reader
  // may come at any of these points.
  const env = open<Buffer, Buffer>({ path: dbPath(dataDir), maxDbs: 16, encoding: 'binary', keyEncoding: 'binary' });
  const notCreated = () =>
    assert.throws(() => openMvcc(dataDir, { readOnly: true }), (err: Error) => err instanceof NotCreatedError && err.message.includes(`the database in ${dbPath(dataDir)} is not created yet`));
  notCreated();
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  notCreated();
  await meta.put(META.schemaVersion, SCHEMA_VERSION);
  const early = openMvcc(dataDir, { readOnly: true });
  assert.equal(early.meta.get(META.schemaVersion), SCHEMA_VERSION);
  await early.env.close();
  await env.close();
  // A writer opens it as it is.
  const writer = openMvcc(dataDir, { readOnly: false });
  assert.equal(writer.meta.get(META.schemaVersion), SCHEMA_VERSION);
  await writer.env.close();
});
