import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import {
  decodeFrames,
  encodeFrame,
  encodeFrames,
  encodedLength,
  FRAME_HEADER_BYTES,
  MAX_PAYLOAD_BYTES,
  type WalRecord,
} from './frame.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-wal-'));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** Deterministic pseudo-random bytes. */
function bytes(seed: number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed * 2654435761 + 1;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

function makeRecords(first: bigint, count: number): WalRecord[] {
  const recs: WalRecord[] = [];
  for (let i = 0; i < count; i++) recs.push({ index: first + BigInt(i), payload: bytes(i, (i * 37) % 300) });
  return recs;
}

function assertSameRecords(actual: WalRecord[], expected: WalRecord[]): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < expected.length; i++) {
    assert.equal(actual[i]!.index, expected[i]!.index, `index of record ${i}`);
    assert.deepEqual(Buffer.from(actual[i]!.payload), Buffer.from(expected[i]!.payload), `payload of record ${i}`);
  }
}

test('frame layout: length, crc over index bytes + payload, u64 index, payload', () => {
  const payload = Buffer.from('hello wal');
  const index = 0x0102030405060708n;
  const f = encodeFrame(index, payload);
  assert.equal(f.length, FRAME_HEADER_BYTES + payload.length);
  assert.equal(f.readUInt32LE(0), payload.length);
  assert.equal(f.readBigUInt64LE(8), index);
  assert.deepEqual(f.subarray(16), payload);
  const indexBytes = Buffer.alloc(8);
  indexBytes.writeBigUInt64LE(index);
  assert.equal(f.readUInt32LE(4), crc32(Buffer.concat([indexBytes, payload])));
  // Empty payload and the largest u64 index.
  const max = (1n << 64n) - 1n;
  const e = encodeFrame(max, new Uint8Array(0));
  assert.equal(e.length, 16);
  assert.equal(e.readUInt32LE(4), crc32(Buffer.alloc(8, 0xff)));
  assertSameRecords(decodeFrames(e).records, [{ index: max, payload: new Uint8Array(0) }]);
});

test('round trip of many records; encodeFrames equals concatenated encodeFrame', () => {
  const recs = makeRecords(1000n, 2000);
  const buf = encodeFrames(recs);
  assert.equal(buf.length, encodedLength(recs));
  assert.deepEqual(buf, Buffer.concat(recs.map((r) => encodeFrame(r.index, r.payload))));
  const d = decodeFrames(buf);
  assert.equal(d.stop, 'end');
  assert.equal(d.validBytes, buf.length);
  assertSameRecords(d.records, recs);
  // Payloads of non-Buffer Uint8Array views with an offset are encoded from the right bytes.
  const backing = bytes(7, 100);
  const view = new Uint8Array(backing.buffer, 10, 20);
  assertSameRecords(decodeFrames(encodeFrame(5n, view)).records, [{ index: 5n, payload: backing.slice(10, 30) }]);
  assert.equal(encodeFrames([]).length, 0);
  assert.deepEqual(decodeFrames(Buffer.alloc(0)), { records: [], validBytes: 0, stop: 'end' });
});

test('decoding from a start offset returns absolute validBytes', () => {
  const recs = makeRecords(1n, 10);
  const prefix = Buffer.from('garbage!');
  const buf = Buffer.concat([prefix, encodeFrames(recs)]);
  const d = decodeFrames(buf, prefix.length);
  assert.equal(d.stop, 'end');
  assert.equal(d.validBytes, buf.length);
  assertSameRecords(d.records, recs);
});

test('a cut at every offset inside the last frame is torn, earlier frames survive', () => {
  const recs = makeRecords(1n, 5);
  const buf = encodeFrames(recs);
  const lastStart = encodedLength(recs.slice(0, 4));
  for (let cut = lastStart + 1; cut < buf.length; cut++) {
    const d = decodeFrames(buf.subarray(0, cut));
    assert.equal(d.stop, 'torn', `cut at ${cut}`);
    assert.equal(d.validBytes, lastStart, `cut at ${cut}`);
    assertSameRecords(d.records, recs.slice(0, 4));
  }
  const exact = decodeFrames(buf.subarray(0, lastStart));
  assert.equal(exact.stop, 'end');
  assert.equal(exact.records.length, 4);
});

test('a flipped byte anywhere in a frame is corrupt (or, in the length, torn/corrupt) and stops there', () => {
  const recs = makeRecords(1n, 3);
  const buf = encodeFrames(recs);
  const secondStart = encodedLength(recs.slice(0, 1));
  const secondEnd = encodedLength(recs.slice(0, 2));
  for (let pos = secondStart; pos < secondEnd; pos++) {
    const bad = Buffer.from(buf);
    bad[pos]! ^= 0x40;
    const d = decodeFrames(bad);
    assert.notEqual(d.stop, 'end', `flip at ${pos}`);
    if (pos >= secondStart + 4) assert.equal(d.stop, 'corrupt', `flip at ${pos}`);
    assert.equal(d.validBytes, secondStart, `flip at ${pos}`);
    assertSameRecords(d.records, recs.slice(0, 1));
  }
});

test('an all-zero remainder is a clean end; zeros followed by data are not', () => {
  const recs = makeRecords(1n, 4);
  const frames = encodeFrames(recs);
  for (const zeros of [1, 7, 8, 15, 16, 17, 100_000]) {
    const d = decodeFrames(Buffer.concat([frames, Buffer.alloc(zeros)]));
    assert.equal(d.stop, 'end', `${zeros} zeros`);
    assert.equal(d.validBytes, frames.length);
    assertSameRecords(d.records, recs);
  }
  const tail = Buffer.alloc(100);
  tail[99] = 1;
  const d = decodeFrames(Buffer.concat([frames, tail]));
  assert.equal(d.stop, 'corrupt');
  assert.equal(d.validBytes, frames.length);
  const short = decodeFrames(Buffer.concat([frames, Buffer.from([0, 0, 3])]));
  assert.equal(short.stop, 'torn');
  assert.equal(short.validBytes, frames.length);
});

test('declared length above 64 MiB is corrupt; encoding such a payload throws', () => {
  const frame = encodeFrame(1n, Buffer.from('x'));
  frame.writeUInt32LE(MAX_PAYLOAD_BYTES + 1, 0);
  const d = decodeFrames(frame);
  assert.equal(d.stop, 'corrupt');
  assert.equal(d.validBytes, 0);
  assert.throws(() => encodeFrames([{ index: 1n, payload: new Uint8Array(MAX_PAYLOAD_BYTES + 1) }]), RangeError);
  assert.throws(() => encodeFrame(-1n, new Uint8Array(1)), RangeError);
  assert.throws(() => encodeFrame(1n << 64n, new Uint8Array(1)), RangeError);
});

test('frames written to and read back from a file decode identically', () => {
  const recs = makeRecords(42n, 300);
  const file = path.join(tmp, 'frames.bin');
  fs.writeFileSync(file, encodeFrames(recs));
  const d = decodeFrames(fs.readFileSync(file));
  assert.equal(d.stop, 'end');
  assertSameRecords(d.records, recs);
});
