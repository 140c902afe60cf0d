// Linearizability of a key-value history: the entry point a chaos harness calls.
//
// checkLinearizability(history) partitions the history by key (linearizability is local, so
// the whole history is linearizable iff every key's is), looks for reads of values no write
// could have produced (a cheap exact check), runs the WGL search (wgl.ts) on each key with the
// single-key model (kv-model.ts), and for keys that fail shrinks the key's history
// to a small counterexample (minimize.ts) and explains it: the longest order the search could
// build, the operation it could not get past, and the value the key held there.
// formatReport() prints "linearizable: yes|no|unknown" with a text timeline of each
// counterexample (render.ts); renderHtml() draws the same as SVG in one HTML page.
//
// Verdicts: `illegal` on a key is a proof (the search exhausted every order). `unknown` means a
// budget ran out (steps per key, or the overall deadline); it is never reported as `yes`.

import { search, type SearchResult, type Verdict } from './wgl.js';
import { compileKv } from './kv-model.js';
import { normalise, partitionByKey, type KvOperation, type Op } from './history.js';
import { shortestFailingPrefix, shrink } from './minimize.js';

export interface CheckOptions {
  /** Wall-clock budget for the whole check including shrinking, ms. Default 60 000. */
  readonly timeoutMs?: number;
  /** Model steps allowed per key (and per check while shrinking). Default 20 000 000. */
  readonly maxStepsPerKey?: number;
  /** Shrink failing keys to small counterexamples. Default true. */
  readonly minimize?: boolean;
  /** Shrinking budget per failing key, ms. Default 10 000. */
  readonly minimizeTimeoutMs?: number;
  /** Failing keys to shrink and explain; the rest are reported without a counterexample. Default 3. */
  readonly maxCounterexamples?: number;
  /** Each key's value before the history; keys not listed start absent. */
  readonly initialValues?: Readonly<Record<string, string | null>>;
}

export interface Counterexample {
  readonly key: string;
  /** Operations of the counterexample, by call time; `index` points into the checked history. */
  readonly ops: readonly Op[];
  /** How many operations the key had in the full history. */
  readonly fromOps: number;
  /** True when shrinking finished; false when its budget ran out (still a valid witness, maybe not minimal). */
  readonly minimal: boolean;
  /** The longest partial linearization found, as positions in `ops`, in the order they take effect. */
  readonly partial: readonly number[];
  /** Position in `ops` of the operation the search could not get past. */
  readonly blockedBy: number;
  /** The key's value after `partial` (null: absent). */
  readonly stateAtBlock: string | null;
  /** The key's value before the history. */
  readonly initial: string | null;
}

export interface KeyReport {
  readonly key: string;
  readonly verdict: Verdict;
  /** Operations checked for this key (unknown-outcome gets are not counted). */
  readonly ops: number;
  /** Operations with an unknown outcome among them. */
  readonly pending: number;
  readonly steps: number;
  readonly ms: number;
  readonly unknownReason?: 'steps' | 'time';
  readonly counterexample?: Counterexample;
}

export interface LinearizabilityReport {
  /** illegal if any key is; otherwise unknown if any key is; otherwise ok. */
  readonly verdict: Verdict;
  readonly ops: number;
  readonly droppedPendingReads: number;
  readonly ms: number;
  /** Every key, failing ones first. */
  readonly keys: readonly KeyReport[];
}

/**
 * An operation that saw a value no other write could have produced by its return (a get
 * returning it, a successful CAS expecting it): on its own a violation, found without searching.
 */
export function neverWritten(ops: readonly Op[], initial: string | null): Op | undefined {
  const writers = new Map<string, Op[]>();
  for (const o of ops) {
    const i = o.input;
    if ((i.f !== 'put' && i.f !== 'cas') || (i.f === 'cas' && o.output?.succeeded === false)) continue;
    let list = writers.get(i.value);
    if (list === undefined) writers.set(i.value, (list = []));
    list.push(o);
  }
  for (const o of ops) {
    if (o.output === undefined) continue;
    const v = o.input.f === 'get' ? o.output.value : o.input.f === 'cas' && o.output.succeeded ? o.input.expected : null;
    if (v === null || v === undefined || v === initial) continue;
    if (!(writers.get(v) ?? []).some((w) => w !== o && w.call <= o.ret)) return o;
  }
  return undefined;
}

/**
 * Check one key's operations (exposed for tests and for harnesses that partition themselves).
 * A never-written read is reported at once; otherwise the search runs twice if need be, as a
 * portfolio: first trying operations with unknown outcome as early as possible (fast when the
 * history is linearizable), with a quarter of the budget, then as late as possible (the order
 * in which the dominance memo prunes best, so faster on violations), with the rest. Each run
 * is exact when it finishes, so the first definite answer stands.
 */
export function checkKey(ops: readonly Op[], initial: string | null, maxSteps: number, deadline: number): SearchResult {
  if (neverWritten(ops, initial) !== undefined) return { verdict: 'illegal', steps: 0 };
  const model = compileKv(ops, initial);
  if (!ops.some((o) => o.ret === Infinity)) return search(ops, model, { maxSteps, deadline });
  const now = performance.now();
  const eager = search(ops, model, { maxSteps: Math.max(1024, Math.floor(maxSteps / 4)), deadline: Math.min(deadline, now + (deadline - now) / 4) }, false, true);
  if (eager.verdict !== 'unknown') return eager;
  const lazy = search(ops, model, { maxSteps: Math.max(0, maxSteps - eager.steps), deadline }, false, false);
  return { ...lazy, steps: eager.steps + lazy.steps };
}

export function checkLinearizability(history: readonly KvOperation[], options: CheckOptions = {}): LinearizabilityReport {
  const t0 = performance.now();
  const deadline = t0 + (options.timeoutMs ?? 60_000);
  const maxSteps = options.maxStepsPerKey ?? 20_000_000;
  const { ops, droppedPendingReads } = normalise(history);
  const keys: KeyReport[] = [];
  const partitions = partitionByKey(ops);
  for (const [key, kops] of partitions) {
    const k0 = performance.now();
    const initial = options.initialValues?.[key] ?? null;
    const r = checkKey(kops, initial, maxSteps, deadline);
    keys.push({
      key,
      verdict: r.verdict,
      ops: kops.length,
      pending: kops.filter((o) => o.ret === Infinity).length,
      steps: r.steps,
      ms: performance.now() - k0,
      ...(r.unknownReason ? { unknownReason: r.unknownReason } : {}),
    });
  }
  const rank = (v: Verdict): number => (v === 'illegal' ? 0 : v === 'unknown' ? 1 : 2);
  keys.sort((a, b) => rank(a.verdict) - rank(b.verdict));
  let explained = 0;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    if (k.verdict !== 'illegal' || explained >= (options.maxCounterexamples ?? 3)) continue;
    explained++;
    const initial = options.initialValues?.[k.key] ?? null;
    const counterexample = explainKey(k.key, partitions.get(k.key)!, initial, {
      minimize: options.minimize ?? true,
      maxSteps,
      deadline: Math.min(deadline, performance.now() + (options.minimizeTimeoutMs ?? 10_000)),
    });
    keys[i] = { ...k, counterexample };
  }
  const verdict: Verdict = keys.some((k) => k.verdict === 'illegal') ? 'illegal' : keys.some((k) => k.verdict === 'unknown') ? 'unknown' : 'ok';
  return { verdict, ops: ops.length, droppedPendingReads, ms: performance.now() - t0, keys };
}

/** Shrink (optionally) and explain one key already known to be illegal. */
export function explainKey(
  key: string,
  ops: readonly Op[],
  initial: string | null,
  o: { minimize: boolean; maxSteps: number; deadline: number },
): Counterexample {
  const isIllegal = (c: readonly Op[]): boolean => checkKey(c, initial, o.maxSteps, o.deadline).verdict === 'illegal';
  let ce: readonly Op[] = ops;
  let minimal = false;
  const seen = neverWritten(ops, initial);
  if (seen !== undefined) {
    ce = [seen];
    minimal = true;
  } else if (o.minimize) {
    ce = shortestFailingPrefix(ops, isIllegal, o.deadline);
    const s = shrink(ce, isIllegal, o.deadline);
    ce = s.ops;
    minimal = s.complete && performance.now() <= o.deadline;
  }
  ce = [...ce].sort((a, b) => a.call - b.call || a.index - b.index);
  // Explaining must finish even when the shrink used the budget up: give it a fresh one.
  const model = compileKv(ce, initial);
  const r = search(ce, model, { maxSteps: o.maxSteps, deadline: performance.now() + 10_000 }, true, false);
  const d = r.deepest;
  return {
    key,
    ops: ce,
    fromOps: ops.length,
    minimal,
    partial: d?.order ?? [],
    blockedBy: d?.blockedBy ?? -1,
    stateAtBlock: d ? model.describeState(d.state) : null,
    initial,
  };
}
