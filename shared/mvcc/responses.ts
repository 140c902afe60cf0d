// Encoders for the etcd responses built from stored records. Records are copied into the
// response as they are stored (they are already encoded mvccpb.KeyValue messages).
import protobuf from 'protobufjs';
import { valueFieldSpan, writeVarint } from './keyvalue.js';

export interface Header {
  clusterId: string;
  memberId: string;
  revision: number;
  raftTerm: number;
}

/** Headers of responses nested in a Txn carry only a revision (as etcd's do). */
export function innerHeader(revision: number): Header {
  return { clusterId: '0', memberId: '0', revision, raftTerm: 0 };
}

/**
 * The node's ids as protobufjs Longs: they are decimal strings (uint64 beyond 2^53), and
 * parsing one on every response cost ~3 µs per write. A node has two; the cache stays tiny.
 */
const ids = new Map<string, protobuf.Long>();
const LongType = protobuf.util.Long as unknown as { fromString(s: string, unsigned: boolean): protobuf.Long };
function id(decimal: string): protobuf.Long {
  let v = ids.get(decimal);
  if (v === undefined) {
    if (ids.size > 64) ids.clear();
    v = LongType.fromString(decimal, true);
    ids.set(decimal, v);
  }
  return v;
}

export function writeHeader(w: protobuf.Writer, field: number, h: Header): void {
  w.uint32((field << 3) | 2).fork();
  if (h.clusterId !== '0') w.uint32(0x08).uint64(id(h.clusterId));
  if (h.memberId !== '0') w.uint32(0x10).uint64(id(h.memberId));
  if (h.revision) w.uint32(0x18).int64(h.revision);
  if (h.raftTerm) w.uint32(0x20).uint64(h.raftTerm);
  w.ldelim();
}

function writeKvs(w: protobuf.Writer, field: number, kvs: readonly Uint8Array[]): void {
  const tag = (field << 3) | 2;
  for (const kv of kvs) w.uint32(tag).bytes(kv);
}

/** etcdserverpb.RangeResponse: header=1, kvs=2, more=3, count=4. */
export function rangeResponse(w: protobuf.Writer, h: Header, kvs: readonly Uint8Array[], more: boolean, count: number): void {
  writeHeader(w, 1, h);
  writeKvs(w, 2, kvs);
  if (more) w.uint32(0x18).bool(true);
  if (count) w.uint32(0x20).int64(count);
}

/** etcdserverpb.PutResponse: header=1, prev_kv=2. */
export function putResponse(w: protobuf.Writer, h: Header, prevKv: Uint8Array | undefined): void {
  writeHeader(w, 1, h);
  if (prevKv) w.uint32(0x12).bytes(prevKv);
}

/** etcdserverpb.DeleteRangeResponse: header=1, deleted=2, prev_kvs=3. */
export function deleteRangeResponse(w: protobuf.Writer, h: Header, deleted: number, prevKvs: readonly Uint8Array[]): void {
  writeHeader(w, 1, h);
  if (deleted) w.uint32(0x10).int64(deleted);
  writeKvs(w, 3, prevKvs);
}

/** etcdserverpb.CompactionResponse: header=1. */
export function compactionResponse(w: protobuf.Writer, h: Header): void {
  writeHeader(w, 1, h);
}

/** Runs an encoder into a fresh writer and returns the bytes. */
export function build(fn: (w: protobuf.Writer) => void): Buffer {
  const w = protobuf.Writer.create();
  fn(w);
  return w.finish() as Buffer;
}

/** Runs an encoder as an embedded message (field `field`) of the writer's current message. */
export function embed(w: protobuf.Writer, field: number, fn: (w: protobuf.Writer) => void): void {
  w.uint32((field << 3) | 2).fork();
  fn(w);
  w.ldelim();
}

/** A response at least this large is handed out in its scratch buffer, not copied out of it. */
const HAND_OVER_BYTES = 64 * 1024;
/** The largest scratch kept for reuse: a huge Range's is not kept for the life of the process. */
const KEEP_BYTES = 16 * 1024 * 1024;
/** Scratch buffers whose responses have been written out, ready for the next large Range. */
const spare: Buffer[] = [];
/** At most this many bytes of them are kept (a few 1,000-key Ranges' worth, or one huge one). */
const SPARE_BYTES = 16 * 1024 * 1024;
let spareBytes = 0;
/** The scratch buffers handed out in responses (weak: a response never given back is collected). */
const handedOut = new WeakSet<ArrayBuffer>();

/**
 * Gives a large Range response's buffer back for the next Range, once nothing reads it any
 * more (the gateway: once its bytes are in the socket). Any other Buffer is left alone.
 */
export function recycleRangeResponse(body: Buffer): void {
  const ab = body.buffer as ArrayBuffer;
  if (!handedOut.delete(ab) || spareBytes + ab.byteLength > SPARE_BYTES) return;
  spareBytes += ab.byteLength;
  spare.push(Buffer.from(ab, 0, ab.byteLength));
}

/** For a response handed out in its scratch buffer, what gives that buffer back; else undefined. */
export function rangeResponseRecycler(body: Buffer): (() => void) | undefined {
  return handedOut.has(body.buffer as ArrayBuffer) ? () => recycleRangeResponse(body) : undefined;
}

/**
 * etcdserverpb.RangeResponse written as its records are read: each record is copied once, from
 * LMDB's read buffer into one scratch buffer, instead of into a Buffer of its own and then
 * again through protobufjs's writer (a Buffer and three writer operations per key; a Range
 * of 1,000 keys made 4,000 objects), or without their values for keys_only. The bytes equal
 * rangeResponse()'s. One encoder is in use at a time (a gateway reads synchronously). A small
 * response is copied out and the scratch kept; a large one is handed out in the scratch itself, which comes back for a later Range
 * through recycleRangeResponse(): no copy, and no fresh large Buffer per Range, whose
 * external memory drove the gateway's major GCs under 1,000-key Ranges
 * (docs/perf/range.md#large-range-responses-without-a-copy-2026-11-28-night).
 */
export class RangeEncoder {
  private static scratch: Buffer = Buffer.allocUnsafe(64 * 1024);
  private buf = RangeEncoder.scratch;
  private len = 0;

  constructor(h: Header) {
    const head = build((w) => writeHeader(w, 1, h));
    this.room(head.length);
    this.len += head.copy(this.buf, this.len);
  }

  /** Appends one encoded mvccpb.KeyValue (a view that is valid only now). */
  kv(record: Uint8Array): void {
    this.room(record.length + 6);
    const b = this.buf;
    b[this.len++] = 0x12; // field 2, length-delimited
    this.len = writeVarint(b, this.len, record.length);
    b.set(record, this.len);
    this.len += record.length;
  }

  /** Appends one encoded mvccpb.KeyValue without its value (keys_only), as etcd answers it. */
  kvWithoutValue(record: Uint8Array): void {
    const [from, to] = valueFieldSpan(record);
    const n = record.length - (to - from);
    this.room(n + 6);
    const b = this.buf;
    b[this.len++] = 0x12; // field 2, length-delimited
    this.len = writeVarint(b, this.len, n);
    b.set(record.subarray(0, from), this.len);
    b.set(record.subarray(to), this.len + from);
    this.len += n;
  }

  /** The response's bytes (a copy: the scratch is reused). */
  finish(more: boolean, count: number): Buffer {
    this.room(2 + 11);
    const b = this.buf;
    if (more) {
      b[this.len++] = 0x18;
      b[this.len++] = 1;
    }
    if (count) {
      b[this.len++] = 0x20;
      this.len = writeVarint(b, this.len, count);
    }
    if (this.len < HAND_OVER_BYTES) {
      const out = Buffer.allocUnsafe(this.len);
      b.copy(out, 0, 0, this.len);
      RangeEncoder.scratch = b.length <= KEEP_BYTES ? b : Buffer.allocUnsafe(64 * 1024);
      return out;
    }
    // The next Range encodes into a spare buffer, or a new one the size this one needed (a
    // huge one's buffer is neither kept nor matched).
    const keep = b.length <= KEEP_BYTES;
    const next = spare.pop();
    if (next) spareBytes -= next.length;
    RangeEncoder.scratch = next ?? Buffer.allocUnsafe(keep ? b.length : 64 * 1024);
    if (keep && b.byteOffset === 0 && b.buffer.byteLength === b.length) handedOut.add(b.buffer as ArrayBuffer);
    return b.subarray(0, this.len);
  }

  private room(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.len);
    this.buf = grown;
  }
}
