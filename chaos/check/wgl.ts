// The Wing & Gong / Lowe (WGL) linearizability search over one partition of a history (one key),
// as described by Lowe ("Testing for linearizability", 2017) and used by porcupine and Knossos.
// Written for this project from the papers' description (and a reading of porcupine's
// checker.go to learn its structure); no code is taken from either tool.
//
// The history is a list of operations with call and return times. Every call and return becomes
// an entry in a doubly linked list sorted by time (a call sorts before a return at the same
// instant: intervals are closed, so touching operations count as concurrent). The search walks
// the list from its head: a call entry is a candidate to take effect next; if the model accepts
// it in the current state, the operation is "lifted" out of the list (its call and its return),
// pushed on a stack with the state before it, and the walk restarts from the head. Reaching a
// return entry means that operation had to take effect before this point and no candidate
// could: the search backtracks by popping the last operation, putting it back, and trying the
// entry after it. The history is linearizable when every operation is lifted; not linearizable
// when a return is reached with nothing to backtrack.
//
// Memoisation (Lowe's improvement): a configuration is the set of operations linearized so far
// plus the model state; one that was reached before is never explored again. The set is a
// bitset, hashed incrementally with Zobrist hashing (one random word per operation, XORed in
// and out), so a step costs O(1) unless a hash bucket needs a bitset comparison.
//
// Operations whose outcome is unknown (the client saw a timeout or lost its connection) have
// return time +Infinity, as in porcupine: they may take effect at any time after their call,
// or never. "Never" is the same as "after everything else", so the search stops with success
// as soon as every operation with a known outcome is linearized. Such operations are where
// plain WGL blows up (each one still open at a point doubles the configurations there), so
// they get refinements of our own, all sound:
//  - they are kept in a list of their own, tried either before the completed candidates at a
//    point or only after all of those failed (`pendingFirst`; the candidates are the same,
//    only the order of trying changes, and linearizability.ts runs both as a portfolio);
//  - the memo keys on (completed operations linearized, state) and keeps the sets of pending
//    operations linearized with them; a configuration whose pending set is a superset of a
//    recorded one for the same key is dominated (the smaller set can still take the extra
//    pending operations later, or never) and skipped. Equal sets are the plain WGL case;
//  - a pending blind write (put, delete without a recorded answer) is not tried straight after
//    another pending operation: the result is dominated by trying it without that one.
// What remains exponential is the number of pending operations open at once that the history
// gives no reason to place: a violation among many of them can exhaust the budget.

// The search has a budget (model steps, and a wall-clock deadline); running out yields
// `unknown`, never `ok`.
//
// States are small integers chosen by the model (see kv-model.ts), which keeps the cache cheap.

export type Verdict = 'ok' | 'illegal' | 'unknown';

/** One operation as the search sees it: times only; what it does is the model's business. */
export interface SearchOp {
  /** Call time, finite. */
  readonly call: number;
  /** Return time, >= call; +Infinity when the outcome is unknown. */
  readonly ret: number;
}

/** A sequential specification compiled for one partition: states and operations are integers. */
export interface CompiledModel {
  readonly init: number;
  /**
   * The state after operation `op` takes effect in `state`, or -1 when the operation's recorded
   * output is impossible there. Must be pure and deterministic.
   */
  step(state: number, op: number): number;
  /**
   * Optional: true when `op` sets the state regardless of the state it finds (a put, a delete
   * with no recorded output). Lets the search skip orders that cannot matter.
   */
  blind?(op: number): boolean;
}

export interface SearchBudget {
  /** Model steps allowed for this search. */
  readonly maxSteps: number;
  /** performance.now() after which the search gives up. */
  readonly deadline: number;
}

export interface SearchResult {
  readonly verdict: Verdict;
  /** Model steps taken. */
  readonly steps: number;
  readonly unknownReason?: 'steps' | 'time';
  /**
   * verdict ok: an order in which the operations take effect (indices into the input). Pending
   * operations that never needed to take effect are left out.
   */
  readonly linearization?: number[];
  /**
   * verdict illegal and `explain` asked for: the longest partial linearization the search
   * reached, the operation whose return it could not get past, and the state there.
   */
  readonly deepest?: { readonly order: number[]; readonly blockedBy: number; readonly state: number };
}

const NIL = -1;

/** Deterministic 32-bit generator for the Zobrist words (xorshift32). */
function zobristWords(n: number, seed: number): Int32Array {
  const out = new Int32Array(n);
  let x = seed | 0 || 0x2545f491;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x;
  }
  return out;
}

function mixState(s: number, salt: number): number {
  let h = Math.imul(s ^ salt, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

interface CacheEntry {
  readonly h2: number;
  readonly state: number;
  /** Completed operations linearized. */
  readonly bits: Uint32Array;
  /** Pending operations linearized (by pending ordinal); absent when there are none. */
  readonly pending?: Uint32Array;
}

function bitsEqual(a: Uint32Array, b: Uint32Array): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** a ⊆ b */
function bitsSubset(a: Uint32Array, b: Uint32Array): boolean {
  for (let i = 0; i < a.length; i++) if ((a[i]! & ~b[i]!) !== 0) return false;
  return true;
}

/**
 * Sorted positions of the 2n call/return entries: entry 2i is op i's call, 2i+1 its return.
 * Ties: calls before returns (closed intervals), then by operation index.
 */
export function sortEntries(ops: readonly SearchOp[]): Int32Array {
  const n = ops.length;
  const entries = new Int32Array(2 * n);
  for (let i = 0; i < 2 * n; i++) entries[i] = i;
  const time = (e: number): number => ((e & 1) === 0 ? ops[e >> 1]!.call : ops[e >> 1]!.ret);
  entries.sort((a, b) => {
    const ta = time(a);
    const tb = time(b);
    if (ta !== tb) return ta < tb ? -1 : 1;
    if ((a & 1) !== (b & 1)) return (a & 1) - (b & 1);
    return a - b;
  });
  return entries;
}

/** Run the WGL search. `explain` records the deepest partial linearization (costs O(depth) per new maximum). */
export function search(
  ops: readonly SearchOp[],
  model: CompiledModel,
  budget: SearchBudget,
  explain = false,
  pendingFirst = false,
): SearchResult {
  const n = ops.length;
  const blind = model.blind?.bind(model);
  let remaining = 0; // operations with a known outcome not yet linearized
  for (const op of ops) {
    if (!Number.isFinite(op.call)) throw new Error('an operation has no finite call time');
    if (!(op.ret >= op.call)) throw new Error('an operation returns before its call');
    if (op.ret !== Infinity) remaining++;
  }
  if (remaining === 0) return { verdict: 'ok', steps: 0, linearization: [] };

  // The main list: a doubly linked list of the completed operations' calls and returns over
  // sorted positions 0..2n-1 (pending operations' positions are left out), head sentinel 2n.
  const sorted = sortEntries(ops);
  const HEAD = 2 * n;
  const next = new Int32Array(2 * n + 1).fill(NIL);
  const prev = new Int32Array(2 * n + 1).fill(NIL);
  const nodeOp = new Int32Array(2 * n);
  const nodeIsCall = new Uint8Array(2 * n);
  const callPos = new Int32Array(n);
  const returnPos = new Int32Array(n);
  const pendingOrd = new Int32Array(n).fill(-1);
  const pendingOps: number[] = []; // pending operations by call position
  let tail = HEAD;
  for (let p = 0; p < 2 * n; p++) {
    const e = sorted[p]!;
    const op = e >> 1;
    nodeOp[p] = op;
    nodeIsCall[p] = (e & 1) === 0 ? 1 : 0;
    if ((e & 1) === 0) callPos[op] = p;
    else returnPos[op] = p;
    if (ops[op]!.ret === Infinity) {
      if ((e & 1) === 0) {
        pendingOrd[op] = pendingOps.length;
        pendingOps.push(op);
      }
      continue;
    }
    next[tail] = p;
    prev[p] = tail;
    tail = p;
  }
  // The pending list: operations with unknown outcome, by call, head sentinel P.
  const P = pendingOps.length;
  const pnext = new Int32Array(P + 1).fill(NIL);
  const pprev = new Int32Array(P + 1).fill(NIL);
  for (let k = 0, t = P; k < P; k++) {
    pnext[t] = k;
    pprev[k] = t;
    t = k;
  }

  const unlink = (nx: Int32Array, pv: Int32Array, x: number): void => {
    nx[pv[x]!] = nx[x]!;
    if (nx[x] !== NIL) pv[nx[x]!] = pv[x]!;
  };
  const relink = (nx: Int32Array, pv: Int32Array, x: number): void => {
    nx[pv[x]!] = x;
    if (nx[x] !== NIL) pv[nx[x]!] = x;
  };

  // Memo of configurations: (completed operations linearized, state) → the sets of pending
  // operations linearized with them. A configuration is dominated by one with the same
  // completed set and state and a subset of its pending operations (pending operations are
  // optional, so the smaller set can do everything the larger can), and is then skipped.
  const cbits = new Uint32Array((n + 31) >>> 5);
  const pbits = new Uint32Array((P + 31) >>> 5);
  const z1 = zobristWords(n, 0x1234567);
  const z2 = zobristWords(n, 0x7654321);
  let h1 = 0;
  let h2 = 0;
  const cache = new Map<number, CacheEntry[]>();
  const dominated = (ns: number): boolean => {
    const key = (h1 ^ mixState(ns, 0x27d4eb2f)) | 0;
    const k2 = (h2 ^ mixState(ns, 0x165667b1)) | 0;
    let bucket = cache.get(key);
    if (bucket !== undefined) {
      for (const c of bucket) {
        if (c.h2 === k2 && c.state === ns && bitsEqual(c.bits, cbits) && (P === 0 || bitsSubset(c.pending!, pbits))) return true;
      }
    }
    const entry: CacheEntry = { h2: k2, state: ns, bits: cbits.slice(), pending: P === 0 ? undefined : pbits.slice() };
    if (bucket === undefined) cache.set(key, [entry]);
    else bucket.push(entry);
    return false;
  };
  const toggle = (op: number): void => {
    const k = pendingOrd[op]!;
    if (k < 0) {
      cbits[op >>> 5]! ^= 1 << (op & 31);
      h1 ^= z1[op]!;
      h2 ^= z2[op]!;
    } else {
      pbits[k >>> 5]! ^= 1 << (k & 31);
    }
  };

  // The stack of linearized operations, with the state before each and, for a pending one,
  // the barrier (first return in the main list) it was tried under.
  const stackOp: number[] = [];
  const stackState: number[] = [];
  const stackBarrier: number[] = [];
  let state = model.init;
  let steps = 0;
  let deepestLen = -1;
  let deepest: SearchResult['deepest'];

  const finish = (verdict: Verdict, unknownReason?: 'steps' | 'time'): SearchResult => {
    if (verdict === 'ok') return { verdict, steps, linearization: [...stackOp] };
    if (verdict === 'illegal') return explain ? { verdict, steps, deepest } : { verdict, steps };
    return { verdict, steps, unknownReason };
  };
  /** Try op in the current state; true if it was linearized (and lifted). */
  const tryOp = (op: number, barrier: number): boolean => {
    steps++;
    if ((steps & 1023) === 0) {
      if (steps > budget.maxSteps) throw new BudgetExceeded('steps');
      if (performance.now() > budget.deadline) throw new BudgetExceeded('time');
    }
    const ns = model.step(state, op);
    if (ns < 0) return false;
    toggle(op);
    if (dominated(ns)) {
      toggle(op);
      return false;
    }
    stackOp.push(op);
    stackState.push(state);
    stackBarrier.push(barrier);
    state = ns;
    const k = pendingOrd[op]!;
    if (k < 0) {
      unlink(next, prev, callPos[op]!);
      unlink(next, prev, returnPos[op]!);
      remaining--;
    } else {
      unlink(pnext, pprev, k);
    }
    return true;
  };

  // Candidates are the calls before the first return in the main list (the barrier) and the
  // pending operations called before it; `pendingFirst` says which group is tried first.
  const MAIN = 0;
  const PEND = 1;
  const first = pendingFirst ? PEND : MAIN;
  let phase = first;
  let cur = NIL; // in the main list
  let pcur = NIL; // in the pending list
  let barrier = NIL; // sorted position of the first return in the main list
  const restart = (): void => {
    barrier = next[HEAD]!;
    while (nodeIsCall[barrier] === 1) barrier = next[barrier]!;
    phase = first;
    cur = next[HEAD]!;
    pcur = pnext[P]!;
  };
  restart();
  try {
    for (;;) {
      if (phase === MAIN) {
        if (cur !== barrier) {
          if (tryOp(nodeOp[cur]!, barrier)) {
            if (remaining === 0) return finish('ok');
            restart();
          } else {
            cur = next[cur]!;
          }
          continue;
        }
        if (first === MAIN) {
          phase = PEND;
          pcur = pnext[P]!;
          continue;
        }
      } else {
        if (pcur !== NIL && callPos[pendingOps[pcur]!]! < barrier) {
          const op = pendingOps[pcur]!;
          // A blind write straight after another pending operation is dominated by trying it
          // without that one (the same state, a smaller pending set): skip it.
          const afterPending = stackOp.length > 0 && pendingOrd[stackOp[stackOp.length - 1]!]! >= 0;
          if (!(afterPending && blind?.(op)) && tryOp(op, barrier)) restart();
          else pcur = pnext[pcur]!;
          continue;
        }
        if (first === PEND) {
          phase = MAIN;
          cur = next[HEAD]!;
          continue;
        }
      }
      // Dead end: the operation returning at `barrier` had to take effect by now, and nothing could.
      if (explain && stackOp.length > deepestLen) {
        deepestLen = stackOp.length;
        deepest = { order: [...stackOp], blockedBy: nodeOp[barrier]!, state };
      }
      if (stackOp.length === 0) return finish('illegal');
      const op = stackOp.pop()!;
      state = stackState.pop()!;
      barrier = stackBarrier.pop()!;
      toggle(op);
      const k = pendingOrd[op]!;
      if (k < 0) {
        relink(next, prev, returnPos[op]!);
        relink(next, prev, callPos[op]!);
        remaining++;
        phase = MAIN;
        cur = next[callPos[op]!]!;
      } else {
        relink(pnext, pprev, k);
        phase = PEND;
        pcur = pnext[k]!;
      }
    }
  } catch (e) {
    if (e instanceof BudgetExceeded) return finish('unknown', e.reason);
    throw e;
  }
}

class BudgetExceeded extends Error {
  constructor(readonly reason: 'steps' | 'time') {
    super(`search budget exceeded (${reason})`);
  }
}
