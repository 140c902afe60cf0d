// A reader of bbolt database files (go.etcd.io/bbolt, the format of etcd's backend and of its
// snapshots), for importing etcd data without Go. Pure: pages come from a PageSource (a Buffer,
// or a file read in windows), and every structural fact the walk relies on is checked first, so
// a truncated, corrupt or foreign file gives a BoltError naming the problem, never a crash or
// an endless walk.
//
// The format (bbolt's page.go, db.go, bucket.go, freelist.go; integers little-endian):
//   page       16-byte header: id u64, flags u16, count u16, overflow u32 (more pages follow)
//   meta       pages 0 and 1, after the header: magic u32 (0xED0CDAED), version u32 (2),
//              pageSize u32, flags u32, root bucket (root u64, sequence u64), freelist u64,
//              pgid u64 (the high-water mark: pages in use are below it), txid u64, then
//              checksum u64 = FNV-64a of the 56 bytes before it. The valid one with the higher
//              txid is the database's state.
//   branch     count elements of 16 bytes: pos u32, ksize u32, pgid u64; the key is at
//              element + pos
//   leaf       count elements of 16 bytes: flags u32, pos u32, ksize u32, vsize u32; the key is
//              at element + pos, the value right after it. flags 1: the value is a bucket
//   bucket     a leaf value: root u64, sequence u64; root 0 means inline: a leaf page (header
//              and elements) follows in the value itself
//   freelist   count u16 of the header (0xFFFF: the count is the first u64), then page ids
import fs from 'node:fs';

export const BOLT_MAGIC = 0xed0cdaed;
export const BOLT_VERSION = 2;
const PAGE_HEADER = 16;
const ELEMENT = 16;
const META_CHECKSUMMED = 56;
const BUCKET_HEADER = 16;
const FLAG_BRANCH = 0x01;
const FLAG_LEAF = 0x02;
const FLAG_META = 0x04;
const FLAG_FREELIST = 0x10;
const BUCKET_LEAF_FLAG = 0x01;
const NO_FREELIST = 0xffff_ffff_ffff_ffffn;
/** No real bbolt tree is this deep (each level multiplies the fan-out); deeper means a loop. */
const MAX_DEPTH = 64;

/** A file that is not a sound bbolt database; the message names what is wrong. */
export class BoltError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BoltError';
  }
}

/** Where the bytes come from. `read` returns exactly `length` bytes or throws. */
export interface PageSource {
  size: number;
  read(offset: number, length: number): Buffer;
}

export function bufferSource(buf: Buffer): PageSource {
  return {
    size: buf.length,
    read(offset, length) {
      if (offset < 0 || offset + length > buf.length) throw new BoltError(`read of ${length} bytes at ${offset} is outside the file (${buf.length} bytes)`);
      return buf.subarray(offset, offset + length);
    },
  };
}

/**
 * The first `size` bytes of an open file, read in windows of `window` bytes: a walk reads
 * pages mostly in file order, so one pread serves many pages.
 */
export function fileSource(fd: number, size: number, window = 4 << 20): PageSource {
  let base = 0;
  let cached = Buffer.alloc(0);
  return {
    size,
    read(offset, length) {
      if (offset < 0 || offset + length > size) throw new BoltError(`read of ${length} bytes at ${offset} is outside the file (${size} bytes)`);
      if (offset >= base && offset + length <= base + cached.length) return cached.subarray(offset - base, offset - base + length);
      const n = Math.min(Math.max(window, length), size - offset);
      const buf = Buffer.allocUnsafe(n);
      let got = 0;
      while (got < n) {
        const r = fs.readSync(fd, buf, got, n - got, offset + got);
        if (r === 0) throw new BoltError(`the file ended at ${offset + got} bytes while ${size} were expected (it shrank while being read?)`);
        got += r;
      }
      base = offset;
      cached = buf;
      return buf.subarray(0, length);
    },
  };
}

export interface BoltMeta {
  pageSize: number;
  flags: number;
  /** The root bucket's root page. */
  root: number;
  /** The freelist page, or undefined when the freelist is not stored (NoFreelistSync). */
  freelist: number | undefined;
  /** The high-water mark: every page in use is below it. */
  pageCount: number;
  txid: bigint;
}

/**
 * One leaf page's entries without an object per entry (a walk over millions of them): entry
 * i's key is buf[at[3i], at[3i+1]), its value buf[at[3i+1], at[3i+2]).
 */
export interface Leaf {
  buf: Buffer;
  count: number;
  at: Uint32Array;
  /** 1 where the entry is a nested bucket. */
  bucket: Uint8Array;
}

export interface BoltEntry {
  key: Buffer;
  /** The value; for a bucket, its 16-byte header and (inline) page. */
  value: Buffer;
  isBucket: boolean;
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK64 = 0xffff_ffff_ffff_ffffn;

/** FNV-64a, as Go's hash/fnv New64a: the meta page's checksum. */
export function fnv64a(b: Uint8Array): bigint {
  let h = FNV_OFFSET;
  for (const byte of b) h = ((h ^ BigInt(byte)) * FNV_PRIME) & MASK64;
  return h;
}

function u64(b: Buffer, at: number, what: string): number {
  const v = b.readBigUInt64LE(at);
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new BoltError(`${what} is ${v}, beyond any file`);
  return Number(v);
}

/** The meta at `offset`, or the reason it is not valid. */
function readMeta(src: PageSource, offset: number, which: string): BoltMeta | string {
  if (offset + PAGE_HEADER + META_CHECKSUMMED + 8 > src.size) return `${which} is past the end of the file (${src.size} bytes)`;
  const p = src.read(offset, PAGE_HEADER + META_CHECKSUMMED + 8);
  const m = p.subarray(PAGE_HEADER);
  const magic = m.readUInt32LE(0);
  if (magic !== BOLT_MAGIC) return `${which} has magic 0x${magic.toString(16).padStart(8, '0')}, not bbolt's 0x${BOLT_MAGIC.toString(16)}`;
  const version = m.readUInt32LE(4);
  if (version !== BOLT_VERSION) return `${which} has bbolt format version ${version}; only version ${BOLT_VERSION} is read`;
  if ((p.readUInt16LE(8) & FLAG_META) === 0) return `${which} is not marked as a meta page (flags 0x${p.readUInt16LE(8).toString(16)})`;
  const checksum = m.readBigUInt64LE(META_CHECKSUMMED);
  // bbolt accepts a zero checksum (files from before checksums).
  if (checksum !== 0n && checksum !== fnv64a(m.subarray(0, META_CHECKSUMMED))) return `${which} fails its checksum (the page is damaged)`;
  const pageSize = m.readUInt32LE(8);
  if (pageSize < 512 || pageSize > 1 << 20 || (pageSize & (pageSize - 1)) !== 0) return `${which} has an impossible page size ${pageSize}`;
  try {
    const freelistRaw = m.readBigUInt64LE(32);
    const meta: BoltMeta = {
      pageSize,
      flags: m.readUInt32LE(12),
      root: u64(m, 16, `${which}'s root page`),
      freelist: freelistRaw === NO_FREELIST ? undefined : u64(m, 32, `${which}'s freelist page`),
      pageCount: u64(m, 40, `${which}'s page count`),
      txid: m.readBigUInt64LE(48),
    };
    if (meta.pageCount < 2) return `${which} says the database has ${meta.pageCount} pages (fewer than its two meta pages)`;
    if (meta.root < 2 || meta.root >= meta.pageCount) return `${which}'s root page ${meta.root} is outside the database (pages 2 to ${meta.pageCount - 1})`;
    if (meta.freelist !== undefined && (meta.freelist < 2 || meta.freelist >= meta.pageCount)) {
      return `${which}'s freelist page ${meta.freelist} is outside the database (pages 2 to ${meta.pageCount - 1})`;
    }
    return meta;
  } catch (err) {
    if (err instanceof BoltError) return err.message;
    throw err;
  }
}

/** A bbolt page's bytes (header included) and its parsed header. */
interface Page {
  id: number;
  flags: number;
  count: number;
  buf: Buffer;
}

export class BoltDb {
  readonly meta: BoltMeta;
  private free = new Set<number>();

  constructor(private readonly src: PageSource) {
    const first = readMeta(src, 0, 'meta page 0');
    // Page 1 sits one page in; the page size comes from page 0 unless that one is damaged,
    // when the system page size bbolt would have used is tried.
    const sizes = typeof first === 'string' ? [4096, 8192, 16384, 65536] : [first.pageSize];
    let second: BoltMeta | string | undefined;
    for (const size of sizes) {
      const m = readMeta(src, size, 'meta page 1');
      // The reason reported is the one at the usual place.
      if (typeof m !== 'string' || second === undefined) second = m;
      if (typeof m !== 'string') break;
    }
    second ??= 'meta page 1 was not found';
    let meta: BoltMeta;
    if (typeof first !== 'string' && typeof second !== 'string') meta = second.txid > first.txid ? second : first;
    else if (typeof first !== 'string') meta = first;
    else if (typeof second !== 'string') meta = second;
    else throw new BoltError(`not a bbolt database: ${first}; ${second}`);
    const needed = meta.pageCount * meta.pageSize;
    if (src.size < needed) {
      throw new BoltError(`the file is truncated: its meta page says the database has ${meta.pageCount} pages of ${meta.pageSize} bytes (${needed} bytes), the file has ${src.size}`);
    }
    this.meta = meta;
    this.free = meta.freelist === undefined ? new Set() : this.readFreelist(meta.freelist);
  }

  /** Page `id` (with its overflow pages), checked to be a page of the kind wanted. */
  private page(id: number, from: string): Page {
    const { pageSize, pageCount } = this.meta;
    if (id === 0 || id === 1) throw new BoltError(`${from} points to page ${id}, a meta page`);
    if (!Number.isSafeInteger(id) || id < 2 || id >= pageCount) throw new BoltError(`${from} points to page ${id}, outside the database (pages 2 to ${pageCount - 1})`);
    if (this.free.has(id)) throw new BoltError(`${from} points to page ${id}, which the freelist says is free`);
    const head = this.src.read(id * pageSize, PAGE_HEADER);
    const headerId = head.readBigUInt64LE(0);
    if (headerId !== BigInt(id)) throw new BoltError(`page ${id} (reached from ${from}) says it is page ${headerId}: the file is damaged or not one database`);
    const overflow = head.readUInt32LE(12);
    if (id + overflow >= pageCount) throw new BoltError(`page ${id} has ${overflow} overflow pages, past the database's end (page ${pageCount - 1})`);
    const buf = this.src.read(id * pageSize, (overflow + 1) * pageSize);
    const p = { id, flags: head.readUInt16LE(8), count: head.readUInt16LE(10), buf };
    return p;
  }

  private readFreelist(id: number): Set<number> {
    const p = this.page(id, 'the meta page');
    if ((p.flags & FLAG_FREELIST) === 0) throw new BoltError(`the freelist page ${id} is a ${pageKind(p.flags)} page`);
    let count = p.count;
    let at = PAGE_HEADER;
    if (count === 0xffff) {
      if (p.buf.length < PAGE_HEADER + 8) throw new BoltError(`the freelist page ${id} is too short`);
      count = u64(p.buf, PAGE_HEADER, 'the freelist count');
      at += 8;
    }
    if (at + count * 8 > p.buf.length) throw new BoltError(`the freelist page ${id} lists ${count} pages, more than it holds`);
    const free = new Set<number>();
    for (let i = 0; i < count; i++) {
      const pg = u64(p.buf, at + i * 8, 'a free page id');
      if (pg < 2 || pg >= this.meta.pageCount) throw new BoltError(`the freelist lists page ${pg}, outside the database`);
      free.add(pg);
    }
    return free;
  }

  /** The root bucket: its nested buckets are the database's top-level buckets. */
  root(): Bucket {
    return new Bucket(this, this.meta.root, undefined, 'the root bucket');
  }

  /**
   * @internal: the entries of the tree at `root` (or of an inline page), in key order, one leaf
   * page at a time (a walk over millions of entries costs one generator step per page).
   */
  *walk(root: number, inline: Buffer | undefined, name: string): Generator<Leaf> {
    if (inline) {
      const head = inline.length >= PAGE_HEADER;
      const leaf = leafOf({ id: 0, flags: head ? inline.readUInt16LE(8) : 0, count: head ? inline.readUInt16LE(10) : 0, buf: inline }, `${name} (inline)`);
      checkOrder(leaf, undefined, `${name} (inline)`);
      yield leaf;
      return;
    }
    // Each page of a tree is reached once; a page met again is a loop or two trees sharing it.
    const seen = new Set<number>();
    let last: Buffer | undefined;
    // The branch pages on the way down, with the next child to visit of each.
    const stack: { page: Page; next: number }[] = [];
    let id = root;
    let from = `${name}'s root`;
    for (;;) {
      if (stack.length > MAX_DEPTH) throw new BoltError(`${name}'s tree is deeper than ${MAX_DEPTH} levels at page ${id}: its pages form a loop`);
      if (seen.has(id)) throw new BoltError(`${name}'s tree reaches page ${id} twice (from ${from}): its pages form a loop`);
      seen.add(id);
      const p = this.page(id, from);
      if (p.flags & FLAG_LEAF) {
        const leaf = leafOf(p, `${name}'s leaf page ${id}`);
        checkOrder(leaf, last, `${name}'s leaf page ${id}`);
        if (leaf.count) {
          // A copy: the page's bytes may be reused by the next read.
          last = Buffer.from(leaf.buf.subarray(leaf.at[3 * leaf.count - 3], leaf.at[3 * leaf.count - 2]));
          yield leaf;
        }
      } else if (p.flags & FLAG_BRANCH) {
        checkElements(p, `${name}'s branch page ${id}`);
        if (p.count === 0) throw new BoltError(`${name}'s branch page ${id} has no children`);
        stack.push({ page: p, next: 0 });
      } else {
        throw new BoltError(`${name}'s tree reaches page ${id} (from ${from}), a ${pageKind(p.flags)} page`);
      }
      // The next child: of the deepest branch that has one left.
      while (stack.length && stack[stack.length - 1]!.next >= stack[stack.length - 1]!.page.count) stack.pop();
      const top = stack[stack.length - 1];
      if (!top) return;
      id = u64(top.page.buf, PAGE_HEADER + top.next * ELEMENT + 8, `a child of page ${top.page.id}`);
      from = `page ${top.page.id}`;
      top.next++;
    }
  }
}

/** Keys strictly ascending within the leaf, and after the previous leaf's last key. */
function checkOrder(leaf: Leaf, last: Buffer | undefined, where: string): void {
  const { buf, at } = leaf;
  for (let i = 0; i < leaf.count; i++) {
    // compare(target, ...): the source's range (the earlier key) against the target's (this one).
    const before = i > 0 ? buf.compare(buf, at[3 * i], at[3 * i + 1], at[3 * i - 3], at[3 * i - 2]) : last ? last.compare(buf, at[3 * i], at[3 * i + 1]) : -1;
    if (before >= 0) throw new BoltError(`${where}: its keys are out of order at element ${i}: the tree is damaged`);
  }
}

function leafOf(p: Page, where: string): Leaf {
  if (p.buf.length < PAGE_HEADER || (p.flags & FLAG_LEAF) === 0) throw new BoltError(`${where} is not a leaf page (${pageKind(p.flags)})`);
  checkElements(p, where);
  const at = new Uint32Array(3 * p.count);
  const bucket = new Uint8Array(p.count);
  const buf = p.buf;
  for (let i = 0; i < p.count; i++) {
    const el = PAGE_HEADER + i * ELEMENT;
    const kStart = el + buf.readUInt32LE(el + 4);
    const kEnd = kStart + buf.readUInt32LE(el + 8);
    const vEnd = kEnd + buf.readUInt32LE(el + 12);
    if (vEnd > buf.length) throw new BoltError(`${where}: element ${i}'s key or value runs past the page's end`);
    at[3 * i] = kStart;
    at[3 * i + 1] = kEnd;
    at[3 * i + 2] = vEnd;
    bucket[i] = buf.readUInt32LE(el) & BUCKET_LEAF_FLAG;
  }
  return { buf, count: p.count, at, bucket };
}

function checkElements(p: Page, where: string): void {
  if (PAGE_HEADER + p.count * ELEMENT > p.buf.length) throw new BoltError(`${where} says it has ${p.count} elements, more than fit in it`);
  for (let i = 0; i < p.count; i++) {
    const at = PAGE_HEADER + i * ELEMENT;
    const pos = p.buf.readUInt32LE(at + (p.flags & FLAG_BRANCH ? 0 : 4));
    const ksize = p.buf.readUInt32LE(at + (p.flags & FLAG_BRANCH ? 4 : 8));
    if (at + pos + ksize > p.buf.length) throw new BoltError(`${where}: element ${i}'s key runs past the page's end`);
  }
}

function pageKind(flags: number): string {
  if (flags & FLAG_BRANCH) return 'branch';
  if (flags & FLAG_LEAF) return 'leaf';
  if (flags & FLAG_META) return 'meta';
  if (flags & FLAG_FREELIST) return 'freelist';
  return `unknown (flags 0x${flags.toString(16)})`;
}

/** A bucket: its key/value pairs and nested buckets, read on demand. */
export class Bucket {
  constructor(
    private readonly db: BoltDb,
    private readonly rootPage: number,
    private readonly inline: Buffer | undefined,
    readonly name: string,
  ) {}

  /** Every entry, nested buckets included, in key order, a leaf page at a time. */
  leaves(): Generator<Leaf> {
    return this.db.walk(this.rootPage, this.inline, this.name);
  }

  /** Every entry, nested buckets included, in key order. */
  *entries(): Generator<BoltEntry> {
    for (const { buf, count, at, bucket } of this.leaves()) {
      for (let i = 0; i < count; i++) yield { key: buf.subarray(at[3 * i], at[3 * i + 1]), value: buf.subarray(at[3 * i + 1], at[3 * i + 2]), isBucket: bucket[i] === 1 };
    }
  }

  /** The key/value pairs that are not buckets. */
  *pairs(): Generator<{ key: Buffer; value: Buffer }> {
    for (const e of this.entries()) if (!e.isBucket) yield { key: e.key, value: e.value };
  }

  /** The nested buckets by name (each walk reads this bucket's tree once). */
  buckets(): Map<string, Bucket> {
    const out = new Map<string, Bucket>();
    for (const e of this.entries()) if (e.isBucket) out.set(e.key.toString('latin1'), this.nested(e));
    return out;
  }

  /** The value of `key`, if it is a plain pair. */
  get(key: Buffer): Buffer | undefined {
    for (const e of this.entries()) {
      const c = Buffer.compare(e.key, key);
      if (c === 0) return e.isBucket ? undefined : e.value;
      if (c > 0) return undefined;
    }
    return undefined;
  }

  private nested(e: BoltEntry): Bucket {
    const label = `bucket "${e.key.toString('latin1')}"`;
    if (e.value.length < BUCKET_HEADER) throw new BoltError(`${label}'s header is ${e.value.length} bytes, shorter than a bucket's 16`);
    const root = u64(e.value, 0, `${label}'s root page`);
    if (root === 0) return new Bucket(this.db, 0, e.value.subarray(BUCKET_HEADER), label);
    return new Bucket(this.db, root, undefined, label);
  }
}

/** Opens the bbolt database in the first `size` bytes of `src`. Throws BoltError. */
export function openBolt(src: PageSource): BoltDb {
  return new BoltDb(src);
}

/** Whether `head` (the file's first bytes) starts like a bbolt file: the magic after page 0's header. */
export function looksLikeBolt(head: Buffer): boolean {
  return head.length >= PAGE_HEADER + 4 && head.readUInt32LE(PAGE_HEADER) === BOLT_MAGIC;
}
