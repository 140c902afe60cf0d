// The bbolt reader on files written by the test kit's minimal bbolt writer (testkit/etcd-fixture.ts):
// trees of branch and leaf pages, inline buckets, values over a page, the meta pages' choice,
// and the structural checks (the integration test etcd-import.test.ts reads real etcd files).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bufferSink, writeBolt } from '../../testkit/etcd-fixture.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BoltError, bufferSource, fileSource, fnv64a, openBolt } from './read.js';

const PAGE = 4096;

function pairs(n: number, valueBytes: (i: number) => number): [Buffer, Buffer][] {
  return Array.from({ length: n }, (_, i) => [Buffer.from(`k${String(i).padStart(6, '0')}`), Buffer.alloc(valueBytes(i), i % 256)]);
}

function file(): { buf: Buffer; big: [Buffer, Buffer][]; small: [Buffer, Buffer][] } {
  const sink = bufferSink();
  const big = pairs(2000, (i) => (i === 5 ? 10_000 : 50));
  const small = pairs(3, () => 4);
  writeBolt(sink, [
    { name: 'big', entries: big },
    { name: 'small', entries: small },
    { name: 'empty', entries: [] },
  ]);
  return { buf: sink.buffer(), big, small };
}

function metaAt(buf: Buffer, m: number): number {
  return m * PAGE + 16;
}

test('reads every bucket: a tree of branch and leaf pages, an overflowing value, inline buckets', () => {
  const { buf, big, small } = file();
  const db = openBolt(bufferSource(buf));
  assert.equal(db.meta.pageSize, PAGE);
  const buckets = db.root().buckets();
  assert.deepEqual([...buckets.keys()], ['big', 'empty', 'small']);
  const read = (name: string) => [...buckets.get(name)!.pairs()].map(({ key, value }) => [Buffer.from(key), Buffer.from(value)]);
  assert.deepEqual(read('big'), big);
  assert.deepEqual(read('small'), small);
  assert.deepEqual(read('empty'), []);
  assert.deepEqual(buckets.get('small')!.get(Buffer.from('k000001')), Buffer.alloc(4, 1));
  assert.equal(buckets.get('small')!.get(Buffer.from('nope')), undefined);
});

test('the valid meta page with the higher txid is used; one damaged meta page is survived', () => {
  const { buf } = file();
  assert.equal(openBolt(bufferSource(buf)).meta.txid, 2n);
  const damaged = Buffer.from(buf);
  damaged[metaAt(damaged, 1) + 20] ^= 0xff; // meta 1's root, under its checksum
  assert.equal(openBolt(bufferSource(damaged)).meta.txid, 1n);
  const both = Buffer.from(damaged);
  both[metaAt(both, 0) + 20] ^= 0xff;
  assert.throws(() => openBolt(bufferSource(both)), /not a bbolt database: meta page 0 fails its checksum .*; meta page 1 fails its checksum/);
});

test('refuses foreign, truncated and structurally broken files with a message', () => {
  const { buf } = file();
  const refuse = (b: Buffer, re: RegExp, walk = true) =>
    assert.throws(() => {
      const db = openBolt(bufferSource(b));
      if (walk) for (const bucket of db.root().buckets().values()) for (const _ of bucket.entries());
    }, (err: unknown) => err instanceof BoltError && re.test(err.message));
  refuse(Buffer.alloc(3 * PAGE, 7), /magic 0x07070707, not bbolt's 0xed0cdaed/);
  refuse(buf.subarray(0, buf.length - 2 * PAGE), /the file is truncated: its meta page says the database has \d+ pages of 4096 bytes/);
  refuse(buf.subarray(0, 100), /the file is truncated: .* the file has 100/);
  refuse(buf.subarray(0, 40), /meta page 0 is past the end of the file/);

  // A bucket's tree: find the big bucket's root (a branch) through the reader's own meta.
  const db = openBolt(bufferSource(buf));
  const rootLeaf = db.meta.root * PAGE;
  let bigRoot = -1;
  for (let i = 0; i < buf.readUInt16LE(rootLeaf + 10); i++) {
    const el = rootLeaf + 16 + i * 16;
    const k = el + buf.readUInt32LE(el + 4);
    if (buf.subarray(k, k + buf.readUInt32LE(el + 8)).toString() === 'big') bigRoot = Number(buf.readBigUInt64LE(k + 3));
  }
  assert.equal(buf.readUInt16LE(bigRoot * PAGE + 8), 0x01);
  const withChild = (child: bigint, index = 0) => {
    const b = Buffer.from(buf);
    b.writeBigUInt64LE(child, bigRoot * PAGE + 16 + index * 16 + 8);
    return b;
  };
  refuse(withChild(BigInt(bigRoot)), /reaches page \d+ twice .*form a loop/);
  refuse(withChild(1_000_000n), /points to page 1000000, outside the database/);
  refuse(withChild(0n), /points to page 0, a meta page/);
  refuse(withChild(2n), /a freelist page/);
  const secondChild = withChild(buf.readBigUInt64LE(bigRoot * PAGE + 16 + 8), 1);
  refuse(secondChild, /twice|out of order/);
  const wrongId = Buffer.from(buf);
  wrongId.writeBigUInt64LE(99n, Number(buf.readBigUInt64LE(bigRoot * PAGE + 16 + 8)) * PAGE);
  refuse(wrongId, /says it is page 99/);
  const tooMany = Buffer.from(buf);
  tooMany.writeUInt16LE(0xfff0, bigRoot * PAGE + 10);
  refuse(tooMany, /says it has 65520 elements, more than fit in it/);

  // A meta page rewritten with a valid checksum: its page count beyond the file.
  const meta = Buffer.from(buf);
  for (const m of [0, 1]) {
    meta.writeBigUInt64LE(1n << 40n, metaAt(meta, m) + 40);
    meta.writeBigUInt64LE(fnv64a(meta.subarray(metaAt(meta, m), metaAt(meta, m) + 56)), metaAt(meta, m) + 56);
  }
  refuse(meta, /truncated|beyond any file/, false);
});

test('fnv64a is Go\'s hash/fnv New64a', () => {
  assert.equal(fnv64a(Buffer.alloc(0)), 0xcbf29ce484222325n);
  assert.equal(fnv64a(Buffer.from('a')), 0xaf63dc4c8601ec8cn);
  assert.equal(fnv64a(Buffer.from('foobar')), 0x85944171f73967e8n);
});

test('a file read in windows smaller than its pages and values reads the same as the buffer', (t) => {
  const { buf, big } = file();
  const f = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-bolt-')), 'db');
  t.after(() => fs.rmSync(path.dirname(f), { recursive: true, force: true }));
  fs.writeFileSync(f, buf);
  const fd = fs.openSync(f, 'r');
  t.after(() => fs.closeSync(fd));
  for (const window of [PAGE, 3 * PAGE + 100, 1 << 20]) {
    const db = openBolt(fileSource(fd, buf.length, window));
    const got = [...db.root().buckets().get('big')!.pairs()].map(({ key, value }) => [Buffer.from(key), Buffer.from(value)]);
    assert.deepEqual(got, big, `window ${window}`);
  }
  assert.throws(() => openBolt(fileSource(fd, buf.length + 10 * PAGE)).root().buckets(), /the file ended at \d+ bytes while \d+ were expected/);
});
