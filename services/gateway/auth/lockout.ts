// Brute-force protection (the spec's "Username lockout"): 5 consecutive failed Authenticate
// calls for one user name within 5 minutes lock that name for 15 minutes; while locked,
// Authenticate fails without the password being checked (no bcrypt work for an attacker to
// cause). In memory only: a restart clears it. Names that fail but never lock are forgotten
// after the window, and the table is bounded, so a flood of random names costs bounded memory.
// A name is kept as itself only when short: a client may send names of megabytes (a request
// may be 2 MiB), and 100,000 of those would hold gigabytes, so a long one is kept as its digest.
import { createHash } from 'node:crypto';

export const LOCKOUT = {
  failures: 5,
  windowMs: 5 * 60_000,
  lockMs: 15 * 60_000,
  /** Entries kept at most (the oldest go first). */
  maxEntries: 100_000,
} as const;

/** Names up to this many characters are kept as they are; longer ones as a SHA-256 digest. */
const PLAIN_NAME_MAX = 64;

/** The table's key for a user name: at most 64 characters. */
export function lockoutKey(name: string): string {
  return name.length <= PLAIN_NAME_MAX ? name : `sha256:${createHash('sha256').update(name).digest('base64')}`;
}

interface Entry {
  /** Times of the consecutive failures still inside the window. */
  failures: number[];
  lockedUntil: number;
}

export class Lockout {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Whether `name` is locked now. */
  locked(user: string): boolean {
    const name = lockoutKey(user);
    const e = this.entries.get(name);
    if (!e) return false;
    if (e.lockedUntil > this.now()) return true;
    if (e.lockedUntil) this.entries.delete(name); // the lock ran out: a fresh start
    return false;
  }

  /** Records a failure; true when it locks the name. */
  fail(user: string): boolean {
    const name = lockoutKey(user);
    const now = this.now();
    let e = this.entries.get(name);
    if (!e) {
      if (this.entries.size >= LOCKOUT.maxEntries) this.evict(now);
      e = { failures: [], lockedUntil: 0 };
      this.entries.set(name, e);
    }
    e.failures = e.failures.filter((t) => now - t < LOCKOUT.windowMs);
    e.failures.push(now);
    if (e.failures.length >= LOCKOUT.failures) {
      e.lockedUntil = now + LOCKOUT.lockMs;
      e.failures = [];
      return true;
    }
    return false;
  }

  /** A success ends the run of failures. */
  succeed(user: string): void {
    this.entries.delete(lockoutKey(user));
  }

  get size(): number {
    return this.entries.size;
  }

  private evict(now: number): void {
    for (const [name, e] of this.entries) {
      if (e.lockedUntil <= now && e.failures.every((t) => now - t >= LOCKOUT.windowMs)) this.entries.delete(name);
    }
    // Still full: drop the oldest entries (Map keeps insertion order).
    for (const name of this.entries.keys()) {
      if (this.entries.size < LOCKOUT.maxEntries) break;
      this.entries.delete(name);
    }
  }
}
