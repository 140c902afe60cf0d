// The engine's in-process links (an embedded node's gateway): a write answered with etcd's
// response or refused with etcd's error, and the feed with Storage.Feed's rules: where the store
// is first, each committed batch before its write's answer, none while quiet, and where the
// store is again when messages are asked for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openMvcc } from '../../shared/mvcc/schema.js';
import { createLogger } from '../../shared/log.js';
import { encode, decode, num } from '../../shared/proto/index.js';
import { EtcdError } from '../../shared/errors.js';
import { Op } from '../../shared/storage/ops.js';
import { openEngine } from './engine/open.js';
import { engineFeed, engineWriteLink } from './in-process.js';

const log = createLogger('test', 'silent');

interface Msg { revision: number; entries: Uint8Array[]; index: number }

test('in-process links: writes and their errors, and the feed in order, quiet and back', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-in-process-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log);
  t.after(() => engine.close());
  const link = engineWriteLink(engine);
  const feed = engineFeed(engine).open();
  const got: (Msg | string)[] = [];
  feed.on('data', (m: Msg) => got.push(m));
  const put = (k: string) => link.call(Op.PUT, encode('etcdserverpb.PutRequest', { key: Buffer.from(k), value: Buffer.from('v') }));

  const first = await new Promise<Msg>((resolve) => feed.once('data', resolve));
  assert.deepEqual([first.revision, first.entries.length], [engine.revision, 0], 'first: where the store is, no entries');
  const answer = put('a').then((body) => {
    got.push('answered');
    return body;
  });
  const rev = num(decode<any>('etcdserverpb.PutResponse', await answer).header.revision);
  const batch = got[1] as Msg;
  assert.equal(batch.revision, rev);
  assert.equal(batch.entries.length, 1);
  assert.equal(got[2], 'answered', "on a single node the batch's feed message comes before its write's answer, as on storage's socket");

  await assert.rejects(link.call(Op.PUT, encode('etcdserverpb.PutRequest', { key: Buffer.alloc(0), value: Buffer.from('v') })), (err: unknown) => err instanceof EtcdError && /key is not provided/.test(err.message));

  // Quiet: no batches; asked for messages again: where the store is now.
  feed.write({ quiet: true });
  const before = got.length;
  await put('b');
  await put('c');
  assert.equal(got.length, before, 'no batch while quiet');
  const back = new Promise<Msg>((resolve) => feed.once('data', resolve));
  feed.write({ quiet: false });
  const here = await back;
  assert.deepEqual([here.revision, here.entries.length], [engine.revision, 0]);

  // Cancelled: it ends with an error, and nothing more comes.
  const ended = new Promise((resolve) => feed.once('error', resolve));
  feed.cancel();
  await ended;
  const after = got.length;
  await put('d');
  await new Promise((r) => setImmediate(r));
  assert.equal(got.length, after);
});
