// `npm run fuzz -- --seed N --duration S [--target client|peer|http|console|snapshot|embed]`: starts
// the target (real kvs processes in temp dirs), fuzzes its port (or, `snapshot`, feeds damaged
// etcd snapshot files to the snapshot reader and restore: snapshot-file.ts; `embed`, drives an
// embedded node's API against a model: embed-api.ts), prints one summary line, exits 1 on a failure
// (with the seed and case indices that replay it: `--seed N --case I[,J...]`).
import sade from 'sade';
import { fuzz, summaryLine } from './run.js';
import { CLOSE_DEADLINE_MS, standaloneCtx, startTarget, type TargetKind } from './targets.js';
import { fuzzSnapshots, snapshotSummaryLine } from './snapshot-file.js';
import { embedSummaryLine, fuzzEmbedded } from './embed-api.js';

interface Flags {
  seed?: number;
  duration?: number;
  cases?: number;
  case?: string | number;
  target?: string;
  concurrency?: number;
  quiet?: boolean;
}

sade('fuzz', true)
  .describe('Fuzz the client port (gRPC frames, or the JSON gateway over HTTP/1.x) or the peer port (peer messages) of real kvs processes')
  .option('--seed', 'PRNG seed (default: from the clock, printed)')
  .option('--duration', 'seconds to keep sending cases', 30)
  .option('--cases', 'stop after this many cases instead')
  .option('--case', 'replay only these case indices (comma-separated), as a failure printed them')
  .option('--target', 'client (gRPC), http (the JSON gateway, HTTP/1.x), console (the console on --metrics-addr), peer, snapshot (etcd snapshot files), or embed (the embedding API)', 'client')
  .option('--concurrency', 'connections at once', 8)
  .option('--quiet', 'no progress lines on stderr')
  .example('--seed 42 --duration 60 --target peer')
  .action(async (f: Flags) => {
    const kind = f.target as TargetKind | 'snapshot' | 'embed';
    if (kind !== 'client' && kind !== 'peer' && kind !== 'http' && kind !== 'console' && kind !== 'snapshot' && kind !== 'embed') {
      process.stderr.write(`fuzz: --target must be client, http, console, peer, snapshot or embed, not ${f.target}\n`);
      process.exit(2);
    }
    const seed = f.seed ?? (Date.now() % 1_000_000_007);
    const only = f.case !== undefined ? String(f.case).split(',').map(Number) : undefined;
    if (kind === 'snapshot') {
      const log = f.quiet ? undefined : (line: string) => process.stderr.write(`${line}\n`);
      const s = await fuzzSnapshots({ seed, only, durationMs: f.cases === undefined && !only ? Number(f.duration) * 1000 : undefined, maxCases: f.cases, log });
      process.stdout.write(`${snapshotSummaryLine(s)}\n`);
      process.exit(s.failures.length > 0 ? 1 : 0);
    }
    if (kind === 'embed') {
      const log = f.quiet ? undefined : (line: string) => process.stderr.write(`${line}\n`);
      const s = await fuzzEmbedded({ seed, only, durationMs: f.cases === undefined && !only ? Number(f.duration) * 1000 : undefined, maxCases: f.cases, log });
      process.stdout.write(`${embedSummaryLine(s)}\n`);
      process.exit(s.failures.length > 0 ? 1 : 0);
    }
    const ctx = standaloneCtx();
    const stop = () => void ctx.close().then(() => process.exit(130));
    process.once('SIGINT', stop);
    let failed = true;
    try {
      const target = await startTarget(ctx, kind);
      const log = f.quiet ? undefined : (line: string) => process.stderr.write(`${line}\n`);
      const summary = await fuzz(target, {
        seed,
        only,
        durationMs: f.cases === undefined && !only ? Number(f.duration) * 1000 : undefined,
        maxCases: f.cases,
        concurrency: Number(f.concurrency),
        answerMs: CLOSE_DEADLINE_MS[kind],
        log,
      });
      process.stdout.write(`${summaryLine(summary)}\n`);
      failed = summary.failures.length > 0;
    } catch (err) {
      process.stderr.write(`fuzz: ${(err as Error).stack ?? err}\n`);
    } finally {
      await ctx.close();
    }
    process.exit(failed ? 1 : 0);
  })
  .parse(process.argv);
