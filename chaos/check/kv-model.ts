// The sequential specification of one etcd key, compiled for the WGL search (wgl.ts).
//
// The state is the key's value or "absent". Values are interned to small integers per
// partition (0 = absent), so a step is a few integer comparisons:
//   get → v          legal iff state = v; state unchanged
//   put v            always legal; state := v
//   cas e→v ✓        legal iff state = e (e may be absent); state := v
//   cas e→v ✗        legal iff state ≠ e; state unchanged
//   delete [✓|✗]     legal iff `deleted` (when recorded) matches whether the key was present; state := absent
// An operation with an unknown outcome is never illegal: a pending cas takes effect exactly
// when the state equals its expected value (it is atomic), a pending put or delete always does.
// Whether it took effect at all is the search's business (it may be placed last, i.e. never).

import type { CompiledModel } from './wgl.js';
import { isPending, type Op } from './history.js';

const GET = 0;
const PUT = 1;
const CAS = 2;
const DEL = 3;

export interface CompiledKv extends CompiledModel {
  /** The value a state stands for (null: absent). */
  describeState(state: number): string | null;
  /** The state id of a value (null: absent); interned if new. */
  stateOf(value: string | null): number;
}

/** Compile the key model for one partition. `initial` is the key's value before the history (default absent). */
export function compileKv(ops: readonly Op[], initial: string | null = null): CompiledKv {
  const ids = new Map<string, number>();
  const names: (string | null)[] = [null];
  const intern = (v: string | null | undefined): number => {
    if (v === null || v === undefined) return 0;
    let id = ids.get(v);
    if (id === undefined) {
      id = names.length;
      ids.set(v, id);
      names.push(v);
    }
    return id;
  };
  const n = ops.length;
  const kind = new Uint8Array(n);
  const a = new Int32Array(n); // new value (put, cas)
  const b = new Int32Array(n); // expected value (cas)
  const out = new Int32Array(n); // get: value id; cas/delete: 1, 0, or -1 when not known
  for (let i = 0; i < n; i++) {
    const op = ops[i]!;
    const pending = isPending(op);
    switch (op.input.f) {
      case 'get':
        kind[i] = GET;
        out[i] = pending ? -1 : intern(op.output!.value);
        break;
      case 'put':
        kind[i] = PUT;
        a[i] = intern(op.input.value);
        break;
      case 'cas':
        kind[i] = CAS;
        a[i] = intern(op.input.value);
        b[i] = intern(op.input.expected);
        out[i] = pending ? -1 : op.output!.succeeded ? 1 : 0;
        break;
      case 'delete':
        kind[i] = DEL;
        out[i] = pending || op.output!.deleted === undefined ? -1 : op.output!.deleted ? 1 : 0;
        break;
    }
  }
  return {
    init: intern(initial),
    step(s: number, i: number): number {
      switch (kind[i]) {
        case GET: {
          const o = out[i]!;
          return o < 0 || o === s ? s : -1;
        }
        case PUT:
          return a[i]!;
        case CAS: {
          const o = out[i]!;
          const match = s === b[i];
          if (o < 0) return match ? a[i]! : s;
          if (o === 1) return match ? a[i]! : -1;
          return match ? -1 : s;
        }
        default: {
          const o = out[i]!;
          if (o < 0) return 0;
          return (s !== 0) === (o === 1) ? 0 : -1;
        }
      }
    },
    blind: (i) => kind[i] === PUT || (kind[i] === DEL && out[i]! < 0),
    describeState: (s) => names[s] ?? null,
    stateOf: intern,
  };
}
