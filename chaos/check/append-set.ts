// The append-set check: counting lost acknowledged writes.
//
// Clients append unique values to per-key sets (for kvs: put a key under a per-set prefix, or
// append to a list value) while faults are injected; each append is recorded with its outcome:
// `ok` (acknowledged), `fail` (the server said for certain it did not happen) or `unknown`
// (timeout, lost connection). After the faults heal, one final read of each set is taken.
// Then, per key:
//   lost             acknowledged but missing from the final read — the durability violation
//   unexpected       present but never attempted — corruption or a stray write
//   failedButPresent reported as failed yet present — the error was a lie
//   duplicated       present more than once — a retry applied twice (list-like sets only)
//   unknown present / absent: counted, not errors (either is allowed)
// A key that was appended to but has no final read is listed in `unreadKeys` and makes the
// result not ok: nothing can be said about its writes.
// This check does not need the history's times and is linear in its size; it complements the
// linearizability checker, which is exponential in the worst case and so run on shorter histories.

export type AppendOutcome = 'ok' | 'fail' | 'unknown';

export interface AppendAttempt {
  readonly key: string;
  readonly value: string;
  readonly outcome: AppendOutcome;
}

/** The ways a key's final read can disagree with its appends. */
const ANOMALIES = ['lost', 'unexpected', 'failedButPresent', 'duplicated'] as const;
type Anomaly = (typeof ANOMALIES)[number];
/** Of each anomaly: for a key, its values; for the whole run, how many. */
type Anomalies<V> = { readonly [A in Anomaly]: V };

/** The appends by outcome, as a key and the whole run count them. */
interface AppendCounts {
  readonly attempted: number;
  readonly acknowledged: number;
  readonly unknownPresent: number;
  readonly unknownAbsent: number;
}

export interface AppendSetKeyReport extends AppendCounts, Anomalies<readonly string[]> {
  readonly key: string;
  /** Values in the final read. */
  readonly read: number;
}

export interface AppendSetReport extends AppendCounts, Anomalies<number> {
  readonly ok: boolean;
  /** Keys appended to that have no final read. */
  readonly unreadKeys: readonly string[];
  /** Keys with anything wrong, in key order. */
  readonly badKeys: readonly AppendSetKeyReport[];
  /** Every key, in key order. */
  readonly keys: readonly AppendSetKeyReport[];
}

/**
 * Compare the attempted appends with the final reads. A value attempted twice on one key is a
 * harness bug (values must be unique per key) and throws; so does an `ok` and a `fail` for it.
 */
export function checkAppendSet(
  attempts: Iterable<AppendAttempt>,
  finalReads: ReadonlyMap<string, readonly string[]> | Readonly<Record<string, readonly string[]>>,
): AppendSetReport {
  const reads: ReadonlyMap<string, readonly string[]> =
    finalReads instanceof Map ? finalReads : new Map(Object.entries(finalReads as Record<string, readonly string[]>));
  const byKey = new Map<string, Map<string, AppendOutcome>>();
  for (const a of attempts) {
    let m = byKey.get(a.key);
    if (m === undefined) byKey.set(a.key, (m = new Map()));
    if (m.has(a.value)) throw new Error(`value ${JSON.stringify(a.value)} appended twice to key ${JSON.stringify(a.key)}: values must be unique per key`);
    m.set(a.value, a.outcome);
  }
  const allKeys = [...new Set([...byKey.keys(), ...reads.keys()])].sort();
  const keys: AppendSetKeyReport[] = [];
  const unreadKeys: string[] = [];
  for (const key of allKeys) {
    const attempted = byKey.get(key) ?? new Map<string, AppendOutcome>();
    const read = reads.get(key);
    if (read === undefined) {
      unreadKeys.push(key);
      continue;
    }
    const seen = new Map<string, number>();
    for (const v of read) seen.set(v, (seen.get(v) ?? 0) + 1);
    const lost: string[] = [];
    const failedButPresent: string[] = [];
    let acknowledged = 0;
    let unknownPresent = 0;
    let unknownAbsent = 0;
    for (const [v, outcome] of attempted) {
      const present = seen.has(v);
      if (outcome === 'ok') {
        acknowledged++;
        if (!present) lost.push(v);
      } else if (outcome === 'fail') {
        if (present) failedButPresent.push(v);
      } else if (present) unknownPresent++;
      else unknownAbsent++;
    }
    const unexpected = [...seen.keys()].filter((v) => !attempted.has(v));
    const duplicated = [...seen].filter(([, c]) => c > 1).map(([v]) => v);
    keys.push({ key, attempted: attempted.size, acknowledged, read: read.length, lost, unexpected, failedButPresent, duplicated, unknownPresent, unknownAbsent });
  }
  const sum = (f: (k: AppendSetKeyReport) => number): number => keys.reduce((s, k) => s + f(k), 0);
  const badKeys = keys.filter((k) => ANOMALIES.some((a) => k[a].length > 0));
  let attemptedUnread = 0;
  let ackUnread = 0;
  for (const k of unreadKeys) {
    const m = byKey.get(k)!;
    attemptedUnread += m.size;
    for (const o of m.values()) if (o === 'ok') ackUnread++;
  }
  return {
    ok: badKeys.length === 0 && unreadKeys.length === 0,
    attempted: sum((k) => k.attempted) + attemptedUnread,
    acknowledged: sum((k) => k.acknowledged) + ackUnread,
    ...(Object.fromEntries(ANOMALIES.map((a) => [a, sum((k) => k[a].length)])) as Anomalies<number>),
    unknownPresent: sum((k) => k.unknownPresent),
    unknownAbsent: sum((k) => k.unknownAbsent),
    unreadKeys,
    badKeys,
    keys,
  };
}

function list(vs: readonly string[], max: number): string {
  const shown = vs.slice(0, max).map((v) => JSON.stringify(v)).join(', ');
  return vs.length > max ? `${shown}, … (${vs.length - max} more)` : shown;
}

/** The report as text; the first line is `append-set: ok|FAILED …`. */
export function formatAppendSetReport(r: AppendSetReport, maxValues = 20): string {
  const out = [
    `append-set: ${r.ok ? 'ok' : 'FAILED'} (${r.keys.length + r.unreadKeys.length} keys, ${r.attempted} appends attempted, ${r.acknowledged} acknowledged, ` +
      `${r.lost} lost, ${r.unexpected} unexpected, ${r.failedButPresent} failed-but-present, ${r.duplicated} duplicated; ` +
      `unknown outcome: ${r.unknownPresent} present, ${r.unknownAbsent} absent)`,
  ];
  if (r.unreadKeys.length > 0) out.push(`  no final read for ${list(r.unreadKeys, maxValues)}`);
  for (const k of r.badKeys) {
    out.push(`  key ${JSON.stringify(k.key)}: ${k.acknowledged} acknowledged, ${k.read} read`);
    if (k.lost.length) out.push(`    lost (acknowledged, missing): ${list(k.lost, maxValues)}`);
    if (k.unexpected.length) out.push(`    unexpected (never attempted): ${list(k.unexpected, maxValues)}`);
    if (k.failedButPresent.length) out.push(`    reported failed but present: ${list(k.failedButPresent, maxValues)}`);
    if (k.duplicated.length) out.push(`    present more than once: ${list(k.duplicated, maxValues)}`);
  }
  return out.join('\n');
}
