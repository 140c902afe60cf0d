// The live expiry deadlines of the storage process: a min-heap of (deadline, lease id) with an
// index, so a keep-alive moves its lease in place (as etcd's LeaseExpiredNotifier).

export interface Deadline {
  id: bigint;
  /** Milliseconds since the epoch. */
  at: number;
}

export class ExpiryQueue {
  private heap: Deadline[] = [];
  private index = new Map<bigint, number>();

  get size(): number {
    return this.heap.length;
  }

  /** The lease's deadline, if it is queued. */
  get(id: bigint): number | undefined {
    const i = this.index.get(id);
    return i === undefined ? undefined : this.heap[i]!.at;
  }

  /** Sets (or moves) a lease's deadline. */
  set(id: bigint, at: number): void {
    const i = this.index.get(id);
    if (i === undefined) {
      this.heap.push({ id, at });
      this.index.set(id, this.heap.length - 1);
      this.up(this.heap.length - 1);
      return;
    }
    const old = this.heap[i]!.at;
    this.heap[i]!.at = at;
    if (at < old) this.up(i);
    else this.down(i);
  }

  delete(id: bigint): void {
    const i = this.index.get(id);
    if (i === undefined) return;
    const last = this.heap.pop()!;
    this.index.delete(id);
    if (i < this.heap.length) {
      this.heap[i] = last;
      this.index.set(last.id, i);
      this.up(i);
      this.down(i);
    }
  }

  /** The earliest deadline. */
  peek(): Deadline | undefined {
    return this.heap[0];
  }

  /** Every queued lease, earliest deadline first. */
  sorted(): Deadline[] {
    return [...this.heap].sort((a, b) => a.at - b.at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  private swap(i: number, j: number): void {
    const a = this.heap[i]!, b = this.heap[j]!;
    this.heap[i] = b;
    this.heap[j] = a;
    this.index.set(b.id, i);
    this.index.set(a.id, j);
  }

  private up(i: number): void {
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (this.heap[p]!.at <= this.heap[i]!.at) return;
      this.swap(i, p);
      i = p;
    }
  }

  private down(i: number): void {
    const n = this.heap.length;
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = i;
      if (l < n && this.heap[l]!.at < this.heap[m]!.at) m = l;
      if (r < n && this.heap[r]!.at < this.heap[m]!.at) m = r;
      if (m === i) return;
      this.swap(i, m);
      i = m;
    }
  }
}
