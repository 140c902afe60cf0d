// Maintenance.Snapshot's 32 KiB messages framed for the wire in one step: the gRPC prefix,
// SnapshotResponse's fields and the chunk copied once into a buffer that is reused after the
// socket took it. Serializing each message through protobufjs and framing it (grpc/framing.ts)
// allocated one new 32 KiB buffer per message, ~2,600 per 85 MB snapshot, and their garbage
// collection was a good part of the stream's CPU on the gateway's main thread.
import { SNAPSHOT_CHUNK_BYTES } from '../../shared/snapshot.js';

/** The prefix (5), remaining_bytes (1 + up to 8 for a safe integer), blob's tag and length (1 + 3). */
const MAX_HEADER_BYTES = 5 + 1 + 8 + 1 + 3;
const FRAME_BYTES = MAX_HEADER_BYTES + SNAPSHOT_CHUNK_BYTES;
const REMAINING_BYTES_TAG = (2 << 3) | 0; // field 2, varint
const BLOB_TAG = (3 << 3) | 2; // field 3, length-delimited

function writeVarint(out: Buffer, at: number, value: number): number {
  while (value >= 0x80) {
    out[at++] = (value % 0x80) | 0x80;
    value = Math.floor(value / 0x80);
  }
  out[at++] = value;
  return at;
}

/**
 * Writes the gRPC frame of SnapshotResponse{remaining_bytes, blob: chunk} into `out` (at least
 * FRAME_BYTES long) and returns its length. remaining_bytes 0 is left out, as proto3 does.
 */
export function frameSnapshotChunk(out: Buffer, remaining: number, chunk: Uint8Array): number {
  if (chunk.length > SNAPSHOT_CHUNK_BYTES) throw new RangeError(`a snapshot chunk of ${chunk.length} bytes (at most ${SNAPSHOT_CHUNK_BYTES})`);
  let at = 5;
  if (remaining > 0) {
    out[at++] = REMAINING_BYTES_TAG;
    at = writeVarint(out, at, remaining);
  }
  out[at++] = BLOB_TAG;
  at = writeVarint(out, at, chunk.length);
  out.set(chunk, at);
  at += chunk.length;
  out[0] = 0; // not compressed
  out.writeUInt32BE(at - 5, 1);
  return at;
}

/** Frame buffers of one stream: taken for a message, given back once the socket has it. */
export class SnapshotFrames {
  private free: Buffer[] = [];

  take(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafeSlow(FRAME_BYTES);
  }

  give(frame: Buffer): void {
    this.free.push(frame);
  }
}
