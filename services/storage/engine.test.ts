import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openMvcc, META } from '../../shared/mvcc/schema.js';
import { decodeKeyValue } from '../../shared/mvcc/keyvalue.js';
import { createLogger } from '../../shared/log.js';
import { encode, decode, num } from '../../shared/proto/index.js';
import { Engine, Op, type WriteResult } from './engine.js';

const log = createLogger('test', 'silent');

function tempDir(t: { after(fn: () => unknown): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-engine-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function submit(engine: Engine, op: number, type: string, req: object): Promise<WriteResult> {
  return new Promise((resolve) => engine.submit(op, encode(type, req), resolve));
}

const put = (engine: Engine, key: string, value: string) =>
  submit(engine, Op.PUT, 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from(value) });

test('concurrent writes share one batch, get distinct revisions, and are rebuilt from the WAL alone', async (t) => {
  const dir = tempDir(t);
  let engine = Engine.open(openMvcc(dir, { readOnly: false }), dir, log);
  const results = await Promise.all(Array.from({ length: 50 }, (_, i) => put(engine, `k${i % 10}`, `v${i}`)));
  const revs = results.map((r) => num(decode<any>('etcdserverpb.PutResponse', r.body!).header.revision));
  assert.deepEqual(revs, Array.from({ length: 50 }, (_, i) => i + 2), 'one revision per put, in submission order');
  assert.equal(engine.wal.lastIndex, 50n);
  const del = await submit(engine, Op.DELETE_RANGE, 'etcdserverpb.DeleteRangeRequest', { key: Buffer.from('k0') });
  assert.equal(del.code, 0);
  await engine.close();

  // Lose the database, keep the WAL: replay must rebuild the same state.
  fs.rmSync(path.join(dir, 'db'), { recursive: true });
  const db = openMvcc(dir, { readOnly: false });
  engine = Engine.open(db, dir, log);
  t.after(() => engine.close());
  assert.equal(engine.executor.revision, 52);
  assert.equal(db.meta.get(META.appliedIndex), 51);
  assert.equal(db.kv.get(Buffer.from('k0')), undefined);
  const k3 = decodeKeyValue(db.kv.get(Buffer.from('k3'))!);
  assert.equal(Buffer.from(k3.value).toString(), 'v43');
  assert.equal(k3.version, 5);
  assert.equal(k3.createRevision, 5);
  // And it keeps going from there.
  const next = await put(engine, 'after', 'x');
  assert.equal(num(decode<any>('etcdserverpb.PutResponse', next.body!).header.revision), 53);
  assert.equal(engine.wal.lastIndex, 52n);
});

test('an undecodable request fails alone; the other writes of its batch succeed', async (t) => {
  const dir = tempDir(t);
  const engine = Engine.open(openMvcc(dir, { readOnly: false }), dir, log);
  t.after(() => engine.close());
  const good = put(engine, 'a', '1');
  const bad = new Promise<WriteResult>((resolve) => engine.submit(Op.PUT, Buffer.from([0x0a, 0xff, 0xff]), resolve));
  const good2 = put(engine, 'b', '2');
  const [r1, r2, r3] = await Promise.all([good, bad, good2]);
  assert.equal(r1.code, 0);
  assert.equal(r2.code, 13); // INTERNAL, as etcd's unmarshalling error
  assert.match(r2.message, /error unmarshalling request/);
  assert.equal(r3.code, 0);
  assert.equal(engine.executor.revision, 3);
});
