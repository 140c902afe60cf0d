// Test and bench fixtures in etcd's snapshot format, without an etcd: a minimal bbolt writer
// (the page layout shared/bbolt/read.ts documents) and an etcd-schema database on top of it.
// A real etcd loads a million keys in minutes; this writes them in seconds, for the import
// bench (bench/etcd-import.ts), the reader's unit tests and the fuzzer's seeds. Pages are written in
// order: leaves of each bucket, then its branch levels, then the root bucket's leaf, then the
// two meta pages at the front. Buckets whose entries fit in a quarter page are inline, as
// bbolt stores small buckets. Not a general writer: no free pages, every page full.
import fs from 'node:fs';
import { fnv64a, BOLT_MAGIC, BOLT_VERSION } from '../shared/bbolt/read.js';
import { encodeKeyValue } from '../shared/mvcc/keyvalue.js';
import { encode } from '../shared/proto/index.js';
import { encodeRole, encodeUser, type Role, type User } from '../shared/auth/tables.js';
import { AUTH_KEY, BUCKET, META_KEY, encodeRevisionKey, encodeUint64 } from '../shared/etcd-snapshot/schema.js';

const HEADER = 16;
const ELEMENT = 16;

export interface BoltBucketSpec {
  name: string;
  /** Key/value pairs in strictly ascending key order (a generator for large buckets). */
  entries: Iterable<[Buffer, Buffer]>;
}

/** Where pages go: `write(bytes, offset)`; pages are written once, meta pages last. */
export interface PageSink {
  write(bytes: Buffer, offset: number): void;
}

export function fileSink(fd: number): PageSink {
  return { write: (bytes, offset) => void fs.writeSync(fd, bytes, 0, bytes.length, offset) };
}

export function bufferSink(): PageSink & { buffer(): Buffer } {
  const parts: { bytes: Buffer; offset: number }[] = [];
  return {
    write: (bytes, offset) => void parts.push({ bytes: Buffer.from(bytes), offset }),
    buffer() {
      const size = Math.max(...parts.map((p) => p.offset + p.bytes.length));
      const out = Buffer.alloc(size);
      for (const p of parts) p.bytes.copy(out, p.offset);
      return out;
    },
  };
}

/** A zeroed page (or run of pages) for `count` elements and `data` bytes of keys and values, its header written. */
function newPage(id: number, flags: number, count: number, data: number, pageSize: number): Buffer {
  const span = Math.ceil((HEADER + count * ELEMENT + data) / pageSize);
  const p = Buffer.alloc(span * pageSize);
  p.writeBigUInt64LE(BigInt(id), 0);
  p.writeUInt16LE(flags, 8);
  p.writeUInt16LE(count, 10);
  p.writeUInt32LE(span - 1, 12);
  return p;
}

function leafPage(id: number, items: [Buffer, Buffer, number][], pageSize: number): Buffer {
  const p = newPage(id, 0x02, items.length, items.reduce((n, [k, v]) => n + k.length + v.length, 0), pageSize);
  let at = HEADER + items.length * ELEMENT;
  items.forEach(([k, v, flags], i) => {
    const el = HEADER + i * ELEMENT;
    p.writeUInt32LE(flags, el);
    p.writeUInt32LE(at - el, el + 4);
    p.writeUInt32LE(k.length, el + 8);
    p.writeUInt32LE(v.length, el + 12);
    k.copy(p, at);
    v.copy(p, at + k.length);
    at += k.length + v.length;
  });
  return p;
}

function branchPage(id: number, children: [Buffer, number][], pageSize: number): Buffer {
  const p = newPage(id, 0x01, children.length, children.reduce((n, [k]) => n + k.length, 0), pageSize);
  let at = HEADER + children.length * ELEMENT;
  children.forEach(([k, child], i) => {
    const el = HEADER + i * ELEMENT;
    p.writeUInt32LE(at - el, el);
    p.writeUInt32LE(k.length, el + 4);
    p.writeBigUInt64LE(BigInt(child), el + 8);
    k.copy(p, at);
    at += k.length;
  });
  return p;
}

class PageWriter {
  next = 3; // 0 and 1: meta; 2: the (empty) freelist
  constructor(readonly sink: PageSink, readonly pageSize: number) {}
  put(make: (id: number) => Buffer): number {
    const id = this.next;
    const page = make(id);
    this.sink.write(page, id * this.pageSize);
    this.next += page.length / this.pageSize;
    return id;
  }
}

/** Groups items into pages of at most a page's bytes (one item alone may overflow). */
function* pages<T>(items: Iterable<T>, size: (item: T) => number, pageSize: number): Generator<T[]> {
  let group: T[] = [];
  let used = HEADER;
  for (const item of items) {
    const n = ELEMENT + size(item);
    if (group.length > 0 && used + n > pageSize) {
      yield group;
      group = [];
      used = HEADER;
    }
    group.push(item);
    used += n;
  }
  if (group.length) yield group;
}

/** Writes a bucket's tree and returns its root page. */
function writeTree(w: PageWriter, entries: Iterable<[Buffer, Buffer, number]>): number {
  let level: [Buffer, number][] = [];
  for (const group of pages(entries, ([k, v]) => k.length + v.length, w.pageSize)) {
    level.push([Buffer.from(group[0]![0]), w.put((id) => leafPage(id, group, w.pageSize))]);
  }
  if (level.length === 0) return w.put((id) => leafPage(id, [], w.pageSize));
  while (level.length > 1) {
    const up: [Buffer, number][] = [];
    for (const group of pages(level, ([k]) => k.length, w.pageSize)) up.push([group[0]![0], w.put((id) => branchPage(id, group, w.pageSize))]);
    level = up;
  }
  return level[0]![1];
}

/** The bytes of a bucket's value in its parent: header, and the page itself when inline. */
function bucketValue(w: PageWriter, entries: [Buffer, Buffer][]): Buffer {
  const items = entries.map(([k, v]) => [k, v, 0] as [Buffer, Buffer, number]);
  const size = HEADER + items.reduce((n, [k, v]) => n + ELEMENT + k.length + v.length, 0);
  if (size <= w.pageSize / 4) {
    const page = leafPage(0, items, w.pageSize).subarray(0, size);
    return Buffer.concat([Buffer.alloc(16), page]);
  }
  const root = writeTree(w, items);
  const b = Buffer.alloc(16);
  b.writeBigUInt64LE(BigInt(root), 0);
  return b;
}

function metaPage(id: number, pageSize: number, root: number, pageCount: number, txid: number): Buffer {
  const p = Buffer.alloc(pageSize);
  p.writeBigUInt64LE(BigInt(id), 0);
  p.writeUInt16LE(0x04, 8);
  const m = p.subarray(HEADER);
  m.writeUInt32LE(BOLT_MAGIC, 0);
  m.writeUInt32LE(BOLT_VERSION, 4);
  m.writeUInt32LE(pageSize, 8);
  m.writeBigUInt64LE(BigInt(root), 16);
  m.writeBigUInt64LE(2n, 32);
  m.writeBigUInt64LE(BigInt(pageCount), 40);
  m.writeBigUInt64LE(BigInt(txid), 48);
  m.writeBigUInt64LE(fnv64a(m.subarray(0, 56)), 56);
  return p;
}

/** Writes a bbolt database of the given top-level buckets (any order); returns its size in bytes. */
export function writeBolt(sink: PageSink, buckets: BoltBucketSpec[], pageSize = 4096): number {
  const w = new PageWriter(sink, pageSize);
  const free = Buffer.alloc(pageSize);
  free.writeBigUInt64LE(2n, 0);
  free.writeUInt16LE(0x10, 8);
  sink.write(free, 2 * pageSize);
  const sorted = [...buckets].sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
  const top: [Buffer, Buffer, number][] = [];
  for (const b of sorted) {
    const entries = Array.isArray(b.entries) ? (b.entries as [Buffer, Buffer][]) : undefined;
    const value = entries ? bucketValue(w, entries) : (() => {
      const v = Buffer.alloc(16);
      v.writeBigUInt64LE(BigInt(writeTree(w, (function* () {
        for (const [k, val] of b.entries) yield [k, val, 0] as [Buffer, Buffer, number];
      })())), 0);
      return v;
    })();
    top.push([Buffer.from(b.name), value, 1]);
  }
  const root = writeTree(w, top);
  sink.write(metaPage(0, pageSize, root, w.next, 1), 0);
  sink.write(metaPage(1, pageSize, root, w.next, 2), pageSize);
  return w.next * pageSize;
}

export interface EtcdFixture {
  keys: number;
  /** Puts per key, in rounds: every key once, then every key again, ... */
  revisions: number;
  valueBytes: number;
  /** Compact to this revision (its physical compaction done: older versions left out). */
  compact?: number;
  /**
   * With `compact`: the compaction was interrupted, finished only up to this revision (etcd
   * stores both in meta): versions superseded in (this, compact] are still there.
   */
  compactFinished?: number;
  leases?: { id: bigint; ttl: number }[];
  users?: User[];
  roles?: Role[];
  authEnabled?: boolean;
  /** More buckets (e.g. a newer etcd's). */
  extraBuckets?: BoltBucketSpec[];
  /** More meta bucket pairs (e.g. etcd 3.5's term and confState). */
  extraMeta?: [Buffer, Buffer][];
  key?: (i: number) => Buffer;
  value?: (i: number, round: number) => Buffer;
}

/** The revision of key i's put in round r (the first put of all is revision 2, as on etcd). */
export function fixtureRevision(f: Pick<EtcdFixture, 'keys'>, i: number, round: number): number {
  return 2 + round * f.keys + i;
}

/** An etcd snapshot database (no SHA-256 trailer) of `f`; returns its size. */
export function writeEtcdFixture(sink: PageSink, f: EtcdFixture): number {
  const key = f.key ?? ((i: number) => Buffer.from(`key/${String(i).padStart(8, '0')}`));
  const value = f.value ?? ((i: number, r: number) => Buffer.alloc(f.valueBytes, (i + r) % 251));
  const compact = f.compact ?? 0;
  const removedThrough = f.compactFinished ?? compact;
  const changes = function* (): Generator<[Buffer, Buffer]> {
    for (let r = 0; r < f.revisions; r++) {
      for (let i = 0; i < f.keys; i++) {
        const main = fixtureRevision(f, i, r);
        // Compacted away: an older version superseded at or below the compact revision.
        if (r + 1 < f.revisions && fixtureRevision(f, i, r + 1) <= removedThrough) continue;
        const kv = encodeKeyValue({ key: key(i), createRevision: fixtureRevision(f, i, 0), modRevision: main, version: r + 1, value: value(i, r), lease: 0n });
        yield [encodeRevisionKey(main, 0), kv];
      }
    }
  };
  const meta: [Buffer, Buffer][] = [[Buffer.from(META_KEY.consistentIndex), encodeUint64(f.keys * f.revisions + 10)], ...(f.extraMeta ?? [])];
  if (compact) {
    meta.push([Buffer.from(META_KEY.finishedCompactRev), encodeRevisionKey(removedThrough, 0)]);
    meta.push([Buffer.from(META_KEY.scheduledCompactRev), encodeRevisionKey(compact, 0)]);
  }
  meta.sort((a, b) => Buffer.compare(a[0], b[0]));
  const leases = (f.leases ?? []).map((l) => {
    const k = Buffer.alloc(8);
    k.writeBigInt64BE(l.id);
    return [k, encode('leasepb.Lease', { ID: l.id.toString(), TTL: l.ttl })] as [Buffer, Buffer];
  });
  const byName = (a: [Buffer, Buffer], b: [Buffer, Buffer]) => Buffer.compare(a[0], b[0]);
  return writeBolt(sink, [
    { name: BUCKET.key, entries: changes() },
    { name: BUCKET.meta, entries: meta },
    { name: BUCKET.lease, entries: leases.sort(byName) },
    {
      name: BUCKET.auth,
      entries: [
        [Buffer.from(AUTH_KEY.enabled), Buffer.from([f.authEnabled ? 1 : 0])],
        [Buffer.from(AUTH_KEY.revision), encodeUint64(1)],
      ],
    },
    { name: BUCKET.authUsers, entries: (f.users ?? []).map((u) => [u.name, encodeUser(u)] as [Buffer, Buffer]).sort(byName) },
    { name: BUCKET.authRoles, entries: (f.roles ?? []).map((r) => [r.name, encodeRole(r)] as [Buffer, Buffer]).sort(byName) },
    { name: BUCKET.members, entries: [] },
    { name: BUCKET.cluster, entries: [[Buffer.from('clusterVersion'), Buffer.from('3.4.0')]] },
    ...(f.extraBuckets ?? []),
  ]);
}

