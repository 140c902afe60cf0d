// Tests of the linearizability checker: hand-made known-good and known-bad histories, a
// brute-force oracle cross-checked on thousands of small random histories, the soundness of
// every shrinking step, large random linearizable histories, and the budget path.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkLinearizability, checkKey } from './linearizability.js';
import { normalise, type KvInput, type KvOperation, type KvOutput, type Op } from './history.js';
import { cutAfter, edits, applyEdits, shortestFailingPrefix } from './minimize.js';
import { search, sortEntries } from './wgl.js';
import { compileKv } from './kv-model.js';
import { simulateRegister } from './simulate.js';
import { prng } from '../../testkit/prng.js';

// --- history builders: ret undefined means the outcome is unknown ---------------------------
type R = number | undefined;
const mk = (client: number, input: KvInput, call: number, ret: R, output: KvOutput | undefined, key = 'k'): KvOperation =>
  ret === undefined ? { client, key, input, call } : { client, key, input, call, return: ret, output };
const put = (c: number, v: string, call: number, ret: R, key?: string) => mk(c, { f: 'put', value: v }, call, ret, {}, key);
const get = (c: number, v: string | null, call: number, ret: R, key?: string) => mk(c, { f: 'get' }, call, ret, { value: v }, key);
const cas = (c: number, e: string | null, v: string, ok: boolean, call: number, ret: R, key?: string) =>
  mk(c, { f: 'cas', expected: e, value: v }, call, ret, { succeeded: ok }, key);
const del = (c: number, call: number, ret: R, deleted?: boolean, key?: string) =>
  mk(c, { f: 'delete' }, call, ret, deleted === undefined ? {} : { deleted }, key);

const verdict = (h: KvOperation[], initialValues?: Record<string, string | null>) => checkLinearizability(h, { initialValues }).verdict;

// --- a brute-force oracle: try every order that respects real time ---------------------------
function bruteForce(ops: readonly Op[], initial: string | null = null): boolean {
  const n = ops.length;
  const done = new Array<boolean>(n).fill(false);
  let left = ops.filter((o) => o.ret !== Infinity).length;
  const stepOk = (s: string | null, o: Op): [boolean, string | null] => {
    const i = o.input;
    const pend = o.ret === Infinity;
    switch (i.f) {
      case 'get':
        return [pend || o.output!.value === s, s];
      case 'put':
        return [true, i.value];
      case 'cas': {
        const m = s === i.expected;
        if (pend) return [true, m ? i.value : s];
        return [o.output!.succeeded === m, m ? i.value : s];
      }
      case 'delete':
        return [pend || o.output!.deleted === undefined || o.output!.deleted === (s !== null), null];
    }
  };
  const go = (s: string | null): boolean => {
    if (left === 0) return true; // pending ops left over never took effect
    // the earliest return among completed, unlinearized ops bounds who may go next
    let bound = Infinity;
    for (let i = 0; i < n; i++) if (!done[i] && ops[i]!.ret < bound) bound = ops[i]!.ret;
    for (let i = 0; i < n; i++) {
      const o = ops[i]!;
      if (done[i] || o.call > bound) continue;
      const [ok, s2] = stepOk(s, o);
      if (!ok) continue;
      done[i] = true;
      if (o.ret !== Infinity) left--;
      const r = go(s2);
      done[i] = false;
      if (o.ret !== Infinity) left++;
      if (r) return true;
    }
    return false;
  };
  return go(initial);
}

/** Small random histories over a tiny value domain: many are not linearizable. */
function randomSmall(rnd: () => number, n: number): KvOperation[] {
  const vals = ['a', 'b', 'c'];
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const h: KvOperation[] = [];
  for (let i = 0; i < n; i++) {
    const call = Math.floor(rnd() * 20);
    const ret = rnd() < 0.15 ? undefined : call + Math.floor(rnd() * 8);
    const y = rnd();
    const client = i;
    if (y < 0.35) h.push(get(client, rnd() < 0.2 ? null : pick(vals), call, ret));
    else if (y < 0.65) h.push(put(client, pick(vals), call, ret));
    else if (y < 0.9) h.push(cas(client, rnd() < 0.25 ? null : pick(vals), pick(vals), rnd() < 0.5, call, ret));
    else h.push(del(client, call, ret, rnd() < 0.5 ? undefined : rnd() < 0.5));
  }
  return h;
}

const BIG = { maxSteps: 1e7, deadline: Infinity };
const lin = (ops: readonly Op[]): boolean => checkKey(ops, null, BIG.maxSteps, BIG.deadline).verdict === 'ok';

// --- known-good ---------------------------------------------------------------------------------

test('sequential histories of every operation are linearizable', () => {
  assert.equal(verdict([]), 'ok');
  assert.equal(
    verdict([
      get(1, null, 0, 1),
      put(1, 'a', 2, 3),
      get(2, 'a', 4, 5),
      put(2, 'b', 6, 7),
      cas(1, 'b', 'c', true, 8, 9),
      cas(2, 'b', 'd', false, 10, 11),
      get(1, 'c', 12, 13),
      del(2, 14, 15, true),
      del(1, 16, 17, false),
      del(1, 18, 19),
      get(2, null, 20, 21),
      cas(1, null, 'e', true, 22, 23),
      get(1, 'e', 24, 25),
    ]),
    'ok',
  );
});

test('overlapping puts and gets: a read concurrent with a write may see either value', () => {
  assert.equal(verdict([put(1, '1', 0, 10), get(2, '1', 5, 15), get(3, null, 2, 12)]), 'ok');
  // two concurrent puts, then reads agreeing on either order
  assert.equal(verdict([put(1, '1', 0, 10), put(2, '2', 0, 10), get(3, '1', 20, 30), get(3, '1', 31, 40)]), 'ok');
  assert.equal(verdict([put(1, '1', 0, 10), put(2, '2', 0, 10), get(3, '2', 20, 30)]), 'ok');
  // a read whose interval touches a write's (closed intervals: concurrent)
  assert.equal(verdict([put(1, '1', 0, 10), get(2, null, 10, 20)]), 'ok');
  // a read sees a write that is still in flight, a later read sees it too
  assert.equal(verdict([put(1, '1', 0, 100), get(2, '1', 10, 20), get(3, '1', 30, 40)]), 'ok');
});

test('CAS races: of two CAS on the same expected value one wins, the other fails', () => {
  assert.equal(verdict([cas(1, null, 'a', true, 0, 10), cas(2, null, 'b', false, 0, 10), get(3, 'a', 20, 30)]), 'ok');
  assert.equal(verdict([put(0, '0', 0, 1), cas(1, '0', 'a', false, 5, 10), cas(2, '0', 'b', true, 5, 10), get(3, 'b', 20, 30)]), 'ok');
  // a chain: the second CAS expects the first one's value
  assert.equal(verdict([put(0, '0', 0, 1), cas(1, '0', 'a', true, 5, 15), cas(2, 'a', 'b', true, 5, 15), get(3, 'b', 20, 30)]), 'ok');
});

test('unknown outcomes: the write may have taken effect, later, or never', () => {
  // took effect
  assert.equal(verdict([put(1, '1', 0, 10), put(2, '2', 5, undefined), get(3, '2', 20, 30)]), 'ok');
  // did not (or not yet)
  assert.equal(verdict([put(1, '1', 0, 10), put(2, '2', 5, undefined), get(3, '1', 20, 30)]), 'ok');
  // took effect after the client gave up, between two reads
  assert.equal(verdict([put(1, '1', 0, 10), put(2, '2', 5, undefined), get(3, '1', 20, 30), get(3, '2', 40, 50)]), 'ok');
  // an unknown CAS that took effect, and one that could not have
  assert.equal(verdict([put(1, 'x', 0, 1), cas(2, 'x', 'y', true, 2, undefined), get(3, 'y', 10, 11)]), 'ok');
  assert.equal(verdict([put(1, 'x', 0, 1), cas(2, 'z', 'y', true, 2, undefined), get(3, 'x', 10, 11)]), 'ok');
  // an unknown delete
  assert.equal(verdict([put(1, 'x', 0, 1), del(2, 2, undefined), get(3, null, 10, 11), put(1, 'w', 12, 13), get(3, 'w', 14, 15)]), 'ok');
  // only unknown outcomes, and a read whose answer was lost (dropped: constrains nothing)
  assert.equal(verdict([put(1, 'x', 0, undefined), get(2, 'never', 0, undefined)]), 'ok');
  const r = checkLinearizability([get(2, 'never', 0, undefined), put(1, 'x', 0, 1)]);
  assert.equal(r.droppedPendingReads, 1);
});

test('keys are independent; bigint nanosecond times; initial values', () => {
  const t = (ms: number) => 1_000_000_000_000n + BigInt(ms) * 1_000_000n;
  const h: KvOperation[] = [
    { client: 1, key: 'a', input: { f: 'put', value: '1' }, call: t(0), return: t(1), output: {} },
    { client: 2, key: 'b', input: { f: 'put', value: '1' }, call: t(0), return: t(1), output: {} },
    { client: 1, key: 'a', input: { f: 'get' }, call: t(2), return: t(3), output: { value: '1' } },
    { client: 2, key: 'b', input: { f: 'get' }, call: t(2), return: t(3), output: { value: '1' } },
  ];
  const r = checkLinearizability(h);
  assert.equal(r.verdict, 'ok');
  assert.deepEqual(r.keys.map((k) => k.key).sort(), ['a', 'b']);
  assert.equal(verdict([get(1, 'seed', 0, 1)], { k: 'seed' }), 'ok');
  assert.equal(verdict([get(1, 'seed', 0, 1)]), 'illegal');
});

test('malformed histories are refused with the operation named', () => {
  assert.throws(() => checkLinearizability([{ client: 1, key: 'k', input: { f: 'get' }, call: 5, return: 4, output: { value: null } }]), /returns before its call/);
  assert.throws(() => checkLinearizability([{ client: 1, key: 'k', input: { f: 'get' }, call: 0, return: 4, output: {} }]), /operation 0.*value/);
  assert.throws(() => checkLinearizability([{ client: 1, key: 'k', input: { f: 'cas', expected: null, value: 'x' }, call: 0, return: 4, output: {} }]), /succeeded/);
});

// --- known-bad ------------------------------------------------------------------------------------

test('a stale read after a completed write is caught, with a 3-operation counterexample', () => {
  const r = checkLinearizability([put(1, '1', 0, 10), put(1, '2', 20, 30), get(2, '1', 40, 50)]);
  assert.equal(r.verdict, 'illegal');
  const ce = r.keys[0]!.counterexample!;
  assert.equal(ce.ops.length, 3);
  assert.equal(ce.minimal, true);
  assert.equal(ce.ops[ce.blockedBy]!.input.f, 'get');
  assert.equal(ce.stateAtBlock, '2');
});

test('a lost write (acknowledged, then read as absent) is caught', () => {
  assert.equal(verdict([put(1, '1', 0, 10), get(2, null, 20, 30)]), 'illegal');
  // also when the loss shows only after other traffic
  assert.equal(verdict([put(1, '1', 0, 10), get(2, '1', 11, 12), get(3, '1', 13, 14), get(2, null, 20, 30)]), 'illegal');
});

test('two CAS both succeeding on the same expected value is caught', () => {
  assert.equal(verdict([put(0, '0', 0, 1), cas(1, '0', 'a', true, 5, 10), cas(2, '0', 'b', true, 5, 10)]), 'illegal');
  assert.equal(verdict([cas(1, null, 'a', true, 0, 10), cas(2, null, 'b', true, 0, 10)]), 'illegal');
});

test('a read of a value never written is caught, and is its own counterexample', () => {
  const r = checkLinearizability([put(1, '1', 0, 10), get(2, 'ghost', 20, 30), put(1, '2', 31, 40), get(2, '2', 41, 50)]);
  assert.equal(r.verdict, 'illegal');
  const ce = r.keys[0]!.counterexample!;
  assert.deepEqual(ce.ops.map((o) => o.index), [1]);
  assert.deepEqual(ce.partial, []);
});

test('other violations: real-time order, a failed CAS that should have won, a wrong delete count, reads going back', () => {
  // the write was called after the read that saw it returned
  assert.equal(verdict([get(1, '2', 0, 10), put(2, '2', 20, undefined)]), 'illegal');
  assert.equal(verdict([put(1, 'a', 0, 10), cas(2, 'a', 'b', false, 20, 30)]), 'illegal');
  assert.equal(verdict([put(1, 'a', 0, 10), del(2, 20, 30, false)]), 'illegal');
  assert.equal(verdict([del(2, 20, 30, true)]), 'illegal');
  assert.equal(verdict([put(1, '1', 0, 100), put(2, '2', 0, 100), get(3, '2', 110, 120), get(3, '1', 130, 140)]), 'illegal');
});

test('one bad key makes the history fail; the good keys are still reported ok', () => {
  const r = checkLinearizability([put(1, '1', 0, 10, 'good'), get(2, '1', 20, 30, 'good'), put(1, '1', 0, 10, 'bad'), get(2, null, 20, 30, 'bad')]);
  assert.equal(r.verdict, 'illegal');
  assert.equal(r.keys[0]!.key, 'bad');
  assert.equal(r.keys[0]!.verdict, 'illegal');
  assert.equal(r.keys.find((k) => k.key === 'good')!.verdict, 'ok');
});

// --- the oracle ---------------------------------------------------------------------------------

test('agrees with brute force on 1500 small random histories (with unknown outcomes)', () => {
  const rnd = prng(42);
  let illegal = 0;
  for (let i = 0; i < 1500; i++) {
    const h = randomSmall(rnd, 2 + Math.floor(rnd() * 6));
    const { ops } = normalise(h);
    const expected = bruteForce(ops) ? 'ok' : 'illegal';
    assert.equal(checkKey(ops, null, BIG.maxSteps, BIG.deadline).verdict, expected, JSON.stringify(h));
    // both orders of trying unknown outcomes, without the never-written shortcut
    for (const pendingFirst of [false, true]) {
      assert.equal(search(ops, compileKv(ops), BIG, false, pendingFirst).verdict, expected, `pendingFirst=${pendingFirst} ${JSON.stringify(h)}`);
    }
    if (expected === 'illegal') illegal++;
  }
  assert.ok(illegal > 150 && illegal < 1350, `both kinds exercised (${illegal} illegal)`);
});

test('shrinking is sound: cuts, removals and relaxations of a linearizable history stay linearizable', () => {
  const rnd = prng(7);
  let tried = 0;
  for (let i = 0; i < 2000; i++) {
    const { ops } = normalise(randomSmall(rnd, 3 + Math.floor(rnd() * 5)));
    if (!bruteForce(ops)) continue;
    const sorted = sortEntries(ops);
    for (let p = 0; p < sorted.length; p++) {
      const c = cutAfter(ops, sorted, p);
      assert.ok(bruteForce(c), `cut after ${p} of ${JSON.stringify(ops)}`);
    }
    const all = edits(ops);
    // subsets of the edits: all at once, each alone, and a random half
    for (const chosen of [all, ...all.map((e) => [e]), all.filter(() => rnd() < 0.5)]) {
      const rest = applyEdits(ops, chosen);
      assert.ok(bruteForce(rest), `applying ${JSON.stringify(chosen)} to ${JSON.stringify(ops)}`);
      tried++;
    }
  }
  assert.ok(tried > 500, `exercised ${tried} removals`);
});

test('counterexamples of small random histories are illegal, and never larger than the history', () => {
  const rnd = prng(99);
  let seen = 0;
  for (let i = 0; i < 600 && seen < 150; i++) {
    const h = randomSmall(rnd, 3 + Math.floor(rnd() * 5));
    const r = checkLinearizability(h, { maxCounterexamples: 1 });
    if (r.verdict !== 'illegal') continue;
    seen++;
    const ce = r.keys[0]!.counterexample!;
    assert.ok(ce.ops.length >= 1 && ce.ops.length <= h.length);
    assert.equal(bruteForce(ce.ops), false, JSON.stringify(ce.ops));
    assert.ok(ce.blockedBy >= 0 && ce.blockedBy < ce.ops.length);
  }
  assert.ok(seen > 50);
});

// --- scale ----------------------------------------------------------------------------------------

test('large random linearizable histories (one key, concurrent clients, unknown outcomes) pass fast', () => {
  for (const [seed, clients, n, pendingRate] of [
    [1, 6, 2000, 0.01],
    [2, 10, 1500, 0],
    [3, 4, 1500, 0.05],
  ] as const) {
    const h = simulateRegister({ seed, clients, ops: n, pendingRate });
    const u = process.cpuUsage();
    const r = checkLinearizability(h);
    const cpu = process.cpuUsage(u);
    assert.equal(r.verdict, 'ok', `seed ${seed}`);
    assert.equal(r.ops, h.length - h.filter((o) => o.input.f === 'get' && o.return === undefined).length);
    assert.ok((cpu.user + cpu.system) / 1000 < 1500, `seed ${seed} took ${(cpu.user + cpu.system) / 1000} ms of CPU`);
  }
  // many keys
  const h = simulateRegister({ seed: 4, clients: 8, ops: 2000, keys: ['a', 'b', 'c', 'd', 'e'], pendingRate: 0.02 });
  assert.equal(checkLinearizability(h).verdict, 'ok');
});

test('a stale read hidden in a large history shrinks to a handful of operations', () => {
  const h = simulateRegister({ seed: 5, clients: 6, ops: 1000 });
  const end = Math.max(...h.map((o) => Number(o.return ?? o.call))) + 10;
  // the value of some completed put early on, written by no one else (values are unique)
  const old = h.find((o) => o.input.f === 'put' && o.return !== undefined)!;
  const oldValue = (old.input as { value: string }).value;
  h.push(put(100, 'fresh', end, end + 10), get(101, oldValue, end + 20, end + 30));
  const r = checkLinearizability(h);
  assert.equal(r.verdict, 'illegal');
  const ce = r.keys[0]!.counterexample!;
  assert.equal(ce.minimal, true);
  // the stale read, the write of its value, and one later overwrite (ours, or an earlier one)
  assert.equal(ce.ops.length, 3, `counterexample of ${ce.ops.length}`);
  assert.equal(ce.ops[ce.blockedBy]!.index, h.length - 1);
  assert.ok(ce.ops.some((o) => o.input.f === 'put' && o.input.value === oldValue));
  assert.equal(bruteForce(ce.ops), false);
});

test('a read of a never-written value in a large history is found at once and is the counterexample', () => {
  const h = simulateRegister({ seed: 6, clients: 6, ops: 3000, pendingRate: 0.01 });
  const i = h.findIndex((o, j) => j > 2000 && o.input.f === 'get' && o.return !== undefined);
  h[i] = { ...h[i]!, output: { value: 'never-written' } };
  const r = checkLinearizability(h);
  assert.equal(r.verdict, 'illegal');
  assert.deepEqual(r.keys[0]!.counterexample!.ops.map((o) => o.index), [i]);
});

test('a violation among many unknown outcomes is still decided (medium history)', () => {
  const h = simulateRegister({ seed: 9, clients: 4, ops: 120, pendingRate: 0.06 });
  assert.equal(checkLinearizability(h).verdict, 'ok');
  // make a late read stale: it returns the value its key held before the last write it saw
  const end = Math.max(...h.map((o) => Number(o.return ?? o.call))) + 10;
  const first = h.find((o) => o.input.f === 'put' && o.return !== undefined)!;
  h.push(put(100, 'last', end, end + 10), get(101, (first.input as { value: string }).value, end + 20, end + 30));
  const r = checkLinearizability(h);
  assert.equal(r.verdict, 'illegal');
  assert.ok(r.keys[0]!.pending >= 6, `${r.keys[0]!.pending} pending`);
  const ce = r.keys[0]!.counterexample!;
  assert.ok(ce.ops.length <= 4, `counterexample of ${ce.ops.length}`);
  assert.equal(bruteForce(ce.ops), false);
});

test('shortestFailingPrefix ends at the first return that cannot be explained', () => {
  const { ops } = normalise([put(1, '1', 0, 10), get(2, null, 20, 30), put(1, '2', 40, 50), get(2, '2', 60, 70)]);
  const p = shortestFailingPrefix(ops, (c) => !lin(c), Infinity);
  assert.deepEqual(p.map((o) => o.index), [0, 1]);
});

// --- budget ---------------------------------------------------------------------------------------

/**
 * n concurrent put/get pairs, then a completed put and a stale read of the first value: the
 * read is possible in isolation, so only an exhaustive search (2^n orders) can reject it.
 */
function hard(n: number): KvOperation[] {
  const h: KvOperation[] = [];
  for (let i = 0; i < n; i++) h.push(put(i, `v${i}`, 0, 100), get(n + i, `v${i}`, 0, 100));
  h.push(put(2 * n, 'z', 200, 210), get(2 * n + 1, 'v0', 220, 230));
  return h;
}

test('the budget: out of steps or time is unknown, never yes', () => {
  const r = checkLinearizability(hard(30), { maxStepsPerKey: 20_000 });
  assert.equal(r.verdict, 'unknown');
  assert.equal(r.keys[0]!.unknownReason, 'steps');
  assert.ok(r.keys[0]!.steps <= 21_024, `${r.keys[0]!.steps} steps`);
  const t = checkLinearizability(hard(30), { timeoutMs: 20 });
  assert.equal(t.verdict, 'unknown');
  assert.equal(t.keys[0]!.unknownReason, 'time');
  // the same shape, small enough to finish, is decided
  assert.equal(checkLinearizability(hard(6)).verdict, 'illegal');
  // a failing key wins over an undecided one
  const both = checkLinearizability([...hard(30), put(1, '1', 0, 10, 'x'), get(2, null, 20, 30, 'x')], { maxStepsPerKey: 20_000 });
  assert.equal(both.verdict, 'illegal');
  assert.deepEqual(both.keys.map((k) => k.verdict), ['illegal', 'unknown']);
});
