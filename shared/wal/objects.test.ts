// The uploaded WAL as a restore reads it, on a real local-directory store: overlapping objects
// (a mode change, a re-upload) are read once each record, a hole or a damaged object is an error.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { openObjectStore } from '../objectstore/index.js';
import type { ObjectStore } from '../objectstore/store.js';
import { termStartKey, walKey } from '../objectstore/layout.js';
import { encodeFrames, type WalRecord } from './frame.js';
import { uploadedRecords } from './objects.js';
import { listWalSegments, storedPosition } from '../objectstore/catalog.js';

const records = (first: number, last: number): WalRecord[] =>
  Array.from({ length: last - first + 1 }, (_, i) => ({ index: BigInt(first + i), payload: Buffer.from(`entry ${first + i}`) }));

async function withStore(fn: (store: ObjectStore) => Promise<void>): Promise<void> {
  const root = await mkdtemp(path.join(os.tmpdir(), 'kvs-walobjects-'));
  const store = await openObjectStore({ endpoint: `file://${root}`, bucket: 'b', prefix: 'p/' });
  try {
    await fn(store);
  } finally {
    store.close();
    await rm(root, { recursive: true, force: true });
  }
}

async function upload(store: ObjectStore, first: number, last: number): Promise<void> {
  await store.put(walKey(BigInt(first), BigInt(last)), encodeFrames(records(first, last)));
}

async function read(store: ObjectStore, from: number, to?: number): Promise<number[]> {
  const out: number[] = [];
  for await (const r of uploadedRecords(store, await listWalSegments(store), BigInt(from), to === undefined ? undefined : BigInt(to))) {
    assert.equal(Buffer.from(r.payload).toString(), `entry ${r.index}`);
    out.push(Number(r.index));
  }
  return out;
}

const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

test('per-batch and per-segment objects that overlap yield every record once, in order', async () => {
  await withStore(async (store) => {
    await upload(store, 1, 3);
    await upload(store, 4, 4);
    await upload(store, 1, 10); // a segment uploaded again after a switch to async mode
    await upload(store, 8, 12);
    await upload(store, 13, 13);
    assert.deepEqual(await read(store, 1), range(1, 13));
    assert.deepEqual(await read(store, 6), range(6, 13));
    assert.deepEqual(await read(store, 5, 9), range(5, 9));
    assert.deepEqual(await read(store, 14), []);
  });
});

test('a hole in the uploaded WAL is an error naming the missing records', async () => {
  await withStore(async (store) => {
    await upload(store, 1, 3);
    await upload(store, 6, 8);
    await assert.rejects(read(store, 1), /has a hole: records 4\.\.5 are missing/);
    assert.deepEqual(await read(store, 6), range(6, 8));
    await assert.rejects(read(store, 2, 10), /has a hole/);
    await assert.rejects(read(store, 7, 10), /ends at record 8; records 9\.\.10 are missing/);
  });
});

test('an object whose frames do not match its name is refused', async () => {
  await withStore(async (store) => {
    await store.put(walKey(1n, 3n), encodeFrames(records(1, 2)));
    await assert.rejects(read(store, 1), /is damaged: expected records 1\.\.3, decoded 2/);
    const torn = encodeFrames(records(4, 5)).subarray(0, -3);
    await store.put(walKey(4n, 5n), torn);
    await assert.rejects(read(store, 4), /is damaged/);
  });
});

/** The store, counting the objects its listings yield. */
function counting(store: ObjectStore): { store: ObjectStore; listed: () => number } {
  let n = 0;
  const wrapped = new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'list') return Reflect.get(target, prop, receiver);
      return async function* (prefix: string, opts?: object) {
        for await (const o of target.list(prefix, opts)) {
          n++;
          yield o;
        }
      };
    },
  });
  return { store: wrapped, listed: () => n };
}

const spans = (objects: { first: bigint; last: bigint }[]) => objects.map((o) => `${o.first}-${o.last}`);

test('the WAL after a checkpoint is listed from the checkpoint on, not from the beginning (sync mode: one object per batch)', async () => {
  await withStore(async (plain) => {
    for (let i = 1; i <= 300; i++) await plain.put(walKey(BigInt(i), BigInt(i)), Buffer.from('x'));
    const { store, listed } = counting(plain);
    assert.deepEqual(spans(await listWalSegments(store, { after: 290n })), spans(range(291, 300).map((i) => ({ first: BigInt(i), last: BigInt(i) }))));
    assert.equal(listed(), 10, 'only the objects after the checkpoint were listed');
    assert.equal((await listWalSegments(store)).length, 300);
  });
});

test('the WAL after a checkpoint includes a segment reaching back over it (async mode), and a hole is left for the reader to report', async () => {
  await withStore(async (store) => {
    for (const [f, l] of [[1, 100], [101, 250], [251, 400]]) await store.put(walKey(BigInt(f!), BigInt(l!)), Buffer.from('x'));
    assert.deepEqual(spans(await listWalSegments(store, { after: 200n })), ['101-250', '251-400']);
    assert.deepEqual(spans(await listWalSegments(store, { after: 250n })), ['251-400']);
    assert.deepEqual(spans(await listWalSegments(store, { after: 300n })), ['251-400'], 'nothing starts after 300');
    assert.deepEqual(spans(await listWalSegments(store, { after: 400n })), []);
    await store.delete(walKey(101n, 250n));
    assert.deepEqual(spans(await listWalSegments(store, { after: 200n })), ['251-400']);
  });
});

test('terms: a deposed leader\'s late uploads past the new term\'s start are never read, also from a listing that starts past them', async () => {
  await withStore(async (store) => {
    const put = (first: number, last: number, term: number, payload = (i: number) => `entry ${i}`) =>
      store.put(walKey(BigInt(first), BigInt(last), term), encodeFrames(Array.from({ length: last - first + 1 }, (_, i) => ({ index: BigInt(first + i), payload: Buffer.from(payload(first + i)) }))));
    await store.put(termStartKey(3, 1n), Buffer.from('{}'));
    await put(1, 40, 3);
    await put(41, 50, 3);
    await store.put(termStartKey(4, 51n), Buffer.from('{}'));
    // Term 3's upload of records it never acknowledged lands after term 4 began at 51.
    await put(45, 60, 3, (i) => (i > 50 ? `stale ${i}` : `entry ${i}`));
    await put(51, 60, 3, (i) => `stale ${i}`);
    assert.deepEqual(await read(store, 1), Array.from({ length: 50 }, (_, i) => i + 1), 'history ends at 50 until term 4 uploads');
    assert.deepEqual((await listWalSegments(store, { after: 50n })).map((o) => o.key), [], 'nothing past 50');
    await put(51, 55, 4);
    assert.deepEqual(await read(store, 48), Array.from({ length: 8 }, (_, i) => i + 48));
    assert.deepEqual((await listWalSegments(store, { after: 50n })).map((o) => o.key), [walKey(51n, 55n, 4)]);
    assert.equal(await storedPosition(store), 55);
  });
});
