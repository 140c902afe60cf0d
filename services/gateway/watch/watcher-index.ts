// Which watchers cover a changed key, at a cost that grows with the watchers that match, not
// with all watchers: single keys in a hash map; prefixes in a hash map per prefix, probed
// once per distinct prefix length; other ranges (and "from key") in a list sorted by start.
import { contains, isPrefixRange, type KeyRange } from './key-range.js';

interface Ranged<T> {
  range: KeyRange;
  item: T;
}

export interface IndexCounts {
  keys: number;
  prefixes: number;
  ranges: number;
}

function addTo<T>(m: Map<string, Set<T>>, k: string, item: T): boolean {
  let s = m.get(k);
  const fresh = !s;
  if (!s) m.set(k, (s = new Set()));
  s.add(item);
  return fresh;
}

function removeFrom<T>(m: Map<string, Set<T>>, k: string, item: T): boolean {
  const s = m.get(k);
  if (!s?.delete(item)) return false;
  if (s.size === 0) m.delete(k);
  return s.size === 0;
}

export class WatcherIndex<T> {
  private readonly keys = new Map<string, Set<T>>();
  private readonly prefixes = new Map<string, Set<T>>();
  /** Distinct prefix lengths in use -> how many distinct prefixes have that length. */
  private readonly prefixLengths = new Map<number, number>();
  private lengths: number[] = [];
  /** Other ranges, sorted by start key. */
  private ranges: Ranged<T>[] = [];
  private size_ = 0;

  get size(): number {
    return this.size_;
  }

  counts(): IndexCounts {
    return { keys: this.keys.size, prefixes: this.prefixes.size, ranges: this.ranges.length };
  }

  add(range: KeyRange, item: T): void {
    this.size_++;
    if (range.end === undefined) {
      addTo(this.keys, range.key.toString('latin1'), item);
    } else if (isPrefixRange(range)) {
      if (addTo(this.prefixes, range.key.toString('latin1'), item)) this.countLength(range.key.length, 1);
    } else {
      let lo = 0;
      let hi = this.ranges.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (Buffer.compare(this.ranges[mid]!.range.key, range.key) <= 0) lo = mid + 1;
        else hi = mid;
      }
      this.ranges.splice(lo, 0, { range, item });
    }
  }

  remove(range: KeyRange, item: T): void {
    if (range.end === undefined) {
      if (this.keys.get(range.key.toString('latin1'))?.has(item)) this.size_--;
      removeFrom(this.keys, range.key.toString('latin1'), item);
    } else if (isPrefixRange(range)) {
      const k = range.key.toString('latin1');
      if (this.prefixes.get(k)?.has(item)) this.size_--;
      if (removeFrom(this.prefixes, k, item)) this.countLength(range.key.length, -1);
    } else {
      const i = this.ranges.findIndex((r) => r.item === item);
      if (i >= 0) {
        this.ranges.splice(i, 1);
        this.size_--;
      }
    }
  }

  /** Calls `fn` once for every item whose range contains `key`. */
  match(key: Buffer, fn: (item: T) => void): void {
    if (this.keys.size) this.keys.get(key.toString('latin1'))?.forEach(fn);
    if (this.prefixes.size) {
      const k = key.toString('latin1');
      for (const len of this.lengths) {
        if (len > k.length) break;
        this.prefixes.get(len === k.length ? k : k.slice(0, len))?.forEach(fn);
      }
    }
    for (const r of this.ranges) {
      if (Buffer.compare(r.range.key, key) > 0) break;
      if (contains(r.range, key)) fn(r.item);
    }
  }

  /** Every item, in no particular order. */
  *all(): IterableIterator<T> {
    for (const s of this.keys.values()) yield* s;
    for (const s of this.prefixes.values()) yield* s;
    for (const r of this.ranges) yield r.item;
  }

  clear(): void {
    this.keys.clear();
    this.prefixes.clear();
    this.prefixLengths.clear();
    this.lengths = [];
    this.ranges = [];
    this.size_ = 0;
  }

  private countLength(len: number, delta: number): void {
    const n = (this.prefixLengths.get(len) ?? 0) + delta;
    if (n > 0) this.prefixLengths.set(len, n);
    else this.prefixLengths.delete(len);
    this.lengths = [...this.prefixLengths.keys()].sort((a, b) => a - b);
  }
}
