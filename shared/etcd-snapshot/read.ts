// What an etcd 3.4 or 3.5 backend (a bbolt file: `etcdctl snapshot save`'s output without its
// SHA-256 trailer, or a member/snap/db) holds, decoded from etcd's schema (schema.ts): every
// stored change of every key in revision order, the compaction state, leases and the auth
// state. Pure: bbolt pages in (shared/bbolt/read.ts), etcd's contents out; every record is
// checked, and a bad one gives an EtcdSnapshotError naming it.
import { BoltError, openBolt, type Bucket, type PageSource } from '../bbolt/read.js';
import { decodeKeyValue, encodeKeyValue, keyValueSize, writeKeyValue, EMPTY, type KeyValue } from '../mvcc/keyvalue.js';
import { decode } from '../proto/index.js';
import { decodeRole, decodeUser, type Role, type User } from '../auth/tables.js';
import { AUTH_KEY, BUCKET, KNOWN_BUCKETS, META_KEY, REVISION_KEY_BYTES, decodeRevisionKey, type EtcdRevision } from './schema.js';

export class EtcdSnapshotError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EtcdSnapshotError';
  }
}

/** One stored change of a key, as etcd's `key` bucket holds it. */
export interface EtcdChange {
  main: number;
  sub: number;
  tombstone: boolean;
  /** The key (a view into `kv` for a put). */
  key: Buffer;
  /**
   * The mvccpb.KeyValue: for a put etcd's stored bytes (checked to be the canonical encoding,
   * so byte-identical to what kvs stores); for a deletion only the key, as etcd stores it.
   */
  kv: Buffer;
  /** The put's lease (0n: none, and for a deletion). */
  lease: bigint;
}

export interface EtcdCompaction {
  /** The last compaction etcd finished (-1: none). */
  finished: number;
  /** The last compaction etcd scheduled (-1: none); above `finished` when one was interrupted. */
  scheduled: number;
}

export interface EtcdLease {
  id: bigint;
  /** The granted TTL in seconds. */
  ttl: number;
  /** The checkpointed remaining TTL (0: none; etcd 3.4 checkpoints only with --experimental-enable-lease-checkpoint). */
  remainingTTL: number;
}

export interface EtcdAuth {
  enabled: boolean;
  /** etcd's authRevision (1 when the bucket has none). */
  revision: number;
  users: User[];
  roles: Role[];
}

/** kvs's revision keys hold the main revision in 6 bytes and the sub in 4. */
const MAX_MAIN = 2 ** 48 - 1;
const MAX_SUB = 2 ** 32 - 1;

function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.length);
}

interface PbKeyValue {
  key: Uint8Array;
  createRevision: number | { toNumber(): number };
  modRevision: number | { toNumber(): number };
  version: number | { toNumber(): number };
  value: Uint8Array;
  lease: number | { toString(): string };
}

const n = (v: number | { toNumber(): number }) => (typeof v === 'number' ? v : v.toNumber());

/**
 * A stored KeyValue, checked and canonical. The fast path is kvs's own codec (keyvalue.ts)
 * with a round trip; a record that does not round-trip (unknown fields, non-minimal varints,
 * damage) is decoded by protobufjs from etcd's kv.proto, which refuses malformed bytes.
 */
let scratch = Buffer.alloc(4096);

/** Whether `value` is exactly the encoding of `kv` (encoded into a scratch buffer: no garbage per record). */
function roundTrips(kv: KeyValue, value: Buffer): boolean {
  const size = keyValueSize(kv);
  if (size !== value.length) return false;
  if (scratch.length < size) scratch = Buffer.alloc(Math.max(size, 2 * scratch.length));
  writeKeyValue(kv, scratch);
  return scratch.subarray(0, size).equals(value);
}

function canonicalKeyValue(value: Buffer, where: string): { kv: KeyValue; bytes: Buffer } {
  let kv: KeyValue | undefined;
  try {
    kv = decodeKeyValue(value);
    if (roundTrips(kv, value)) return { kv, bytes: value };
  } catch {
    // decoded again below, for the message
  }
  let m: PbKeyValue;
  try {
    m = decode<PbKeyValue>('mvccpb.KeyValue', value);
  } catch (err) {
    throw new EtcdSnapshotError(`${where}: the mvccpb.KeyValue record does not decode (${(err as Error).message})`);
  }
  kv = {
    key: m.key,
    createRevision: n(m.createRevision),
    modRevision: n(m.modRevision),
    version: n(m.version),
    value: m.value ?? EMPTY,
    lease: BigInt(m.lease.toString()),
  };
  for (const f of ['createRevision', 'modRevision', 'version'] as const) {
    if (!Number.isSafeInteger(kv[f]) || kv[f] < 0) throw new EtcdSnapshotError(`${where}: the record's ${f} ${kv[f]} is out of range`);
  }
  return { kv, bytes: encodeKeyValue(kv) };
}

const TWO_32 = 2 ** 32;

/** decodeRevisionKey of buf[start, end), without a copy; the 8-byte halves read as two 32-bit words. */
function revisionAt(buf: Buffer, start: number, end: number): EtcdRevision | string {
  const n = end - start;
  if ((n !== REVISION_KEY_BYTES && n !== REVISION_KEY_BYTES + 1) || buf[start + 8] !== 0x5f || (n === REVISION_KEY_BYTES + 1 && buf[start + 17] !== 0x74)) {
    return decodeRevisionKey(buf.subarray(start, end)) as string;
  }
  const mainHi = buf.readUInt32BE(start);
  const subHi = buf.readUInt32BE(start + 9);
  // Above 2^53 (or negative, as etcd's int64) is refused by decodeRevisionKey's message.
  if (mainHi >= 0x200000 || subHi >= 0x200000) return decodeRevisionKey(buf.subarray(start, end));
  return { main: mainHi * TWO_32 + buf.readUInt32BE(start + 4), sub: subHi * TWO_32 + buf.readUInt32BE(start + 13), tombstone: n === REVISION_KEY_BYTES + 1 };
}

/** One record of the key bucket, checked. */
function change(r: EtcdRevision, value: Buffer): EtcdChange {
  const where = `key bucket, revision ${r.main}_${r.sub}${r.tombstone ? ' (deletion)' : ''}`;
  const { kv, bytes } = canonicalKeyValue(value, where);
  if (kv.key.length === 0) throw new EtcdSnapshotError(`${where}: the record has no key`);
  if (r.tombstone) {
    const key = Buffer.from(kv.key);
    return { main: r.main, sub: r.sub, tombstone: true, key, kv: encodeKeyValue({ key, createRevision: 0, modRevision: 0, version: 0, value: EMPTY, lease: 0n }), lease: 0n };
  }
  if (kv.modRevision !== r.main) throw new EtcdSnapshotError(`${where}: the record's mod_revision is ${kv.modRevision}`);
  if (!(kv.version >= 1)) throw new EtcdSnapshotError(`${where}: the record's version is ${kv.version}`);
  if (!(kv.createRevision >= 1 && kv.createRevision <= r.main)) throw new EtcdSnapshotError(`${where}: the record's create_revision is ${kv.createRevision}`);
  return { main: r.main, sub: r.sub, tombstone: false, key: asBuffer(kv.key), kv: bytes, lease: kv.lease };
}

export class EtcdSnapshot {
  private readonly buckets: Map<string, Bucket>;

  constructor(src: PageSource) {
    try {
      this.buckets = openBolt(src).root().buckets();
    } catch (err) {
      throw err instanceof BoltError ? new EtcdSnapshotError(`not a readable etcd snapshot: ${err.message}`) : err;
    }
    if (!this.buckets.has(BUCKET.key) || !this.buckets.has(BUCKET.meta)) {
      const names = [...this.buckets.keys()].map((b) => JSON.stringify(b)).join(', ') || 'none';
      throw new EtcdSnapshotError(`not an etcd snapshot: a bbolt database without etcd's "key" and "meta" buckets (its buckets: ${names})`);
    }
  }

  /** Buckets that are neither read nor known to be left behind (e.g. a newer etcd's). */
  unknownBuckets(): string[] {
    return [...this.buckets.keys()].filter((b) => !KNOWN_BUCKETS.has(b));
  }

  private bucket(name: string): Bucket | undefined {
    return this.buckets.get(name);
  }

  /** Runs `fn`, turning the reader's structural errors into EtcdSnapshotErrors. */
  private guard<T>(fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw err instanceof BoltError ? new EtcdSnapshotError(`the snapshot is damaged: ${err.message}`) : err;
    }
  }

  compaction(): EtcdCompaction {
    return this.guard(() => {
      const meta = this.bucket(BUCKET.meta)!;
      const rev = (name: string): number => {
        const v = meta.get(Buffer.from(name));
        if (v === undefined) return -1;
        const r = decodeRevisionKey(v);
        if (typeof r === 'string') throw new EtcdSnapshotError(`meta/${name} is not a revision: ${r}`);
        return r.main;
      };
      return { finished: rev(META_KEY.finishedCompactRev), scheduled: rev(META_KEY.scheduledCompactRev) };
    });
  }

  /** Every stored change in revision order (the `key` bucket), each checked, a leaf page's worth at a time. */
  *changes(): Generator<EtcdChange[]> {
    const leaves = this.bucket(BUCKET.key)!.leaves();
    let last = -1;
    let lastSub = -1;
    for (;;) {
      const next = this.guard(() => leaves.next());
      if (next.done) return;
      const { buf, count, at, bucket } = next.value;
      const out: EtcdChange[] = new Array(count);
      for (let i = 0; i < count; i++) {
        const kStart = at[3 * i]!;
        const kEnd = at[3 * i + 1]!;
        // The revision key read in place (an object and a copy per record would add up).
        const r = revisionAt(buf, kStart, kEnd);
        if (typeof r === 'string') throw new EtcdSnapshotError(`key bucket: ${r} (key ${buf.toString('hex', kStart, kEnd)})`);
        if (bucket[i]) throw new EtcdSnapshotError(`key bucket, revision ${r.main}_${r.sub}: a bucket where a record was expected`);
        if (r.main < 1 || r.main > MAX_MAIN || r.sub > MAX_SUB) throw new EtcdSnapshotError(`key bucket, revision ${r.main}_${r.sub}: the revision is out of the range kvs stores`);
        if (r.main === last && r.sub === lastSub) throw new EtcdSnapshotError(`key bucket, revision ${r.main}_${r.sub}: the revision is stored twice`);
        last = r.main;
        lastSub = r.sub;
        out[i] = change(r, buf.subarray(kEnd, at[3 * i + 2]));
      }
      yield out;
    }
  }

  leases(): EtcdLease[] {
    return this.guard(() => {
      const b = this.bucket(BUCKET.lease);
      if (!b) return [];
      const out: EtcdLease[] = [];
      for (const { key, value } of b.pairs()) {
        if (key.length !== 8) throw new EtcdSnapshotError(`lease bucket: a key of ${key.length} bytes (lease ids are 8)`);
        const id = key.readBigInt64BE(0);
        let m: { ID: { toString(): string } | number; TTL: { toString(): string } | number; RemainingTTL: { toString(): string } | number };
        try {
          m = decode('leasepb.Lease', value);
        } catch (err) {
          throw new EtcdSnapshotError(`lease ${id}: the leasepb.Lease record does not decode (${(err as Error).message})`);
        }
        if (BigInt(m.ID.toString()) !== id) throw new EtcdSnapshotError(`lease ${id}: its record says it is lease ${m.ID}`);
        const ttl = Number(m.TTL.toString());
        const remainingTTL = Number(m.RemainingTTL.toString());
        if (!Number.isSafeInteger(ttl) || !Number.isSafeInteger(remainingTTL)) throw new EtcdSnapshotError(`lease ${id}: TTL ${m.TTL} is out of range`);
        out.push({ id, ttl, remainingTTL });
      }
      return out;
    });
  }

  auth(): EtcdAuth {
    return this.guard(() => {
      const auth = this.bucket(BUCKET.auth);
      const enabledRaw = auth?.get(Buffer.from(AUTH_KEY.enabled));
      const revisionRaw = auth?.get(Buffer.from(AUTH_KEY.revision));
      if (revisionRaw !== undefined && revisionRaw.length !== 8) throw new EtcdSnapshotError(`auth/authRevision is ${revisionRaw.length} bytes, not 8`);
      const records = <T>(name: string, what: string, dec: (b: Uint8Array) => T & { name: Buffer }): T[] => {
        const b = this.bucket(name);
        if (!b) return [];
        const out: T[] = [];
        for (const { key, value } of b.pairs()) {
          let rec: T & { name: Buffer };
          try {
            rec = dec(value);
          } catch (err) {
            throw new EtcdSnapshotError(`${name}/${key.toString('utf8')}: the ${what} record does not decode (${(err as Error).message})`);
          }
          if (!rec.name.equals(key)) throw new EtcdSnapshotError(`${name}/${key.toString('utf8')}: the record names ${JSON.stringify(rec.name.toString('utf8'))}`);
          out.push(rec);
        }
        return out;
      };
      return {
        enabled: enabledRaw !== undefined && enabledRaw.length === 1 && enabledRaw[0] === 1,
        revision: revisionRaw === undefined ? 1 : Math.max(1, Number(revisionRaw.readBigUInt64BE(0))),
        users: records(BUCKET.authUsers, 'authpb.User', decodeUser),
        roles: records(BUCKET.authRoles, 'authpb.Role', decodeRole),
      };
    });
  }
}
