/**
 * WAL frame encoding (pure, no I/O).
 *
 * Frame layout (all integers little endian):
 *
 *   offset  size  field
 *   0       4     payload length (u32)
 *   4       4     CRC-32 (zlib polynomial) over bytes [8, 16 + length): the
 *                 8 index bytes followed by the payload
 *   8       8     entry index (u64)
 *   16      len   payload
 *
 * A segment file is a plain concatenation of frames. A remainder made only of
 * zero bytes (e.g. a preallocated tail) is treated as the end of the data.
 */
import { crc32 } from 'node:zlib';

export type WalRecord = { index: bigint; payload: Uint8Array };

export const FRAME_HEADER_BYTES = 16;
/** Largest payload a frame may carry (64 MiB). A larger declared length is 'corrupt'. */
export const MAX_PAYLOAD_BYTES = 64 * 1024 * 1024;
export const MAX_INDEX = (1n << 64n) - 1n;

export type DecodeStop = 'end' | 'torn' | 'corrupt';

export interface DecodeResult {
  records: WalRecord[];
  /**
   * Absolute offset in `buf` just past the last valid frame (equal to the
   * number of valid bytes when `start` is 0). Everything before it decoded
   * cleanly; truncating the file there removes exactly the bad tail.
   */
  validBytes: number;
  /** Why decoding stopped: 'end' (clean end or all-zero tail), 'torn' (incomplete frame), 'corrupt'. */
  stop: DecodeStop;
  /** Human-readable reason when stop is not 'end' (or when an all-zero tail was skipped). */
  detail?: string;
}

// CRC-32 table (reflected polynomial 0xEDB88320, same as zlib) used only to
// fold the 8 index bytes in; the payload itself goes through native zlib.crc32
// seeded with that value, so no per-record view/allocation is needed to hash
// "index bytes + payload" as one contiguous input.
const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32 of buf[off, off+8) — the index bytes — as a zlib.crc32-compatible seed. */
function crcOfIndexBytes(buf: Uint8Array, off: number): number {
  let c = 0xffffffff;
  for (let i = off, end = off + 8; i < end; i++) c = CRC_TABLE[(c ^ buf[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** Total encoded size of the given records (header + payload each). */
export function encodedLength(entries: readonly WalRecord[]): number {
  let total = 0;
  for (let i = 0; i < entries.length; i++) {
    const n = entries[i]!.payload.byteLength;
    if (n > MAX_PAYLOAD_BYTES) {
      throw new RangeError(`WAL payload of ${n} bytes at index ${entries[i]!.index} exceeds the ${MAX_PAYLOAD_BYTES}-byte limit`);
    }
    total += FRAME_HEADER_BYTES + n;
  }
  return total;
}

/**
 * Encodes all records into one freshly allocated Buffer (one allocation; each
 * payload is copied exactly once). Throws RangeError for a payload over
 * MAX_PAYLOAD_BYTES or an index outside u64. Does not check index continuity.
 */
export function encodeFrames(entries: readonly WalRecord[]): Buffer {
  const out = Buffer.allocUnsafe(encodedLength(entries));
  let off = 0;
  for (let i = 0; i < entries.length; i++) {
    const { index, payload } = entries[i]!;
    const n = payload.byteLength;
    out.writeUInt32LE(n, off);
    out.writeBigUInt64LE(index, off + 8); // throws RangeError outside [0, 2^64)
    out.set(payload, off + FRAME_HEADER_BYTES);
    out.writeUInt32LE(crc32(payload, crcOfIndexBytes(out, off + 8)), off + 4);
    off += FRAME_HEADER_BYTES + n;
  }
  return out;
}

export function encodeFrame(index: bigint, payload: Uint8Array): Buffer {
  return encodeFrames([{ index, payload }]);
}

const ZERO_CHUNK = Buffer.alloc(64 * 1024);

/** True when buf[from, end) contains only zero bytes. */
function isZeroFrom(buf: Buffer, from: number, end: number): boolean {
  for (let off = from; off < end; off += ZERO_CHUNK.length) {
    const n = Math.min(ZERO_CHUNK.length, end - off);
    if (buf.compare(ZERO_CHUNK, 0, n, off, off + n) !== 0) return false;
  }
  return true;
}

/**
 * Decodes consecutive frames from `buf` starting at byte `start`, stopping at
 * the end of the buffer, at an all-zero remainder ('end'), at the first
 * incomplete frame ('torn') or at the first frame whose length is over the
 * limit or whose CRC does not match ('corrupt').
 *
 * Returned payloads are views into `buf` (not copies). Index continuity is
 * not checked here.
 */
export function decodeFrames(buf: Buffer, start = 0): DecodeResult {
  const records: WalRecord[] = [];
  const end = buf.length;
  let off = start;
  while (off < end) {
    const remaining = end - off;
    // A zero length-and-crc word pair (or a short zero remainder) starts the
    // zero tail check; a real frame can never be all zeros (crc32 of 8 zero
    // index bytes is not 0), so an all-zero remainder is unambiguous.
    if (
      (remaining < 8 || (buf.readUInt32LE(off) === 0 && buf.readUInt32LE(off + 4) === 0)) &&
      isZeroFrom(buf, off, end)
    ) {
      return {
        records,
        validBytes: off,
        stop: 'end',
        detail: `all-zero tail of ${remaining} bytes at offset ${off}`,
      };
    }
    if (remaining < FRAME_HEADER_BYTES) {
      return { records, validBytes: off, stop: 'torn', detail: `incomplete frame header (${remaining} of ${FRAME_HEADER_BYTES} bytes) at offset ${off}` };
    }
    const len = buf.readUInt32LE(off);
    if (len > MAX_PAYLOAD_BYTES) {
      return { records, validBytes: off, stop: 'corrupt', detail: `declared payload length ${len} exceeds the ${MAX_PAYLOAD_BYTES}-byte limit at offset ${off}` };
    }
    const frameEnd = off + FRAME_HEADER_BYTES + len;
    if (frameEnd > end) {
      return { records, validBytes: off, stop: 'torn', detail: `incomplete frame at offset ${off}: needs ${FRAME_HEADER_BYTES + len} bytes, ${remaining} present` };
    }
    const payload = buf.subarray(off + FRAME_HEADER_BYTES, frameEnd);
    const expected = buf.readUInt32LE(off + 4);
    const actual = crc32(payload, crcOfIndexBytes(buf, off + 8));
    if (actual !== expected) {
      return { records, validBytes: off, stop: 'corrupt', detail: `CRC mismatch at offset ${off} (stored ${expected.toString(16)}, computed ${actual.toString(16)})` };
    }
    records.push({ index: buf.readBigUInt64LE(off + 8), payload });
    off = frameEnd;
  }
  return { records, validBytes: off, stop: 'end' };
}
