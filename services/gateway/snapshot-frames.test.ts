import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { service, num } from '../../shared/proto/index.js';
import { SNAPSHOT_CHUNK_BYTES } from '../../shared/snapshot.js';
import { frameSnapshotChunk, SnapshotFrames } from './snapshot-frames.js';

const snapshot = service('etcdserverpb.Maintenance').Snapshot!;

/** What a client reads from one frame: the prefix's length and the SnapshotResponse behind it. */
function read(frame: Buffer): { remaining: number; blob: Buffer } {
  assert.equal(frame[0], 0, 'not compressed');
  assert.equal(frame.readUInt32BE(1), frame.length - 5, 'the prefix names the message length');
  const msg = snapshot.responseDeserialize(frame.subarray(5)) as { remainingBytes: unknown; blob: Buffer };
  return { remaining: num(msg.remainingBytes as number), blob: Buffer.from(msg.blob) };
}

test('a framed chunk decodes as etcd SnapshotResponse with its remaining bytes and blob', () => {
  const frames = new SnapshotFrames();
  // Varints of 1 to 8 bytes, up to the largest safe integer; 0 as proto3 leaves it out.
  for (const remaining of [0, 1, 127, 128, 16_383, 16_384, 85_000_000, 2 ** 32 + 5, Number.MAX_SAFE_INTEGER]) {
    for (const size of [1, 1000, SNAPSHOT_CHUNK_BYTES]) {
      const chunk = randomBytes(size);
      const frame = frames.take();
      const length = frameSnapshotChunk(frame, remaining, chunk);
      const got = read(frame.subarray(0, length));
      assert.equal(got.remaining, remaining);
      assert.deepEqual(got.blob, chunk);
      frames.give(frame);
    }
  }
});

test('a reused frame carries only its new message', () => {
  const frames = new SnapshotFrames();
  const first = frames.take();
  frameSnapshotChunk(first, 2 ** 40, randomBytes(SNAPSHOT_CHUNK_BYTES));
  frames.give(first);
  const again = frames.take();
  assert.equal(again, first, 'the buffer given back is reused');
  const small = Buffer.from('tail');
  const got = read(again.subarray(0, frameSnapshotChunk(again, 0, small)));
  assert.deepEqual(got, { remaining: 0, blob: small });
});

test('a chunk over etcd 32 KiB is refused', () => {
  assert.throws(() => frameSnapshotChunk(Buffer.alloc(2 * SNAPSHOT_CHUNK_BYTES), 1, Buffer.alloc(SNAPSHOT_CHUNK_BYTES + 1)), /at most 32768/);
});
