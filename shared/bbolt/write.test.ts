import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BoltWriteError, BoltWriter, BUCKET_LEAF_FLAG, MAGIC, PAGE_HEADER_BYTES, PageFlag, fnv64a, writeBoltFile, type BucketEntries } from './write.js';

const PAGE = 4096;
const page = (file: Buffer, id: number) => file.subarray(id * PAGE, (id + 1) * PAGE);
const header = (p: Buffer) => ({ id: Number(p.readBigUInt64LE(0)), flags: p.readUInt16LE(8), count: p.readUInt16LE(10), overflow: p.readUInt32LE(12) });

function meta(p: Buffer) {
  const m = p.subarray(PAGE_HEADER_BYTES);
  return {
    magic: m.readUInt32LE(0), version: m.readUInt32LE(4), pageSize: m.readUInt32LE(8), root: Number(m.readBigUInt64LE(16)),
    freelist: Number(m.readBigUInt64LE(32)), pgid: Number(m.readBigUInt64LE(40)), txid: Number(m.readBigUInt64LE(48)),
    checksumOk: m.readBigUInt64LE(56) === fnv64a(m.subarray(0, 56)),
  };
}

/** The leaf elements of a page: flags, key, value. */
function leafElements(p: Buffer) {
  const out = [];
  for (let i = 0; i < header(p).count; i++) {
    const at = PAGE_HEADER_BYTES + i * 16;
    const pos = at + p.readUInt32LE(at + 4);
    const k = p.readUInt32LE(at + 8);
    const v = p.readUInt32LE(at + 12);
    out.push({ flags: p.readUInt32LE(at), key: p.subarray(pos, pos + k), value: p.subarray(pos + k, pos + k + v) });
  }
  return out;
}

test('fnv64a is FNV-1a 64 (known vectors)', () => {
  assert.equal(fnv64a(Buffer.from('')), 0xcbf29ce484222325n);
  assert.equal(fnv64a(Buffer.from('a')), 0xaf63dc4c8601ec8cn);
  assert.equal(fnv64a(Buffer.from('foobar')), 0x85944171f73967e8n);
});

test('an empty bucket: two metas, an empty freelist, a root leaf holding the bucket inline', () => {
  const file = writeBoltFile([{ name: Buffer.from('key'), entries: [] }]);
  assert.equal(file.length, 4 * PAGE);
  const m0 = meta(page(file, 0));
  const m1 = meta(page(file, 1));
  assert.deepEqual(m1, { magic: MAGIC, version: 2, pageSize: PAGE, root: 3, freelist: 2, pgid: 4, txid: 1, checksumOk: true });
  assert.deepEqual({ ...m0, txid: 1 }, m1, 'meta 0 is the same at txid 0');
  assert.deepEqual(header(page(file, 0)), { id: 0, flags: PageFlag.meta, count: 0, overflow: 0 });
  assert.deepEqual(header(page(file, 2)), { id: 2, flags: PageFlag.freelist, count: 0, overflow: 0 });
  const [bucket] = leafElements(page(file, 3));
  assert.equal(bucket!.flags, BUCKET_LEAF_FLAG);
  assert.equal(bucket!.key.toString(), 'key');
  // root 0 and sequence 0, then an inline leaf page with no elements (as bbolt's CreateBucket writes it)
  assert.equal(bucket!.value.length, 32);
  assert.equal(bucket!.value.readBigUInt64LE(0), 0n);
  assert.deepEqual(header(bucket!.value.subarray(16)), { id: 0, flags: PageFlag.leaf, count: 0, overflow: 0 });
});

test('a bucket above a quarter page gets its own pages; an element larger than a page overflows', () => {
  const entries = [[Buffer.from('a'), Buffer.alloc(1200, 1)], [Buffer.from('b'), Buffer.alloc(10_000, 2)]] as const;
  const file = writeBoltFile([{ name: Buffer.from('x'), entries }]);
  const root = meta(page(file, 1)).root;
  const [bucket] = leafElements(page(file, root));
  const bucketRoot = Number(bucket!.value.readBigUInt64LE(0));
  assert.equal(bucket!.value.length, 16, 'not inline');
  // a's page is full once b (10 KB) comes: b gets a leaf of its own, spanning 3 pages
  assert.deepEqual(header(page(file, bucketRoot)), { id: bucketRoot, flags: PageFlag.branch, count: 2, overflow: 0 });
  const bLeaf = Number(page(file, bucketRoot).readBigUInt64LE(PAGE_HEADER_BYTES + 16 + 8));
  assert.deepEqual(header(page(file, bLeaf)), { id: bLeaf, flags: PageFlag.leaf, count: 1, overflow: 2 });
  const big = file.subarray(bLeaf * PAGE, (bLeaf + 3) * PAGE);
  assert.deepEqual(leafElements(big)[0]!.value, entries[1][1]);
});

test('keys out of order and a bucket twice are refused', () => {
  assert.throws(() => writeBoltFile([{ name: Buffer.from('b'), entries: [[Buffer.from('2'), Buffer.alloc(0)], [Buffer.from('1'), Buffer.alloc(0)]] }]), BoltWriteError);
  assert.throws(() => writeBoltFile([{ name: Buffer.from('b'), entries: [[Buffer.from('1'), Buffer.alloc(0)], [Buffer.from('1'), Buffer.alloc(0)]] }]), /keys out of order \(31 after 31\)/);
  assert.throws(() => writeBoltFile([{ name: Buffer.from('b'), entries: [] }, { name: Buffer.from('b'), entries: [] }]), /bucket b twice/);
  assert.throws(() => writeBoltFile([{ name: Buffer.from('b'), entries: [[Buffer.alloc(0), Buffer.alloc(0)]] }]), /an empty key/);
});

/** Buckets of every shape: empty, inline, one leaf, overflowing values, three tree levels. */
function variedBuckets(seed: number): { name: Buffer; entries: BucketEntries }[] {
  let x = seed;
  const rand = (n: number) => ((x = (x * 1103515245 + 12345) % 2 ** 31) % n);
  const sized = (count: number, maxValue: number) => {
    const entries: [Buffer, Buffer][] = [];
    for (let i = 0; i < count; i++) {
      const k = Buffer.alloc(8 + rand(3));
      k.writeUInt32BE(i, 0);
      entries.push([k, Buffer.alloc(rand(maxValue), i % 251)]);
    }
    return entries;
  };
  return [
    { name: Buffer.from('a-empty'), entries: [] },
    { name: Buffer.from('b-inline'), entries: sized(3, 40) },
    { name: Buffer.from('c-big-values'), entries: sized(30, 20_000) },
    { name: Buffer.from('d-deep'), entries: sized(40_000, 120) },
    { name: Buffer.from('e-leaf'), entries: sized(20, 100) },
  ];
}

test('a dry run gives the layout of the file; a writer given it writes the same file front to back', () => {
  for (const seed of [1, 2, 3]) {
    const buckets = variedBuckets(seed);
    const expected = writeBoltFile(buckets);
    const dry = new BoltWriter(() => assert.fail('a dry run produces no pages'), { dryRun: true });
    for (const b of buckets) dry.bucket(b.name, b.entries);
    const layout = dry.finish();
    assert.deepEqual(layout, { bytes: expected.length, pages: meta(page(expected, 1)).pgid, root: meta(page(expected, 1)).root });
    assert.ok(layout.root > 3 && layout.pages > 300, `seed ${seed}: a tree of several levels (${layout.pages} pages)`);

    const pieces: Buffer[] = [];
    let next = 0;
    const front = new BoltWriter((pgid, bytes) => {
      assert.equal(pgid * PAGE, next, 'every piece starts where the last ended');
      next += bytes.length;
      pieces.push(Buffer.from(bytes));
    }, { layout, chunkBytes: 64 * 1024 });
    assert.equal(next, 3 * PAGE, 'the meta pages and the free list are written first');
    for (const b of buckets) front.bucket(b.name, b.entries);
    assert.deepEqual(front.finish(), layout);
    assert.ok(Buffer.concat(pieces).equals(expected), `seed ${seed}: the same bytes`);
  }
});

test('a writer given a layout refuses contents whose layout differs', () => {
  const buckets = variedBuckets(4);
  const dry = new BoltWriter(() => {}, { dryRun: true });
  for (const b of buckets) dry.bucket(b.name, b.entries);
  const layout = dry.finish();
  const w = new BoltWriter(() => {}, { layout });
  for (const b of buckets.slice(0, -1)) w.bucket(b.name, b.entries);
  assert.throws(() => w.finish(), /the contents differ from those of the dry run/);
  assert.throws(() => new BoltWriter(() => {}, { layout: { root: 9, pages: 5 } }), /not a layout/);
});

test('a dry run forked inside a bucket and continued gives the layout of all the entries at once; buckets in any order', () => {
  const [, , , deep, leaf] = variedBuckets(5);
  const all = [...(deep!.entries as Iterable<readonly [Uint8Array, Uint8Array]>)];
  const whole = new BoltWriter(() => {}, { dryRun: true });
  whole.bucket(deep!.name, all);
  whole.bucket(leaf!.name, leaf!.entries);
  const expected = whole.finish();

  const first = new BoltWriter(() => {}, { dryRun: true });
  const put = first.beginBucket(deep!.name);
  for (const [k, v] of all.slice(0, 25_000)) put(k, v);
  const kept = first.fork();
  for (const [k, v] of all.slice(25_000, 30_000)) put(k, v);
  first.endBucket();
  assert.notDeepEqual(first.finish(), expected, 'the first run ends with fewer entries');
  const later = kept.fork();
  const more = later.putEntry();
  for (const [k, v] of all.slice(25_000)) more(k, v);
  later.endBucket();
  later.bucket(leaf!.name, leaf!.entries);
  assert.deepEqual(later.finish(), expected);

  // The bucket written first holds the first pages; the root bucket lists the names in order.
  const file = writeBoltFile([leaf!, deep!]);
  const root = leafElements(page(file, meta(page(file, 1)).root));
  assert.deepEqual(root.map((e) => e.key.toString()), [deep!.name.toString(), leaf!.name.toString()]);
  assert.equal(root[1]!.value.readBigUInt64LE(0), 3n, 'the bucket written first is on page 3');
  assert.throws(() => new BoltWriter(() => {}).fork(), /only an unfinished dry run can be forked/);
});
