// Random histories that are linearizable by construction, for testing the checker (and for a
// harness to self-test its pipeline): concurrent clients run operations against an in-memory
// store that applies each one atomically at a point between its call and its return.
//
// Some operations lose their answer (outcome unknown): of those, a third take effect before
// the client gives up, a third take effect later (after the client has moved on), and a third
// never do; all three are recorded without a return, as a real client would record them.

import type { KvInput, KvOperation, KvOutput } from './history.js';
import { prng } from '../../testkit/prng.js';

export interface SimOptions {
  readonly seed: number;
  readonly clients: number;
  /** Operations to start. */
  readonly ops: number;
  /** Keys to spread operations over (default one key, "k"). */
  readonly keys?: readonly string[];
  /** Probability an operation's outcome is lost (default 0). */
  readonly pendingRate?: number;
  /** Relative weights of get, put, cas, delete (default 4, 3, 2, 1). */
  readonly mix?: readonly [number, number, number, number];
}


interface Running {
  readonly op: { client: number; key: string; input: KvInput; call: number };
  output?: KvOutput;
  readonly lost: boolean;
}

/** A linearizable history of `ops` operations (times are numbers, in "ns"). */
export function simulateRegister(o: SimOptions): KvOperation[] {
  const rnd = prng(o.seed);
  const keys = o.keys ?? ['k'];
  const [wg, wp, wc, wd] = o.mix ?? [4, 3, 2, 1];
  const total = wg + wp + wc + wd;
  const store = new Map<string, string>();
  const written = new Map<string, string[]>();
  const history: KvOperation[] = [];
  const running: (Running | undefined)[] = new Array(o.clients).fill(undefined);
  const orphans: Running[] = [];
  let started = 0;
  let t = 1000;
  let counter = 0;

  const apply = (r: Running): void => {
    const { key, input } = r.op;
    const cur = store.get(key) ?? null;
    switch (input.f) {
      case 'get':
        r.output = { value: cur };
        break;
      case 'put':
        store.set(key, input.value);
        r.output = {};
        break;
      case 'cas': {
        const ok = cur === input.expected;
        if (ok) store.set(key, input.value);
        r.output = { succeeded: ok };
        break;
      }
      case 'delete':
        store.delete(key);
        r.output = { deleted: cur !== null };
        break;
    }
  };

  const newInput = (key: string): KvInput => {
    const x = rnd() * total;
    const fresh = (): string => `${key}:${++counter}`;
    if (x < wg) return { f: 'get' };
    if (x < wg + wp) return { f: 'put', value: fresh() };
    if (x < wg + wp + wc) {
      const prev = written.get(key) ?? [];
      const y = rnd();
      const expected = y < 0.5 ? (store.get(key) ?? null) : y < 0.8 && prev.length > 0 ? prev[Math.floor(rnd() * prev.length)]! : null;
      return { f: 'cas', expected, value: fresh() };
    }
    return { f: 'delete' };
  };

  while (started < o.ops || running.some((r) => r !== undefined)) {
    t += 1 + Math.floor(rnd() * 100);
    if (orphans.length > 0 && rnd() < 0.05) apply(orphans.splice(Math.floor(rnd() * orphans.length), 1)[0]!);
    const c = Math.floor(rnd() * o.clients);
    const r = running[c];
    if (r === undefined) {
      if (started >= o.ops) continue;
      started++;
      const key = keys[Math.floor(rnd() * keys.length)]!;
      const input = newInput(key);
      if (input.f === 'put' || input.f === 'cas') {
        let w = written.get(key);
        if (w === undefined) written.set(key, (w = []));
        w.push(input.value);
      }
      running[c] = { op: { client: c, key, input, call: t }, lost: rnd() < (o.pendingRate ?? 0) };
    } else if (r.lost) {
      // The answer is lost: the op took effect already, will later, or never will.
      const y = rnd();
      if (y < 1 / 3) apply(r);
      else if (y < 2 / 3) orphans.push(r);
      history.push({ ...r.op });
      running[c] = undefined;
    } else if (r.output === undefined) {
      apply(r);
    } else {
      history.push({ ...r.op, return: t, output: r.output });
      running[c] = undefined;
    }
  }
  return history;
}
