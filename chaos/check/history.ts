// Histories of operations on an etcd-like key-value store, as a chaos client records them, and
// their normalisation for the checkers.
//
// Each operation acts on one key: get, put(value), compare-and-swap(expected, new) where
// `expected: null` means "the key is absent" (etcd: a Txn comparing create_revision to 0), and
// delete. A client records the call time before sending and the return time when the answer
// arrives, both from a monotonic clock (process.hrtime.bigint() nanoseconds, or any number
// unit as long as one history uses one clock). An operation whose outcome the client does not
// know (a timeout, a lost connection, an error that does not say whether the write happened)
// has no return time and no output: it may have taken effect at any time after its call, or
// never.

export type KvInput =
  | { readonly f: 'get' }
  | { readonly f: 'put'; readonly value: string }
  | { readonly f: 'cas'; readonly expected: string | null; readonly value: string }
  | { readonly f: 'delete' };

/**
 * What the operation returned. get: `value` (null when the key is absent); put: nothing; cas:
 * `succeeded`; delete: optionally `deleted` (whether a key was removed, etcd's `deleted > 0`).
 */
export interface KvOutput {
  readonly value?: string | null;
  readonly succeeded?: boolean;
  readonly deleted?: boolean;
}

export interface KvOperation {
  /** Who issued it; one client issues one operation at a time, unless an earlier one was abandoned. */
  readonly client: string | number;
  readonly key: string;
  readonly input: KvInput;
  /** Monotonic call time (bigint nanoseconds or a number). */
  readonly call: number | bigint;
  /** Monotonic return time; undefined or null when the outcome is unknown. */
  readonly return?: number | bigint | null;
  /** Required when `return` is set; ignored otherwise. */
  readonly output?: KvOutput;
}

/** An operation after normalisation: times are numbers (ns from the history's first call). */
export interface Op {
  /** Position in the caller's history array. */
  readonly index: number;
  readonly client: string;
  readonly key: string;
  readonly input: KvInput;
  readonly call: number;
  /** +Infinity when the outcome is unknown. */
  readonly ret: number;
  /** Undefined when the outcome is unknown. */
  readonly output?: KvOutput;
  /**
   * Set on operations that returned in the real history but are treated as pending because a
   * counterexample was cut before their return.
   */
  readonly cut?: boolean;
  /**
   * Set when a counterexample shows a weaker form of what was recorded (a successful CAS as a
   * put, a delete without its `deleted`): the recorded operation, described.
   */
  readonly was?: string;
}

export function isPending(op: Op): boolean {
  return op.ret === Infinity;
}

function validateOutput(op: KvOperation, i: number): void {
  const out = op.output;
  const where = `operation ${i} (${op.input.f} on ${JSON.stringify(op.key)})`;
  if (out === undefined || out === null) throw new Error(`${where} returned but has no output`);
  switch (op.input.f) {
    case 'get':
      if (!(typeof out.value === 'string' || out.value === null)) throw new Error(`${where}: a get's output needs value (a string, or null when absent)`);
      break;
    case 'cas':
      if (typeof out.succeeded !== 'boolean') throw new Error(`${where}: a cas's output needs succeeded (boolean)`);
      break;
    case 'delete':
      if (out.deleted !== undefined && typeof out.deleted !== 'boolean') throw new Error(`${where}: deleted must be a boolean when given`);
      break;
    case 'put':
      break;
    default:
      throw new Error(`${where}: unknown operation ${JSON.stringify((op.input as { f: unknown }).f)}`);
  }
}

/**
 * Validate a history and turn its times into numbers, measured from its earliest call (bigint
 * nanoseconds are exact below 2^53 ns, about 104 days). Unknown-outcome gets are dropped here:
 * a read that never answered constrains nothing. Returns the operations and how many were dropped.
 */
export function normalise(history: readonly KvOperation[]): { ops: Op[]; droppedPendingReads: number } {
  if (history.length === 0) return { ops: [], droppedPendingReads: 0 };
  const anyBig = history.some((o) => typeof o.call === 'bigint' || typeof o.return === 'bigint');
  let ops: Op[] = [];
  let dropped = 0;
  if (anyBig) {
    let base: bigint | undefined;
    for (const o of history) {
      const c = BigInt(o.call);
      if (base === undefined || c < base) base = c;
    }
    const rel = (t: number | bigint): number => Number(BigInt(t) - base!);
    ops = history.map((o, i) => toOp(o, i, rel));
  } else {
    let base = Infinity;
    for (const o of history) base = Math.min(base, o.call as number);
    ops = history.map((o, i) => toOp(o, i, (t) => (t as number) - base));
  }
  const kept = ops.filter((op) => {
    if (op.input.f === 'get' && isPending(op)) {
      dropped++;
      return false;
    }
    return true;
  });
  return { ops: kept, droppedPendingReads: dropped };
}

function toOp(o: KvOperation, i: number, rel: (t: number | bigint) => number): Op {
  if (typeof o.key !== 'string') throw new Error(`operation ${i} has no key`);
  if (o.input === undefined || typeof o.input.f !== 'string') throw new Error(`operation ${i} has no input`);
  const call = rel(o.call);
  if (!Number.isFinite(call)) throw new Error(`operation ${i} has no valid call time`);
  const known = o.return !== undefined && o.return !== null && !(typeof o.return === 'number' && !Number.isFinite(o.return));
  if (!known) return { index: i, client: String(o.client), key: o.key, input: o.input, call, ret: Infinity };
  validateOutput(o, i);
  const ret = rel(o.return!);
  if (!(ret >= call)) throw new Error(`operation ${i} returns before its call`);
  return { index: i, client: String(o.client), key: o.key, input: o.input, call, ret, output: o.output };
}

/** Operations grouped by key, in first-call order of the keys; each group sorted by call time. */
export function partitionByKey(ops: readonly Op[]): Map<string, Op[]> {
  const byKey = new Map<string, Op[]>();
  for (const op of ops) {
    let list = byKey.get(op.key);
    if (list === undefined) byKey.set(op.key, (list = []));
    list.push(op);
  }
  for (const list of byKey.values()) list.sort((a, b) => a.call - b.call || a.index - b.index);
  return byKey;
}

/** A short human description of an operation: `put "v"`, `get → "v"`, `cas "a"→"b" ✗`, `delete ?`. */
export function describeOp(op: Op, maxValue = 24): string {
  const v = (s: string | null | undefined): string => {
    if (s === null || s === undefined) return '∅';
    const q = JSON.stringify(s);
    return q.length > maxValue ? q.slice(0, maxValue - 2) + '…"' : q;
  };
  const pending = isPending(op);
  switch (op.input.f) {
    case 'get':
      return pending ? 'get ?' : `get → ${v(op.output!.value)}`;
    case 'put':
      return `put ${v(op.input.value)}${pending ? ' ?' : ''}`;
    case 'cas':
      return `cas ${v(op.input.expected)}→${v(op.input.value)} ${pending ? '?' : op.output!.succeeded ? '✓' : '✗'}`;
    case 'delete':
      return `delete${pending ? ' ?' : op.output!.deleted === undefined ? '' : op.output!.deleted ? ' ✓' : ' ✗'}`;
  }
}
