// A data directory of storage layout 2 (history records stored uncompressed, before layout 3's
// compression; shared/mvcc/schema.ts) under a kvs node of layout 3: the node upgrades it as it
// starts and serves everything it held, at every revision, with the same HashKV and the same
// watch history; new writes are stored compressed beside the old records.
//
// The layout 2 directory is made from one this kvs wrote: the node is stopped and every history
// record is written back uncompressed, with layout 2's meta (version 2, no dictionary), which is
// what a kvs of layout 2 left on disk.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { open } from 'lmdb';
import { dbPath, META, openMvcc, SCHEMA_VERSION } from '../shared/mvcc/schema.js';
import type { Etcd3 } from 'etcd3';
import { client, etcdctl, startKvs } from '../testkit/harness.js';

const binary = { encoding: 'binary', keyEncoding: 'binary' } as const;

function configMap(name: string, generation: number): string {
  return JSON.stringify({ kind: 'ConfigMap', apiVersion: 'v1', metadata: { name, namespace: 'default', uid: `uid-${name}`, resourceVersion: String(generation) }, data: { generation: String(generation) } });
}

/** Every history record, decompressed, and the layout version (the node must be stopped). */
async function readHistory(dataDir: string): Promise<{ records: [Buffer, Buffer][]; version: number }> {
  const db = openMvcc(dataDir, { readOnly: true });
  const records = [...db.history.getRange({})].map(({ key, value }) => [Buffer.from(key), Buffer.from(value)] as [Buffer, Buffer]);
  const version = db.meta.get(META.schemaVersion) as number;
  await db.env.close();
  return { records, version };
}

/** The stored bytes of every history record, as LMDB holds them. */
async function rawHistory(dataDir: string): Promise<Map<string, Buffer>> {
  const env = open<Buffer, Buffer>({ path: dbPath(dataDir), maxDbs: 16, readOnly: true, ...binary });
  const raw = new Map([...env.openDB<Buffer, Buffer>({ name: 'history', ...binary }).getRange({})].map(({ key, value }) => [Buffer.from(key).toString('hex'), Buffer.from(value)]));
  await env.close();
  return raw;
}

/** The first `n` events of a watch on /registry/ from revision 1 (history replayed), as text. */
async function replay(kv: Etcd3, n: number): Promise<string[]> {
  const watcher = await kv.watch().prefix('/registry/').startRevision('1').create();
  const seen: string[] = [];
  await new Promise<void>((resolve) => {
    watcher.on('data', (res) => {
      for (const e of res.events) seen.push(`${e.type} ${e.kv.key.toString()} @${e.kv.mod_revision} v${e.kv.version} ${e.kv.value.toString()}`);
      if (seen.length >= n) resolve();
    });
  });
  await watcher.cancel();
  return seen;
}

/** Endpoint HashKV's hash and compact revision (etcdctl). */
async function hashKv(endpoint: string): Promise<string> {
  const r = await etcdctl(endpoint, ['endpoint', 'hashkv', '-w', 'json']);
  assert.equal(r.exitCode, 0, r.stderr);
  const [{ HashKV }] = JSON.parse(r.stdout) as [{ HashKV: { hash: number; compact_revision: number } }];
  return `hash ${HashKV.hash} compact ${HashKV.compact_revision}`;
}

/** Rewrites the database as layout 2 left it: records uncompressed, version 2, no dictionary. */
async function makeLayout2(dataDir: string): Promise<void> {
  const { records } = await readHistory(dataDir);
  const env = open<Buffer, Buffer>({ path: dbPath(dataDir), maxDbs: 16, ...binary });
  const history = env.openDB<Buffer, Buffer>({ name: 'history', ...binary });
  const meta = env.openDB<any, string>({ name: 'meta', encoding: 'msgpack', keyEncoding: 'ordered-binary' });
  await env.transaction(() => {
    for (const [key, value] of records) history.put(key, value);
    meta.put(META.schemaVersion, 2);
    meta.remove(META.historyDictionary);
  });
  await env.close();
}

test('a layout 2 data directory is upgraded as the node starts, and serves all it held: values, past revisions, HashKV, watch history', async (t) => {
  const node = await startKvs(t);
  const kv = client(t, node.endpoint);
  for (let g = 1; g <= 3; g++) {
    for (const name of ['web', 'db', 'cache']) await kv.put(`/registry/configmaps/default/${name}`).value(configMap(name, g));
  }
  await kv.delete().key('/registry/configmaps/default/cache');
  const latest = await kv.getAll().prefix('/registry/').strings();
  const atRev4 = await kv.getAll().prefix('/registry/').revision(4).strings();
  const hash = await hashKv(node.endpoint);
  const events = await replay(kv, 10);
  assert.equal(Object.keys(latest).length, 2);
  assert.equal(events.length, 10);
  assert.match(events[9]!, /^Delete \/registry\/configmaps\/default\/cache @11 v0/);
  await node.stop();

  const written = await readHistory(node.dataDir);
  assert.equal(written.version, SCHEMA_VERSION);
  const compressed = await rawHistory(node.dataDir);
  assert.ok(written.records.some(([k, v]) => compressed.get(k.toString('hex'))!.length < v.length), 'this kvs stores records compressed');
  await makeLayout2(node.dataDir);
  const old = await rawHistory(node.dataDir);
  for (const [k, v] of written.records) assert.deepEqual(old.get(k.toString('hex')), v, 'layout 2: every record as it is');

  await node.restart();
  assert.deepEqual(await kv.getAll().prefix('/registry/').strings(), latest);
  assert.deepEqual(await kv.getAll().prefix('/registry/').revision(4).strings(), atRev4);
  assert.equal(await hashKv(node.endpoint), hash);
  assert.deepEqual(await replay(kv, 10), events);
  await kv.put('/registry/configmaps/default/new').value(configMap('new', 1));
  assert.equal(await kv.get('/registry/configmaps/default/new').string(), configMap('new', 1));
  await node.stop();

  const upgraded = await readHistory(node.dataDir);
  assert.equal(upgraded.version, SCHEMA_VERSION, 'the node wrote layout 3');
  const stored = await rawHistory(node.dataDir);
  for (const [k, v] of written.records) assert.deepEqual(stored.get(k.toString('hex')), v, 'the old records are left uncompressed');
  const [newKey, newRecord] = upgraded.records[upgraded.records.length - 1]!;
  assert.ok(stored.get(newKey.toString('hex'))!.length < newRecord.length, 'the new record is stored compressed');
});
