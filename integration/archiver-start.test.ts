// The archiver beside a database that storage has not finished creating (a node's first
// start): it opens the database read-only for a checkpoint only once storage has connected its
// upload stream, which storage does after it opened the database. In a CI run before this,
// the archiver's first checkpoint (1 s after it was ready) opened the half-created database
// beside its writer: the checkpoint failed, and storage exited by SIGSEGV.
// The archiver runs here as `kvs component archiver`, as the supervisor starts it; the test
// plays storage's part with storage's own code.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { open } from 'lmdb';
import { socketPath } from '../shared/config.js';
import { createLogger } from '../shared/log.js';
import { dbPath, openMvcc } from '../shared/mvcc/schema.js';
import { openObjectStore } from '../shared/objectstore/index.js';
import { ArchiverLink } from '../services/storage/archiver-link.js';
import { KVS_BIN, localObjectStore, objectStoreArgs, pollUntil, startProcess, tempDir } from '../testkit/harness.js';

test('the archiver checkpoints a new database only once storage has opened it', { timeout: 60_000 }, async (t) => {
  const dataDir = await tempDir(t, 'kvs-archiver-start-');
  const spec = await localObjectStore(t);
  // A database whose writer has created the file and nothing else yet.
  fs.mkdirSync(dbPath(dataDir), { recursive: true });
  const half = open({ path: dbPath(dataDir), maxDbs: 16 });
  await half.close();

  const archiver = await startProcess(t, process.execPath, [KVS_BIN, 'component', 'archiver', '--data-dir', dataDir, ...objectStoreArgs(spec), '--log-level', 'debug']);
  await pollUntil('the archiver ready', async () => (archiver.output().includes('"archiver ready"') ? true : undefined), 30_000);
  const store = await openObjectStore({ endpoint: spec.endpoint, bucket: spec.bucket, prefix: spec.prefix });
  t.after(() => store.close());
  // Its first checkpoint is tried 1 s after it is ready, then every second: two and a half
  // seconds is two tries, neither of which may open the database yet. (A wait for nothing to
  // happen: there is no event to await.)
  await delay(2_500);
  assert.doesNotMatch(archiver.output(), /checkpoint failed/);
  assert.equal(await store.get('manifest/latest'), undefined, 'no checkpoint before storage opened the database');
  assert.equal(await Promise.race([archiver.exited.then(() => 'exited'), delay(0, 'running')]), 'running', 'the archiver is still up');

  // Storage's part: it opens (creates) the database, then connects its upload stream.
  const db = openMvcc(dataDir, { readOnly: false, writemap: true });
  t.after(() => db.env.close());
  const link = new ArchiverLink(socketPath(dataDir, 'archiver'), createLogger('storage', 'silent'));
  t.after(() => link.close());
  await link.ready();
  const latest = await pollUntil('the first checkpoint', () => store.get('manifest/latest'), 30_000);
  assert.ok(latest.body.length > 0);
  assert.doesNotMatch(archiver.output(), /checkpoint failed/);
});
