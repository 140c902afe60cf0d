// A writer of bbolt database files (the format of etcd's backend and of its snapshots), built
// bottom-up from sorted contents: no general B+tree, no updates. Pure: the pages go to a sink
// the caller writes (in increasing page order, data pages first, the two meta pages last),
// and memory stays at a few pages per tree level however large the buckets are.
//
// The meta pages name the root page and the page count, so they can only be written first
// when the layout is known in advance: a dry run (`dryRun`) over the same contents computes it
// without producing pages (the layout depends only on the sizes of keys and values), and a
// writer given that `layout` writes the meta pages and the free list first, so the file is
// produced front to back and can be read (streamed) while it is written.
//
// The layout (bbolt's page.go, db.go, bucket.go; little-endian as on amd64 and arm64):
//   page       id u64, flags u16, count u16, overflow u32 (16 bytes), then its elements;
//              a page longer than pageSize takes `overflow` more pages after it
//   leaf       elements of flags u32, pos u32, ksize u32, vsize u32; `pos` counts from the
//              element's own start to its key, the value follows the key
//   branch     elements of pos u32, ksize u32, pgid u64: the first key of each child
//   bucket     a leaf element with flag 1 whose value is root pgid u64, sequence u64, and
//              for an inline bucket (root 0) its one leaf page right after
//   meta       pages 0 and 1: magic, version 2, page size, flags, root bucket, freelist
//              pgid, page count (high-water mark), txid, FNV-64a of the fields before it;
//              bbolt opens the valid one with the higher txid
//   freelist   page 2 here, empty: every page below the high-water mark is in use

export const MAGIC = 0xed0cdaed;
export const VERSION = 2;
export const DEFAULT_PAGE_SIZE = 4096;
export const PAGE_HEADER_BYTES = 16;
export const ELEMENT_BYTES = 16;
export const BUCKET_HEADER_BYTES = 16;
export const META_BYTES = 64;

export const PageFlag = { branch: 0x01, leaf: 0x02, meta: 0x04, freelist: 0x10 } as const;
export const BUCKET_LEAF_FLAG = 0x01;

/** Receives `bytes` (whole pages) to be stored from page `pgid` on; the view is reused after the call returns. */
export type PageSink = (pgid: number, bytes: Buffer) => void;

/** An error in what the caller asked to write (unsorted keys, an oversized element). */
export class BoltWriteError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BoltWriteError';
  }
}

const FREELIST_PGID = 2;
const EMPTY = new Uint8Array(0);
const FIRST_DATA_PGID = 3;
/** bbolt's limits (MaxKeySize, MaxValueSize). */
export const MAX_KEY_BYTES = 32768;
export const MAX_VALUE_BYTES = 2 ** 31 - 2;

/** FNV-1a, 64-bit, of `b` (bbolt's meta checksum). */
export function fnv64a(b: Uint8Array): bigint {
  let lo = 0x84222325;
  let hi = 0xcbf29ce4;
  for (let i = 0; i < b.length; i++) {
    lo ^= b[i]!;
    // times the FNV prime 0x100000001b3, in 16-bit limbs to stay exact
    const l0 = lo & 0xffff, l1 = lo >>> 16, h0 = hi & 0xffff, h1 = hi >>> 16;
    const p0 = l0 * 0x1b3;
    const p1 = l1 * 0x1b3 + (p0 >>> 16);
    const p2 = h0 * 0x1b3 + (p1 >>> 16) + l0 * 0x100;
    const p3 = h1 * 0x1b3 + (p2 >>> 16) + l1 * 0x100;
    lo = ((p1 & 0xffff) << 16 | (p0 & 0xffff)) >>> 0;
    hi = ((p3 & 0xffff) << 16 | (p2 & 0xffff)) >>> 0;
  }
  return (BigInt(hi) << 32n) | BigInt(lo);
}

/** The meta page for transaction `txid` (bbolt puts it on page txid % 2). */
export function metaPage(pageSize: number, root: number, pgidCount: number, txid: number): Buffer {
  const p = Buffer.alloc(pageSize);
  p.writeBigUInt64LE(BigInt(txid % 2), 0);
  p.writeUInt16LE(PageFlag.meta, 8);
  const m = PAGE_HEADER_BYTES;
  p.writeUInt32LE(MAGIC, m);
  p.writeUInt32LE(VERSION, m + 4);
  p.writeUInt32LE(pageSize, m + 8);
  p.writeUInt32LE(0, m + 12);
  p.writeBigUInt64LE(BigInt(root), m + 16);
  p.writeBigUInt64LE(0n, m + 24);
  p.writeBigUInt64LE(BigInt(FREELIST_PGID), m + 32);
  p.writeBigUInt64LE(BigInt(pgidCount), m + 40);
  p.writeBigUInt64LE(BigInt(txid), m + 48);
  p.writeBigUInt64LE(fnv64a(p.subarray(m, m + 56)), m + 56);
  return p;
}

/** The first three pages: both metas (the newer one at txid % 2) and the empty free list. */
function headPages(pageSize: number, root: number, pages: number, txidOption: number | undefined): Buffer {
  const txid = Math.max(1, txidOption ?? 1);
  const older = metaPage(pageSize, root, pages, txid - 1);
  const newer = metaPage(pageSize, root, pages, txid);
  const freelist = Buffer.alloc(pageSize);
  writePageHeader(freelist, FREELIST_PGID, PageFlag.freelist, 0, 0);
  return Buffer.concat(txid % 2 === 1 ? [older, newer, freelist] : [newer, older, freelist]);
}

/** Buffers whole pages and hands them to the sink in large contiguous runs (none in a dry run). */
class PageOut {
  next = FIRST_DATA_PGID;
  private buf: Buffer;
  private used = 0;
  private first = FIRST_DATA_PGID;

  constructor(private readonly sink: PageSink, private readonly pageSize: number, chunkBytes: number, readonly dry: boolean) {
    this.buf = Buffer.allocUnsafe(dry ? 0 : Math.max(chunkBytes, pageSize));
  }

  /** Room for a page of `bytes` at the next pgid: returns [pgid, the page's bytes (zeroed; none in a dry run)]. */
  reserve(bytes: number): { pgid: number; page: Buffer | undefined; pages: number } {
    const pages = Math.ceil(bytes / this.pageSize);
    if (this.dry) {
      const pgid = this.next;
      this.next += pages;
      return { pgid, page: undefined, pages };
    }
    const len = pages * this.pageSize;
    if (this.used + len > this.buf.length) {
      this.flush();
      if (len > this.buf.length) this.buf = Buffer.allocUnsafe(len);
    }
    const page = this.buf.subarray(this.used, this.used + len);
    page.fill(0, bytes);
    this.used += len;
    const pgid = this.next;
    this.next += pages;
    return { pgid, page, pages };
  }

  /** A copy of a dry run's position (a dry run holds no pages). */
  forkDry(): PageOut {
    if (!this.dry) throw new BoltWriteError('only a dry run can be forked');
    const copy = new PageOut(this.sink, this.pageSize, 0, true);
    copy.next = this.next;
    return copy;
  }

  flush(): void {
    if (this.used === 0) return;
    this.sink(this.first, this.buf.subarray(0, this.used));
    this.first = this.next;
    this.used = 0;
  }
}

function writePageHeader(page: Buffer, pgid: number, flags: number, count: number, overflow: number): void {
  page.writeUInt32LE(pgid >>> 0, 0);
  page.writeUInt32LE(Math.floor(pgid / 2 ** 32), 4);
  page.writeUInt16LE(flags, 8);
  page.writeUInt16LE(count, 10);
  page.writeUInt32LE(overflow, 12);
}

/**
 * Whether `key` sorts after prev[0 .. prevLength) in byte order. A loop rather than
 * Buffer.compare: this runs once per entry, and for short keys the native call's checks cost
 * more than the comparison.
 */
function ascends(prev: Uint8Array, prevLength: number, key: Uint8Array): boolean {
  const n = Math.min(prevLength, key.length);
  for (let i = 0; i < n; i++) {
    const d = key[i]! - prev[i]!;
    if (d !== 0) return d > 0;
  }
  return key.length > prevLength;
}

/** Keys, sizes and data of the elements of one page being filled (sizes only in a dry run). */
class PendingPage {
  count = 0;
  /** Bytes of the page so far: header, elements, data. */
  size = PAGE_HEADER_BYTES;
  ksizes: number[] = [];
  vsizes: number[] = [];
  flags: number[] = [];
  pgids: number[] = [];
  data: Buffer;
  dataLen = 0;
  firstKey: Buffer | undefined;

  constructor(private readonly dry: boolean) {
    this.data = Buffer.allocUnsafe(dry ? 0 : 8192);
  }

  /** A copy of a dry run's page (sizes and the first key only). */
  cloneDry(): PendingPage {
    const c = new PendingPage(true);
    c.count = this.count;
    c.size = this.size;
    c.ksizes = [...this.ksizes];
    c.vsizes = [...this.vsizes];
    c.flags = [...this.flags];
    c.pgids = [...this.pgids];
    c.firstKey = this.firstKey;
    return c;
  }

  add(key: Uint8Array, value: Uint8Array | undefined, flags: number, pgid: number, vlen = value ? value.length : 0): void {
    if (this.count === 0) this.firstKey = Buffer.from(key);
    // A dry run keeps only what shapes the layout: the sizes and the first key (its length is
    // a branch element's size).
    if (!this.dry) this.copyIn(key, value, vlen);
    this.ksizes.push(key.length);
    this.vsizes.push(vlen);
    this.flags.push(flags);
    this.pgids.push(pgid);
    this.count++;
    this.size += ELEMENT_BYTES + key.length + vlen;
  }

  private copyIn(key: Uint8Array, value: Uint8Array | undefined, vlen: number): void {
    const need = this.dataLen + key.length + vlen;
    if (need > this.data.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, this.data.length * 2));
      this.data.copy(grown, 0, 0, this.dataLen);
      this.data = grown;
    }
    this.data.set(key, this.dataLen);
    this.dataLen += key.length;
    if (value) {
      // A view of exactly vlen bytes: lmdb-js's shared buffer has a `length` of its own that
      // is not its typed-array length, so neither set(value) nor copy() may be given it whole.
      this.data.set(vlen === 0 ? EMPTY : new Uint8Array(value.buffer, value.byteOffset, vlen), this.dataLen);
      this.dataLen += vlen;
    }
  }

  clear(): void {
    this.count = 0;
    this.size = PAGE_HEADER_BYTES;
    this.ksizes.length = this.vsizes.length = this.flags.length = this.pgids.length = 0;
    this.dataLen = 0;
    this.firstKey = undefined;
  }

  /** The page's bytes into `page` (at least `size` long), as a leaf or a branch. */
  serialize(page: Buffer, pgid: number, leaf: boolean, overflow: number): void {
    if (this.count > 0xffff) throw new BoltWriteError(`a page holds at most 65535 elements, not ${this.count}`);
    writePageHeader(page, pgid, leaf ? PageFlag.leaf : PageFlag.branch, this.count, overflow);
    let el = PAGE_HEADER_BYTES;
    let pos = PAGE_HEADER_BYTES + this.count * ELEMENT_BYTES;
    for (let i = 0; i < this.count; i++, el += ELEMENT_BYTES) {
      const k = this.ksizes[i]!;
      const v = this.vsizes[i]!;
      if (leaf) {
        page.writeUInt32LE(this.flags[i]!, el);
        page.writeUInt32LE(pos - el, el + 4);
        page.writeUInt32LE(k, el + 8);
        page.writeUInt32LE(v, el + 12);
      } else {
        const child = this.pgids[i]!;
        page.writeUInt32LE(pos - el, el);
        page.writeUInt32LE(k, el + 4);
        page.writeUInt32LE(child >>> 0, el + 8);
        page.writeUInt32LE(Math.floor(child / 2 ** 32), el + 12);
      }
      pos += k + v;
    }
    this.data.copy(page, PAGE_HEADER_BYTES + this.count * ELEMENT_BYTES, 0, this.dataLen);
  }
}

/** One bucket's tree, filled in key order: a pending leaf and a pending page per branch level. */
class TreeBuilder {
  private leaf: PendingPage;
  private levels: PendingPage[] = [];
  /** Pages written per level (0: leaves). */
  private written: number[] = [0];
  /** The previous key (its first `lastLength` bytes), kept in one buffer: no allocation per entry. */
  private last = Buffer.allocUnsafe(256);
  private lastLength = -1;

  constructor(private readonly out: PageOut, private readonly pageSize: number, private readonly what: string) {
    this.leaf = new PendingPage(out.dry);
  }

  /** A copy of a dry run's tree, going on from here into `out`. */
  forkDry(out: PageOut): TreeBuilder {
    const t = new TreeBuilder(out, this.pageSize, this.what);
    t.leaf = this.leaf.cloneDry();
    t.levels = this.levels.map((p) => p.cloneDry());
    t.written = [...this.written];
    t.last = Buffer.from(this.last);
    t.lastLength = this.lastLength;
    return t;
  }

  /** `value`'s first `valueLength` bytes (all by default) under `key`, after every key put before. */
  put(key: Uint8Array, value: Uint8Array, flags = 0, valueLength = value.length): void {
    if (key.length === 0) throw new BoltWriteError(`${this.what}: an empty key`);
    if (key.length > MAX_KEY_BYTES) throw new BoltWriteError(`${this.what}: a key of ${key.length} bytes (bbolt's limit is ${MAX_KEY_BYTES})`);
    if (valueLength > MAX_VALUE_BYTES) throw new BoltWriteError(`${this.what}: a value of ${valueLength} bytes (bbolt's limit is ${MAX_VALUE_BYTES})`);
    if (this.lastLength >= 0 && !ascends(this.last, this.lastLength, key)) {
      const prev = this.last.toString('hex', 0, this.lastLength);
      throw new BoltWriteError(`${this.what}: keys out of order (${Buffer.from(key).toString('hex')} after ${prev})`);
    }
    if (key.length > this.last.length) this.last = Buffer.allocUnsafe(Math.max(key.length, this.last.length * 2));
    this.last.set(key, 0);
    this.lastLength = key.length;
    if (this.leaf.count > 0 && this.leaf.size + ELEMENT_BYTES + key.length + valueLength > this.pageSize) this.flushLeaf();
    this.leaf.add(key, value, flags, 0, valueLength);
  }

  private flushLeaf(): void {
    const { pgid, page, pages } = this.out.reserve(this.leaf.size);
    if (page) this.leaf.serialize(page, pgid, true, pages - 1);
    this.written[0]!++;
    this.addChild(0, this.leaf.firstKey!, pgid);
    this.leaf.clear();
  }

  /** A page of level `level` was written: its first key goes to the level above. */
  private addChild(level: number, key: Buffer, pgid: number): void {
    let parent = this.levels[level];
    if (!parent) {
      parent = this.levels[level] = new PendingPage(this.out.dry);
      this.written[level + 1] = 0;
    }
    if (parent.count > 0 && parent.size + ELEMENT_BYTES + key.length > this.pageSize) this.flushBranch(level);
    parent.add(key, undefined, 0, pgid);
  }

  private flushBranch(level: number): void {
    const p = this.levels[level]!;
    const { pgid, page, pages } = this.out.reserve(p.size);
    if (page) p.serialize(page, pgid, false, pages - 1);
    this.written[level + 1]!++;
    const first = p.firstKey!;
    p.clear();
    this.addChild(level + 1, first, pgid);
  }

  /** The bytes of the bucket's one leaf page if it is small enough to be inline (bbolt's rule), else undefined. */
  inlinePage(): Buffer | undefined {
    if (this.written[0]! > 0 || this.leaf.size > this.pageSize / 4) return undefined;
    const page = Buffer.alloc(this.leaf.size);
    this.leaf.serialize(page, 0, true, 0);
    return page;
  }

  /** Writes what is pending; returns the root page. */
  finish(): number {
    if (this.leaf.count > 0 || this.written[0] === 0) this.flushLeaf();
    for (let level = 0; ; level++) {
      const p = this.levels[level]!;
      // The level above has one child and nothing written: that child is the root.
      if (this.written[level + 1] === 0 && p.count === 1) return p.pgids[0]!;
      this.flushBranch(level);
    }
  }
}

/** Puts `key` with the first `valueLength` bytes of `value` (all of it by default). */
export type PutEntry = (key: Uint8Array, value: Uint8Array, valueLength?: number) => void;
export type BucketEntries = Iterable<readonly [Uint8Array, Uint8Array]> | ((put: PutEntry) => void);

/** Where a file's tree starts and how many pages it has: what its meta pages name. */
export interface BoltLayout {
  /** The root bucket's page. */
  root: number;
  /** The page count (the file is pages * pageSize bytes). */
  pages: number;
}

export interface BoltWriterOptions {
  pageSize?: number;
  /** How many bytes of pages are handed to the sink at once (default 4 MiB). */
  chunkBytes?: number;
  /** The transaction id of the newer meta page (default 1). */
  txid?: number;
  /**
   * Produce no pages (the sink is never called): finish() returns the layout that a writer
   * given the same contents (the same sizes of keys and values, in the same order) produces.
   */
  dryRun?: boolean;
  /**
   * The layout a dry run over the same contents returned: the meta pages and the free list
   * are then written first, in the constructor, and every page goes to the sink in file order
   * (finish() refuses contents whose layout differs).
   */
  layout?: BoltLayout;
}

/**
 * Writes one bbolt file: call bucket() (or beginBucket() ... endBucket()) for each top-level
 * bucket, in any order (each bucket's pages are where it was written; the root bucket lists
 * them by name), then finish(). Nested buckets are not supported (etcd has none).
 */
export class BoltWriter {
  readonly pageSize: number;
  private out: PageOut;
  private roots: { name: Buffer; value: Buffer }[] = [];
  private open: { name: Buffer; tree: TreeBuilder } | undefined;
  private finished = false;

  constructor(private readonly sink: PageSink, private readonly opts: BoltWriterOptions = {}) {
    this.pageSize = opts.pageSize ?? DEFAULT_PAGE_SIZE;
    if (this.pageSize < 1024 || this.pageSize & (this.pageSize - 1)) throw new BoltWriteError(`page size ${this.pageSize} is not a power of two of at least 1024`);
    if (opts.dryRun && opts.layout) throw new BoltWriteError('a dry run computes the layout: it is given none');
    this.out = new PageOut(sink, this.pageSize, opts.chunkBytes ?? 4 << 20, opts.dryRun === true);
    if (opts.layout) {
      const { root, pages } = opts.layout;
      if (!(pages > FIRST_DATA_PGID && root >= FIRST_DATA_PGID && root < pages)) throw new BoltWriteError(`not a layout: root page ${root} of ${pages}`);
      this.sink(0, headPages(this.pageSize, root, pages, opts.txid));
    }
  }

  /**
   * A bucket with its entries in ascending key order (byte order): an iterable, or a function
   * that calls `put` for each (a key and value are copied before put returns, so the caller
   * may reuse their buffers).
   */
  bucket(name: Uint8Array, entries: BucketEntries): void {
    const put = this.beginBucket(name);
    if (typeof entries === 'function') entries(put);
    else for (const [k, v] of entries) put(k, v);
    this.endBucket();
  }

  /** Starts a bucket whose entries come through the returned `put`, until endBucket(). */
  beginBucket(name: Uint8Array): PutEntry {
    if (this.finished) throw new BoltWriteError('the file is finished');
    if (this.open) throw new BoltWriteError(`bucket ${name.toString()} while bucket ${this.open.name.toString()} is open`);
    const nameBuf = Buffer.from(name);
    if (this.roots.some((r) => r.name.equals(nameBuf))) throw new BoltWriteError(`bucket ${nameBuf.toString()} twice`);
    this.open = { name: nameBuf, tree: new TreeBuilder(this.out, this.pageSize, `bucket ${nameBuf.toString()}`) };
    return this.putter(this.open.tree);
  }

  /** The `put` of the open bucket (after fork(): the copy's). */
  putEntry(): PutEntry {
    if (!this.open) throw new BoltWriteError('no bucket is open');
    return this.putter(this.open.tree);
  }

  private putter(tree: TreeBuilder): PutEntry {
    return (k, v, len) => tree.put(k, v, 0, len);
  }

  endBucket(): void {
    if (!this.open) throw new BoltWriteError('no bucket is open');
    const { name, tree } = this.open;
    this.open = undefined;
    const inline = tree.inlinePage();
    let value: Buffer;
    if (inline) {
      value = Buffer.alloc(BUCKET_HEADER_BYTES + inline.length);
      inline.copy(value, BUCKET_HEADER_BYTES);
    } else {
      value = Buffer.alloc(BUCKET_HEADER_BYTES);
      value.writeBigUInt64LE(BigInt(tree.finish()), 0);
    }
    this.roots.push({ name, value });
  }

  /**
   * A dry run's copy, to be continued on its own: a dry run kept after a large bucket's
   * entries so far, then continued with the entries added since, gives the layout without
   * the entries being read again.
   */
  fork(): BoltWriter {
    if (!this.opts.dryRun || this.finished) throw new BoltWriteError('only an unfinished dry run can be forked');
    const copy = new BoltWriter(this.sink, this.opts);
    copy.out = this.out.forkDry();
    copy.roots = [...this.roots];
    if (this.open) copy.open = { name: this.open.name, tree: this.open.tree.forkDry(copy.out) };
    return copy;
  }

  /**
   * Writes the root bucket, then the free list and the meta pages unless they were written
   * first. Returns the file's size and layout: the sink has then received every page below it.
   */
  finish(): { bytes: number } & BoltLayout {
    if (this.finished) throw new BoltWriteError('the file is finished');
    if (this.open) throw new BoltWriteError(`bucket ${this.open.name.toString()} is still open`);
    this.finished = true;
    const tree = new TreeBuilder(this.out, this.pageSize, 'the root bucket');
    for (const { name, value } of [...this.roots].sort((a, b) => Buffer.compare(a.name, b.name))) tree.put(name, value, BUCKET_LEAF_FLAG);
    const root = tree.finish();
    this.out.flush();
    const pages = this.out.next;
    const promised = this.opts.layout;
    if (promised && (promised.root !== root || promised.pages !== pages)) {
      throw new BoltWriteError(`the contents differ from those of the dry run: root page ${root} of ${pages}, not ${promised.root} of ${promised.pages}`);
    }
    if (!promised && !this.opts.dryRun) this.sink(0, headPages(this.pageSize, root, pages, this.opts.txid));
    return { bytes: pages * this.pageSize, pages, root };
  }
}

/** A whole bbolt file in memory, for small contents and tests. */
export function writeBoltFile(buckets: Iterable<{ name: Uint8Array; entries: BucketEntries }>, opts: BoltWriterOptions = {}): Buffer {
  const parts: { pgid: number; bytes: Buffer }[] = [];
  const w = new BoltWriter((pgid, bytes) => parts.push({ pgid, bytes: Buffer.from(bytes) }), opts);
  for (const b of buckets) w.bucket(b.name, b.entries);
  const { bytes } = w.finish();
  const file = Buffer.alloc(bytes);
  for (const p of parts) p.bytes.copy(file, p.pgid * w.pageSize);
  return file;
}
