// `npm run chaos -- --duration 600|--ops 100000 --seed N [--nemesis NAME[,NAME]|all] [--nodes 1|3] [--store local|s3]`:
// one chaos run (run.ts), one summary line on stdout, progress on stderr. Exit status: 0 when
// the history is linearizable and no acknowledged write was lost, 1 on an anomaly or a loss,
// 3 when the checker could not decide (its budget ran out), 2 on a usage or harness error.
import sade from 'sade';
import { NEMESES, applicable, type NemesisName } from './nemesis.js';
import { runChaos } from './run.js';
import type { Ctx } from '../testkit/harness.js';

/** A cleanup scope for the harness outside node:test: cleanups run last-first at close(). */
class Scope implements Ctx {
  private readonly fns: (() => unknown)[] = [];
  after = ((fn: () => unknown) => void this.fns.push(fn)) as Ctx['after'];
  async close(): Promise<void> {
    for (const fn of this.fns.reverse()) await fn();
  }
}

function usage(message: string): never {
  process.stderr.write(`chaos: ${message}\n`);
  process.exit(2);
}

function nemesesOf(arg: string): NemesisName[] {
  if (arg === 'all') return [...NEMESES];
  const names = arg.split(',');
  for (const n of names) if (!(NEMESES as readonly string[]).includes(n)) usage(`unknown nemesis ${n}; one of ${NEMESES.join(', ')}, or all`);
  return names as NemesisName[];
}

sade('chaos', true)
  .describe('Fault injection against real kvs nodes, with a linearizability and lost-write check (docs/reliability.md)')
  .option('--duration', 'seconds of faults', 600)
  .option('--ops', 'inject faults until the workload has made this many operations (instead of --duration)')
  .option('--seed', 'schedule seed (default: from the clock, printed)')
  .option('--nemesis', `${NEMESES.join(', ')}; several comma-separated, or all`, 'all')
  .option('--nodes', '1 or 3', 3)
  .option('--store', 'local (a directory, with a failpoint) or s3 (Ceph RGW behind a proxy)', 'local')
  .option('--workers', 'register workers per node', 2)
  .option('--out', 'directory for a counterexample picture and, on a failure, the nodes\' logs', '.')
  .option('--log-level', 'the nodes\' --log-level', 'info')
  .option('--once', 'each nemesis once, however long that takes (instead of --duration)')
  .option('--write-pipeline', 'the cluster nodes\' --write-pipeline: batches a leader keeps in flight (default: theirs, auto)')
  .action(async (opts: Record<string, unknown>) => {
    const seed = opts.seed === undefined ? Date.now() % 1_000_000 : Number(opts.seed);
    const nodes = Number(opts.nodes);
    if (!Number.isInteger(seed)) usage('--seed must be an integer');
    if (nodes !== 1 && nodes !== 3) usage('--nodes must be 1 or 3');
    const minOps = opts.ops === undefined ? undefined : Number(opts.ops);
    if (minOps !== undefined && !(Number.isInteger(minOps) && minOps > 0)) usage('--ops must be a positive integer');
    if (minOps !== undefined && opts.once) usage('--ops and --once exclude each other');
    if (opts.store !== 'local' && opts.store !== 's3') usage('--store must be local or s3');
    const scope = new Scope();
    const stop = () => void scope.close().finally(() => process.exit(130));
    process.once('SIGINT', stop);
    let code = 2;
    try {
      const r = await runChaos(scope, {
        seed,
        durationMs: opts.once ? Infinity : Number(opts.duration) * 1000,
        ...(minOps !== undefined ? { minOps } : {}),
        ...(opts.once ? { maxFaults: applicable(nemesesOf(String(opts.nemesis)), nodes).length } : {}),
        nemeses: nemesesOf(String(opts.nemesis)),
        nodes,
        store: opts.store,
        workersPerNode: Number(opts.workers),
        outDir: String(opts.out),
        logLevel: String(opts['log-level']),
        ...(opts['write-pipeline'] !== undefined ? { writePipeline: String(opts['write-pipeline']) } : {}),
        log: (line) => process.stderr.write(`${line}\n`),
      });
      if (!r.ok) process.stderr.write(`${r.details}\n`);
      process.stdout.write(`${r.summary}\n`);
      code = r.ok ? 0 : r.linearizability.verdict === 'unknown' && r.appendSet.ok ? 3 : 1;
    } catch (err) {
      process.stderr.write(`chaos (seed ${seed}): ${(err as Error).stack ?? err}\n`);
    } finally {
      await scope.close();
    }
    process.exit(code);
  })
  .parse(process.argv);
