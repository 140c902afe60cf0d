// One chaos run: start the system, run the workload while the nemeses inject and heal faults,
// heal everything, take the final reads, check the history, and sum it all up in one line.
// Used by the CLI (main.ts) and by integration/chaos.test.ts.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Ctx } from '../testkit/harness.js';
import { KvClient } from '../testkit/kv-client.js';
import { checkAppendSet, checkLinearizability, formatAppendSetReport, formatReport, renderHtml, type AppendSetReport, type LinearizabilityReport } from './check/index.js';
import { prng } from '../testkit/prng.js';
import { applicable, ms, runNemeses, type FaultRecord, type NemesisName } from './nemesis.js';
import { startSystem, type ChaosSystem, type StoreKind } from './system.js';
import { Workload, type WorkloadStats } from './workload.js';

export interface ChaosOptions {
  readonly seed: number;
  /** Faults are injected until this much time has passed (the fault under way is finished). */
  readonly durationMs: number;
  /** Faults are injected until the workload has recorded this many operations (instead of durationMs). */
  readonly minOps?: number;
  /** At most this many faults (the tests: one of each nemesis). */
  readonly maxFaults?: number;
  readonly nemeses: readonly NemesisName[];
  readonly nodes: number;
  readonly store: StoreKind;
  /** Register workers per node (each node also has one append worker). Default 2. */
  readonly workersPerNode?: number;
  /** The nodes' --log-level (default info); their logs are saved in `outDir` when a run fails. */
  readonly logLevel?: string;
  /** The nodes' --write-pipeline (cluster only; default: theirs, auto). */
  readonly writePipeline?: string;
  /** Where a counterexample's picture is written. */
  readonly outDir: string;
  readonly log?: (line: string) => void;
}

export interface NemesisFigures {
  readonly nemesis: NemesisName;
  readonly faults: number;
  /** Longest time from a heal until every node acknowledged a write. */
  readonly maxRecoveryMs: number;
  /** Longest time without any acknowledged write, from an injection to its recovery. */
  readonly maxUnavailableMs: number;
}

export interface ChaosResult {
  readonly ok: boolean;
  readonly stats: WorkloadStats;
  readonly linearizability: LinearizabilityReport;
  readonly appendSet: AppendSetReport;
  readonly faults: readonly FaultRecord[];
  readonly figures: readonly NemesisFigures[];
  /** The counterexample's HTML picture, when the history is not linearizable. */
  readonly counterexampleFile?: string;
  /** The one-line summary. */
  readonly summary: string;
  /** The checkers' reports, for a failure's details. */
  readonly details: string;
}

const RECOVERY_DEADLINE_MS = 120_000;

export async function runChaos(t: Ctx, o: ChaosOptions): Promise<ChaosResult> {
  const log = o.log ?? (() => {});
  const names = applicable(o.nemeses, o.nodes);
  if (names.length === 0) throw new Error(`none of ${o.nemeses.join(', ')} applies to ${o.nodes} node(s)`);
  log(`chaos: seed ${o.seed}, ${o.nodes} node(s), ${o.store} store, nemeses ${names.join(', ')}`);
  const sys = await startSystem(t, { nodes: o.nodes, store: o.store, logLevel: o.logLevel, writePipeline: o.writePipeline });
  const runId = `s${o.seed}`;
  // Separate streams: the workload draws at a rate that depends on timing, the schedule must not.
  const workload = new Workload(prng(o.seed ^ 0x5bd1e995), runId);
  const probes = sys.nodes.map((n) => new KvClient(n.client.address));
  t.after(() => probes.forEach((p) => p.close()));
  const recovered = () => allAcknowledge(probes, `chaos/${runId}/probe`);

  const started = Date.now();
  workload.start(sys.nodes.map((n) => n.client.address), o.workersPerNode ?? 2);
  // A long run says how far it is, once a minute.
  const progress = setInterval(() => {
    const s = workload.stats;
    log(`progress: ${Math.round((Date.now() - started) / 1000)} s, operations ${totalOps(s)} (ok ${s.ok} failed ${s.failed} unknown ${s.unknown})`);
  }, 60_000);
  progress.unref();
  t.after(() => clearInterval(progress));
  let faults: FaultRecord[];
  try {
    faults = await runNemeses({
      sys,
      names,
      rand: prng(o.seed),
      shouldStop: () => (o.minOps === undefined ? Date.now() - started >= o.durationMs : totalOps(workload.stats) >= o.minOps),
      maxFaults: o.maxFaults,
      recovered,
      log,
    });
    await sys.healAll();
    await recovered();
  } catch (err) {
    // A fault that never healed, or a node that never came back: keep the evidence.
    await sys.healAll();
    await workload.stop();
    await saveLogs(o, sys, log);
    throw err;
  }
  clearInterval(progress);
  await workload.stop();
  const proxies = [...sys.nodes.flatMap((n) => (n.peer ? [n.peer] : [])), ...(sys.storeProxy ? [sys.storeProxy] : [])];
  log(`connections identified by source: ${proxies.map((p) => `${p.name} ${p.identified}/${p.accepted}`).join(', ')}`);

  const leader = (await sys.leader()) ?? sys.nodes[0]!;
  const sets = await workload.finalReads(leader.direct);
  const linearizability = checkLinearizability(workload.history, { timeoutMs: 120_000 });
  const appendSet = checkAppendSet(workload.appends, sets);
  const ok = linearizability.verdict === 'ok' && appendSet.ok;
  let counterexampleFile: string | undefined;
  if (linearizability.verdict === 'illegal') {
    await mkdir(o.outDir, { recursive: true });
    counterexampleFile = path.resolve(o.outDir, `chaos-seed-${o.seed}-counterexample.html`);
    await writeFile(counterexampleFile, renderHtml(linearizability, `kvs chaos, seed ${o.seed}`));
  }
  if (!ok) await saveLogs(o, sys, log);
  const figures = figuresOf(faults, workload.acks);
  for (const k of appendSet.badKeys) for (const v of k.lost) log(placeLost(k.key + v, workload, faults));
  const summary = summarize(o, sys, workload.stats, linearizability, appendSet, faults.length, figures, counterexampleFile);
  const details = `${formatReport(linearizability)}\n${formatAppendSetReport(appendSet)}`;
  return { ok, stats: workload.stats, linearizability, appendSet, faults, figures, counterexampleFile, summary, details };
}

function totalOps(s: WorkloadStats): number {
  return s.ok + s.failed + s.unknown;
}

/** When a lost append was sent and acknowledged, against the faults, in the nodes' log time (epoch ms). */
function placeLost(key: string, w: Workload, faults: readonly FaultRecord[]): string {
  const t = w.appendTimes.get(key);
  const monoNow = process.hrtime.bigint();
  const wallNow = Date.now();
  const wall = (ns: bigint | undefined) => (ns === undefined ? '?' : String(Math.round(wallNow - Number(monoNow - ns) / 1e6)));
  const around = faults.map((f, i) => `fault ${i + 1} ${wall(f.injected)}..${wall(f.healed)}`).join(', ');
  return `lost ${key}: sent at ${wall(t?.call)}, acknowledged at ${wall(t?.ret)} (${around})`;
}

async function saveLogs(o: ChaosOptions, sys: ChaosSystem, log: (line: string) => void): Promise<void> {
  await mkdir(o.outDir, { recursive: true });
  for (const n of sys.nodes) await writeFile(path.resolve(o.outDir, `chaos-seed-${o.seed}-${n.id}.log`), n.kvs.output());
  log(`node logs: ${path.resolve(o.outDir, `chaos-seed-${o.seed}-<node>.log`)}`);
}

/** Resolves with the time at which a put through every probe (one per node) was acknowledged. */
async function allAcknowledge(probes: readonly KvClient[], key: string): Promise<bigint> {
  const deadline = Date.now() + RECOVERY_DEADLINE_MS;
  const times = await Promise.all(
    probes.map(async (p) => {
      for (;;) {
        try {
          await p.put(Buffer.from(key), Buffer.from('probe'), 2000);
          return process.hrtime.bigint();
        } catch (err) {
          if (Date.now() > deadline) throw new Error(`${p.endpoint} acknowledged no write for ${RECOVERY_DEADLINE_MS} ms after a heal: ${(err as Error).message}`);
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
    }),
  );
  return times.reduce((a, b) => (a > b ? a : b));
}

function figuresOf(faults: readonly FaultRecord[], acks: readonly bigint[]): NemesisFigures[] {
  const sorted = [...acks].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const byName = new Map<NemesisName, NemesisFigures>();
  for (const f of faults) {
    // The longest stretch with no acknowledged write between the injection and the recovery.
    let last = f.injected;
    let gap = 0n;
    for (const a of sorted) {
      if (a <= f.injected) continue;
      if (a > f.recovered) break;
      if (a - last > gap) gap = a - last;
      last = a;
    }
    if (f.recovered - last > gap) gap = f.recovered - last;
    const prev = byName.get(f.nemesis);
    byName.set(f.nemesis, {
      nemesis: f.nemesis,
      faults: (prev?.faults ?? 0) + 1,
      maxRecoveryMs: Math.max(prev?.maxRecoveryMs ?? 0, ms(f.recovered - f.healed)),
      maxUnavailableMs: Math.max(prev?.maxUnavailableMs ?? 0, ms(gap)),
    });
  }
  return [...byName.values()];
}

function summarize(
  o: ChaosOptions,
  sys: ChaosSystem,
  s: WorkloadStats,
  lin: LinearizabilityReport,
  app: AppendSetReport,
  faults: number,
  figures: readonly NemesisFigures[],
  picture: string | undefined,
): string {
  const verdict = lin.verdict === 'ok' ? 'yes' : lin.verdict === 'illegal' ? `NO (counterexample: ${picture})` : 'unknown (checker budget ran out)';
  const recovery = figures.map((f) => `${f.nemesis} x${f.faults} ${f.maxRecoveryMs}/${f.maxUnavailableMs}`).join(', ');
  const other = app.unexpected + app.duplicated + app.failedButPresent + app.unreadKeys.length;
  return (
    `chaos seed ${o.seed}, ${sys.nodes.length} node(s), ${sys.store} store, ${faults} faults: ` +
    `operations ok ${s.ok} failed ${s.failed} unknown ${s.unknown}; linearizable ${verdict}; ` +
    `acknowledged writes lost ${app.lost}${other > 0 ? ` (and ${other} other append-set errors)` : ''}; ` +
    `recovery ms after heal / longest without an acknowledged write: ${recovery || 'none'}`
  );
}
