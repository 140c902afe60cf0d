/**
 * The WAL's segment files as a reader sees them: `<dir>/<first index, 20 decimal digits>.wal`,
 * their names, listing and decoding. The storage writes them (services/storage/wal/); the
 * archiver and the peer read them, so the format lives here, beside the frame codec.
 *
 * Uses the default `node:fs` object (not named imports) so that every call
 * goes through a property lookup; tests rely on this to inject I/O failures.
 */
import fs from 'node:fs';
import path from 'node:path';
import { decodeFrames, type DecodeResult } from './frame.js';

export const SEGMENT_SUFFIX = '.wal';

/** The storage seals its active segment once it holds this many bytes (WalOptions.maxSegmentBytes' default). */
export const DEFAULT_MAX_SEGMENT_BYTES = 50 * 1000 * 1000;

const SEGMENT_NAME_RE = /^(\d{20})\.wal$/;

export function segmentFileName(firstIndex: bigint): string {
  if (firstIndex < 0n || firstIndex >= 1n << 64n) throw new RangeError(`segment index ${firstIndex} outside u64`);
  return firstIndex.toString().padStart(20, '0') + SEGMENT_SUFFIX;
}

/** First index encoded in a segment file name, or undefined if `name` is not a segment file. */
export function parseSegmentFileName(name: string): bigint | undefined {
  const m = SEGMENT_NAME_RE.exec(name);
  return m ? BigInt(m[1]!) : undefined;
}

/** Segment files in `dir`, sorted by first index (names are fixed width, so lexical order is numeric order). */
export function listSegments(dir: string): { name: string; path: string; firstIndex: bigint }[] {
  const out: { name: string; path: string; firstIndex: bigint }[] = [];
  for (const name of fs.readdirSync(dir)) {
    const firstIndex = parseSegmentFileName(name);
    if (firstIndex !== undefined) out.push({ name, path: path.join(dir, name), firstIndex });
  }
  out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return out;
}

/** Reads a whole segment (or its first `limit` bytes) and decodes it. Payloads are views into `buf`. */
export function readSegment(file: string, limit?: number): DecodeResult & { buf: Buffer; fileBytes: number } {
  const whole = fs.readFileSync(file);
  const buf = limit !== undefined && limit < whole.length ? whole.subarray(0, limit) : whole;
  return { ...decodeFrames(buf), buf, fileBytes: whole.length };
}

