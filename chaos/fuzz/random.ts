// The fuzzer's randomness: one PRNG per case, seeded from the run's seed and the case's index,
// so that any case can be replayed alone (`--seed N --case I`) exactly as the run sent it.
import { prng } from '../../testkit/prng.js';

export class Rand {
  private readonly next: () => number;
  constructor(seed: number) {
    this.next = prng(seed);
  }

  /** The generator of case `index` of the run seeded `seed`. */
  static forCase(seed: number, index: number): Rand {
    // A 32-bit mix of both (murmur3's finaliser), so neighbouring cases share no prefix.
    let h = (Math.imul(seed >>> 0, 0x9e3779b1) ^ index) >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    return new Rand((h ^ (h >>> 16)) >>> 0);
  }

  float(): number {
    return this.next();
  }
  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  /** An integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  /** One of `choices`, each as likely as its weight. */
  weighted<T>(choices: readonly (readonly [number, T])[]): T {
    let r = this.next() * choices.reduce((s, [w]) => s + w, 0);
    for (const [w, v] of choices) if ((r -= w) < 0) return v;
    return choices[choices.length - 1]![1];
  }
  bytes(n: number): Buffer {
    const b = Buffer.alloc(n);
    for (let i = 0; i < n; i++) b[i] = this.int(256);
    return b;
  }
}

/** The seed of the suite's fuzz runs: the day (yyyymmdd, UTC), or KVS_FUZZ_SEED. */
export function daySeed(env: NodeJS.ProcessEnv = process.env, today = new Date()): number {
  return Number(env.KVS_FUZZ_SEED ?? today.getUTCFullYear() * 10000 + (today.getUTCMonth() + 1) * 100 + today.getUTCDate());
}
