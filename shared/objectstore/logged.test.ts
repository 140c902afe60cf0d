import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { openObjectStore, PreconditionFailedError } from './index.js';

function capture(level: string) {
  const lines: Record<string, unknown>[] = [];
  const out = new Writable({ write: (chunk, _enc, cb) => (lines.push(JSON.parse(String(chunk))), cb()) });
  return { log: pino({ level }, out), lines };
}

async function localStore(t: TestContext, level: string) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-logged-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  const { log, lines } = capture(level);
  const store = await openObjectStore({ endpoint: `file://${root}`, bucket: 'b', prefix: 'p/', log });
  t.after(() => store.close());
  const ops = () => lines.filter((l) => l.msg === 'object store operation').map(({ op, key, bytes, size, objects, outcome, partial }) => ({ op, key, bytes, size, objects, outcome, partial }));
  return { store, lines, ops };
}

test('debug: each object-store operation is one line with operation, key, bytes, duration and outcome', async (t) => {
  const { store, lines, ops } = await localStore(t, 'debug');
  await store.put('wal/1', Buffer.from('hello'), { ifNoneMatch: '*' });
  await assert.rejects(store.put('wal/1', Buffer.from('again'), { ifNoneMatch: '*' }), PreconditionFailedError);
  assert.equal((await store.get('wal/1'))?.body.toString(), 'hello');
  assert.equal(await store.get('wal/2'), undefined);
  await store.head('wal/1');
  await store.put('wal/2', Buffer.from('x'));
  for await (const _ of store.list('wal/')) break;
  let listed = 0;
  for await (const _ of store.list('wal/')) listed++;
  assert.equal(listed, 2);
  await store.deleteMany(['wal/1', 'wal/2']);
  const u = undefined;
  assert.deepEqual(ops(), [
    { op: 'put', key: 'wal/1', bytes: 5, size: u, objects: u, outcome: 'ok', partial: u },
    { op: 'put', key: 'wal/1', bytes: 5, size: u, objects: u, outcome: 'precondition-failed', partial: u },
    { op: 'get', key: 'wal/1', bytes: 5, size: u, objects: u, outcome: 'ok', partial: u },
    { op: 'get', key: 'wal/2', bytes: u, size: u, objects: u, outcome: 'absent', partial: u },
    { op: 'head', key: 'wal/1', bytes: u, size: 5, objects: u, outcome: 'ok', partial: u },
    { op: 'put', key: 'wal/2', bytes: 1, size: u, objects: u, outcome: 'ok', partial: u },
    { op: 'list', key: 'wal/', bytes: u, size: u, objects: 1, outcome: 'ok', partial: true },
    { op: 'list', key: 'wal/', bytes: u, size: u, objects: 2, outcome: 'ok', partial: u },
    { op: 'deleteMany', key: 'wal/1', bytes: u, size: u, objects: 2, outcome: 'ok', partial: u },
  ]);
  for (const l of lines) assert.equal(typeof l.durationMs, 'number');
  assert.equal(lines[0]!.ifNoneMatch, '*');
});

test('info: the store is not wrapped, nothing is logged', async (t) => {
  const { store, lines } = await localStore(t, 'info');
  await store.put('k', Buffer.from('v'));
  await store.get('k');
  assert.deepEqual(lines, []);
});
