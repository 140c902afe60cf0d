// mvccpb.KeyValue, encoded and decoded by hand.
//
// The stored form of every key version IS the protobuf encoding of mvccpb.KeyValue, so a
// range read copies stored bytes straight into a RangeResponse without decoding them.
// Field numbers: key=1, create_revision=2, mod_revision=3, version=4, value=5, lease=6.

export interface KeyValue {
  key: Uint8Array;
  createRevision: number;
  modRevision: number;
  version: number;
  value: Uint8Array;
  /** Lease ids are full int64s (etcd hands out ids above 2^53), so they stay bigint. */
  lease: bigint;
}

export const EMPTY = new Uint8Array(0);

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function bigVarintSize(n: bigint): number {
  if (n < 0n) return 10;
  let size = 1;
  while (n >= 0x80n) {
    n >>= 7n;
    size++;
  }
  return size;
}

/** A non-negative integer (up to 2^53) as a protobuf varint at `pos`; returns the end. */
export function writeVarint(buf: Uint8Array, pos: number, n: number): number {
  while (n >= 0x80) {
    buf[pos++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[pos++] = n;
  return pos;
}

function writeBigVarint(buf: Uint8Array, pos: number, n: bigint): number {
  let v = BigInt.asUintN(64, n);
  while (v >= 0x80n) {
    buf[pos++] = Number(v & 0x7fn) | 0x80;
    v >>= 7n;
  }
  buf[pos++] = Number(v);
  return pos;
}

/** The size of a KeyValue's encoding. */
export function keyValueSize(kv: KeyValue): number {
  let size = 0;
  if (kv.key.length) size += 1 + varintSize(kv.key.length) + kv.key.length;
  if (kv.createRevision) size += 1 + varintSize(kv.createRevision);
  if (kv.modRevision) size += 1 + varintSize(kv.modRevision);
  if (kv.version) size += 1 + varintSize(kv.version);
  if (kv.value.length) size += 1 + varintSize(kv.value.length) + kv.value.length;
  if (kv.lease) size += 1 + bigVarintSize(kv.lease);
  return size;
}

export function encodeKeyValue(kv: KeyValue): Buffer {
  const buf = Buffer.allocUnsafe(keyValueSize(kv));
  writeKeyValue(kv, buf);
  return buf;
}

/** Writes the encoding of `kv` (keyValueSize(kv) bytes) at the start of `buf`. */
export function writeKeyValue(kv: KeyValue, buf: Uint8Array): void {
  let pos = 0;
  if (kv.key.length) pos = writeBytesField(buf, pos, 0x0a, kv.key);
  if (kv.createRevision) pos = writeVarintField(buf, pos, 0x10, kv.createRevision);
  if (kv.modRevision) pos = writeVarintField(buf, pos, 0x18, kv.modRevision);
  if (kv.version) pos = writeVarintField(buf, pos, 0x20, kv.version);
  if (kv.value.length) pos = writeBytesField(buf, pos, 0x2a, kv.value);
  if (kv.lease) {
    buf[pos++] = 0x30;
    writeBigVarint(buf, pos, kv.lease);
  }
}

/** Writes tag `tag` and the varint `v` at `pos`; returns the position after them. */
function writeVarintField(buf: Uint8Array, pos: number, tag: number, v: number): number {
  buf[pos++] = tag;
  return writeVarint(buf, pos, v);
}

/** Writes tag `tag`, the length of `bytes` and `bytes` at `pos`; returns the position after them. */
function writeBytesField(buf: Uint8Array, pos: number, tag: number, bytes: Uint8Array): number {
  pos = writeVarintField(buf, pos, tag, bytes.length);
  buf.set(bytes, pos);
  return pos + bytes.length;
}

/** Decodes a stored KeyValue. key and value are views into `buf`, not copies. */
export function decodeKeyValue(buf: Uint8Array): KeyValue {
  const kv: KeyValue = { key: EMPTY, createRevision: 0, modRevision: 0, version: 0, value: EMPTY, lease: 0n };
  let pos = 0;
  const end = buf.length;
  while (pos < end) {
    const tag = buf[pos++];
    const wire = tag & 7;
    if (wire !== 0 && wire !== 2) throw new Error(`corrupt KeyValue record: unexpected wire type ${wire}`);
    if (wire === 0 && tag >> 3 === 6) {
      // the lease field: read as bigint (every other varint as a number)
      let v = 0n;
      let shift = 0n;
      let b: number;
      do {
        b = buf[pos++];
        v |= BigInt(b & 0x7f) << shift;
        shift += 7n;
      } while (b & 0x80);
      kv.lease = BigInt.asIntN(64, v);
      continue;
    }
    // a number varint: the value of fields 2-4, or the length of field 1 or 5
    let v = 0;
    let mul = 1;
    let b: number;
    do {
      b = buf[pos++];
      v += (b & 0x7f) * mul;
      mul *= 128;
    } while (b & 0x80);
    const field = tag >> 3;
    if (wire === 0) {
      switch (field) {
        case 2: kv.createRevision = v; break;
        case 3: kv.modRevision = v; break;
        case 4: kv.version = v; break;
      }
    } else {
      if (field === 1) kv.key = buf.subarray(pos, pos + v);
      else if (field === 5) kv.value = buf.subarray(pos, pos + v);
      pos += v;
    }
  }
  return kv;
}

/**
 * Where a stored KeyValue's value field (5) is, tag included: [from, to), empty at the end if
 * it has none. A keys_only Range copies the record without it (RangeEncoder.kvWithoutValue).
 */
export function valueFieldSpan(buf: Uint8Array): [number, number] {
  let pos = 0;
  const varint = () => {
    let n = 0;
    for (let mul = 1; ; mul *= 128) {
      if (pos >= buf.length) throw new Error('corrupt KeyValue record: it ends inside a field');
      const b = buf[pos++]!;
      n += (b & 0x7f) * mul;
      if (b < 0x80) return n;
    }
  };
  while (pos < buf.length) {
    const from = pos;
    const tag = varint();
    const wire = tag & 7;
    if (wire === 2) {
      // Not `pos += varint()`: that reads pos before the varint moves it.
      const len = varint();
      pos += len;
      if (pos > buf.length) throw new Error('corrupt KeyValue record: it ends inside a field');
    } else if (wire === 0) varint();
    else throw new Error(`corrupt KeyValue record: unexpected wire type ${wire}`);
    if (tag >>> 3 === 5) return [from, pos];
  }
  return [pos, pos];
}
