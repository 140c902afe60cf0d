// Shrinking a non-linearizable key history to a small counterexample that still proves the
// violation. Every transformation used is sound: if the original history were linearizable, so
// would the shrunk one be; hence a shrunk history the checker rejects is a genuine witness of
// the original's violation, not an artefact of the shrinking.
//
// 1. Shortest failing prefix. Cut the history right after a return event: operations called
//    before the cut stay, those that had not returned by then become pending (unknown outcome,
//    output dropped). Linearizability is closed under such prefixes, so "the cut is not
//    linearizable" is monotone in the cut point, and a binary search finds the earliest cut
//    that fails (O(log n) checks). It ends with the return of the operation that first could
//    not be explained.
// 2. Dropping operations that cannot change the state: known-outcome gets, failed CAS, deletes
//    that report deleting nothing. Removing them from any linearization leaves a valid one.
// 3. Dropping writes nobody saw: a put, successful or pending CAS, or delete (which writes
//    "absent") whose value no operation observes (no get returned it, no CAS expected it, no
//    delete reported finding nothing, for "absent"), provided no operation that might take
//    effect after it reads the state without naming a value (a failed or pending CAS, a delete
//    reporting `deleted`). In any linearization the operations between such a write and the
//    next write cannot observe it, so the write can be taken out without changing any output.
//    A write whose only observers are effectless reads goes together with them (2 then 3),
//    which keeps the remaining history as constrained, and so as cheap to check, as before.
// 4. Forgetting what is not needed: a successful CAS becomes a put of its new value (its
//    comparison is dropped), a delete loses its `deleted` report, a CAS with unknown outcome
//    becomes a put with unknown outcome (which may set its value at any time after its call
//    or never, a superset of what the CAS may do). Each only widens the set of valid orders.
//    Besides focusing the counterexample, this unblocks step 3 (unknown-outcome CAS otherwise
//    block the removal of every write called before them, and of each other).
// Steps 2 to 4 are greedy with chunks (try all candidates at once, then halves, quarters, …,
// single operations), keeping a removal only if the result is still not linearizable, and
// repeat until nothing more can go. The result is 1-minimal for these edits unless the
// shrink budget runs out first, in which case the best witness so far is returned. Checks of
// candidates that are still illegal are exhaustive searches, so shrinking a long key history
// full of concurrent writes costs seconds; it is bounded by its own budget.

import { sortEntries } from './wgl.js';
import { describeOp, isPending, type Op } from './history.js';

export type IllegalTest = (ops: readonly Op[]) => boolean;

/** The history cut right after sorted event position `pos` (see sortEntries). */
export function cutAfter(ops: readonly Op[], sorted: Int32Array, pos: number): Op[] {
  const callPos = new Int32Array(ops.length);
  const retPos = new Int32Array(ops.length);
  for (let p = 0; p < sorted.length; p++) {
    const e = sorted[p]!;
    if ((e & 1) === 0) callPos[e >> 1] = p;
    else retPos[e >> 1] = p;
  }
  const out: Op[] = [];
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i]!;
    if (callPos[i]! > pos) continue;
    if (retPos[i]! <= pos) {
      out.push(op);
      continue;
    }
    if (op.input.f === 'get') continue; // a pending read constrains nothing
    out.push(isPending(op) ? op : { index: op.index, client: op.client, key: op.key, input: op.input, call: op.call, ret: Infinity, cut: true });
  }
  return out;
}

/**
 * The shortest prefix (cut after a return) that `isIllegal` rejects. `ops` itself must be
 * rejected; if no shorter cut is (or the checks run out of budget), `ops` comes back.
 */
export function shortestFailingPrefix(ops: readonly Op[], isIllegal: IllegalTest, deadline: number): Op[] {
  const sorted = sortEntries(ops);
  const returns: number[] = [];
  for (let p = 0; p < sorted.length; p++) {
    const e = sorted[p]!;
    if ((e & 1) === 1 && ops[e >> 1]!.ret !== Infinity) returns.push(p);
  }
  let lo = 0;
  let hi = returns.length - 1;
  let best: Op[] | undefined;
  while (lo <= hi && performance.now() < deadline) {
    const mid = (lo + hi) >> 1;
    const cut = cutAfter(ops, sorted, returns[mid]!);
    if (isIllegal(cut)) {
      best = cut;
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  return best ?? [...ops];
}

/** Operations that never change the state, whatever order they take effect in. */
export function isEffectless(op: Op): boolean {
  if (isPending(op)) return false;
  switch (op.input.f) {
    case 'get':
      return true;
    case 'cas':
      return op.output!.succeeded === false;
    case 'delete':
      return op.output!.deleted === false;
    default:
      return false;
  }
}

/** Whether `op`'s outcome names value `v` of the key (null: absent). */
function observes(op: Op, v: string | null): boolean {
  const i = op.input;
  if (i.f === 'cas' && i.expected === v) return true;
  if (isPending(op)) return false;
  if (i.f === 'get') return op.output!.value === v;
  if (i.f === 'delete') return v === null && op.output!.deleted === false;
  return false;
}

/** Reads the state without naming a value: its outcome can change when an unseen write is removed. */
function readsAnonymously(op: Op): boolean {
  if (op.input.f === 'cas') return isPending(op) || op.output!.succeeded === false;
  if (op.input.f === 'delete') return !isPending(op) && op.output!.deleted !== undefined;
  return false;
}

/** Writes in `ops` that can be removed soundly on their own (step 3 above). */
export function unseenWrites(ops: readonly Op[]): Op[] {
  return writeGroups(ops)
    .filter((g) => g.length === 1)
    .map((g) => g[0]!);
}

/**
 * Each write with the operations that observe its value, when all of those are effectless and
 * so can go first (step 2), after which the write is unseen and can go too (step 3). Removing a
 * write with its readers keeps the rest of the history as constrained as it was, which keeps
 * each check of a shrinking candidate cheap.
 */
export function writeGroups(ops: readonly Op[]): Op[][] {
  const out: Op[][] = [];
  for (const w of ops) {
    const i = w.input;
    if (i.f === 'get' || isEffectless(w)) continue;
    const v = i.f === 'delete' ? null : i.value;
    const group = [w];
    let ok = true;
    for (const o of ops) {
      if (o === w) continue;
      if (observes(o, v)) {
        if (!isEffectless(o)) {
          ok = false;
          break;
        }
        group.push(o);
      } else if (o.ret >= w.call && readsAnonymously(o)) {
        ok = false;
        break;
      }
    }
    if (ok) out.push(group);
  }
  return out;
}

/** A shrinking edit: remove `ops`, or (one operation) replace it by a weaker form `to`. */
export interface Edit {
  readonly ops: readonly Op[];
  readonly to: Op | null;
}

/** Step 4's edits available in `ops`. */
export function relaxations(ops: readonly Op[]): Edit[] {
  const out: Edit[] = [];
  for (const op of ops) {
    const was = op.was ?? describeOp(op);
    if (isPending(op)) {
      if (op.input.f === 'cas') out.push({ ops: [op], to: { ...op, input: { f: 'put', value: op.input.value }, was } });
      continue;
    }
    if (op.input.f === 'cas' && op.output!.succeeded) {
      out.push({ ops: [op], to: { ...op, input: { f: 'put', value: op.input.value }, output: {}, was } });
    } else if (op.input.f === 'delete' && op.output!.deleted !== undefined) {
      out.push({ ops: [op], to: { ...op, output: {}, was } });
    }
  }
  return out;
}

/**
 * Every edit steps 2 to 4 allow in `ops`; any subset of them may be applied together. Ordered
 * for the chunked search: writes with their readers, oldest first (the failure is at the end
 * of the cut prefix, so old operations are the likeliest to go in one large chunk), then
 * single effectless operations, then relaxations.
 */
export function edits(ops: readonly Op[]): Edit[] {
  const groups = writeGroups(ops).sort((a, b) => a[0]!.call - b[0]!.call);
  const grouped = new Set(groups.flat());
  return [
    ...groups.map((g): Edit => ({ ops: g, to: null })),
    ...ops.filter((o) => isEffectless(o) && !grouped.has(o)).map((o): Edit => ({ ops: [o], to: null })),
    ...ops.filter((o) => isEffectless(o) && grouped.has(o)).map((o): Edit => ({ ops: [o], to: null })),
    ...relaxations(ops),
  ];
}

/** `ops` with `chosen` applied (a removal wins over a relaxation of the same operation). */
export function applyEdits(ops: readonly Op[], chosen: readonly Edit[]): Op[] {
  const m = new Map<Op, Op | null>();
  for (const e of chosen) {
    if (e.to === null) for (const o of e.ops) m.set(o, null);
    else if (m.get(e.ops[0]!) !== null) m.set(e.ops[0]!, e.to);
  }
  const out: Op[] = [];
  for (const o of ops) {
    const to = m.has(o) ? m.get(o)! : o;
    if (to !== null) out.push(to);
  }
  return out;
}

/** Steps 2 to 4: greedy chunked edits. `complete` is false when the deadline cut it short. */
export function shrink(ops: readonly Op[], isIllegal: IllegalTest, deadline: number): { ops: Op[]; complete: boolean } {
  let cur = [...ops];
  for (;;) {
    let cands = edits(cur);
    if (cands.length === 0) return { ops: cur, complete: true };
    let progress = false;
    for (let chunk = cands.length; chunk >= 1; chunk = chunk === 1 ? 0 : Math.ceil(chunk / 2)) {
      let i = 0;
      while (i < cands.length) {
        if (performance.now() > deadline) return { ops: cur, complete: false };
        const trial = applyEdits(cur, cands.slice(i, i + chunk));
        if (isIllegal(trial)) {
          cur = trial;
          // edits of operations now gone or replaced no longer apply
          const live = new Set(cur);
          const alive = (e: Edit): boolean => e.ops.every((o) => live.has(o));
          const before = cands.slice(0, i).filter(alive);
          cands = before.concat(cands.slice(i + chunk).filter(alive));
          i = before.length;
          progress = true;
        } else {
          i += chunk;
        }
      }
      if (cands.length === 0) break;
      chunk = Math.min(chunk, cands.length);
    }
    if (!progress) return { ops: cur, complete: true };
  }
}
