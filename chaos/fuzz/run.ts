// One fuzz run against a started target: the data set, then cases drawn from the seed, several
// connections at a time, until the duration or the case count is reached (or the given cases
// only, for a replay), with the processes checked every few seconds so that a crash is pinned to
// the cases in flight; then the oracle.
import { Rand } from './random.js';
import type { Outcome } from './cases.js';
import { crashed, dataView, diffViews, processes, writeDataSet, type DataView } from './oracle.js';
import type { FuzzTarget } from './targets.js';

export interface RunOptions {
  seed: number;
  /** Stop drawing cases after this long (ms). */
  durationMs?: number;
  /** Or after this many cases. */
  maxCases?: number;
  /** But not before this many (a seed that draws slow cases still runs enough of them). */
  minCases?: number;
  /** Run just these case indices (a replay). */
  only?: number[];
  /** Connections at once. */
  concurrency?: number;
  /** How long the server has to answer or close each connection once the client is done (cases.ts ANSWER_MS by default). */
  answerMs?: number;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
}

export interface Failure {
  /** The case indices to replay (one for a hang; those in flight for a crash). */
  cases: number[];
  what: string;
}

export interface RunSummary {
  target: string;
  seed: number;
  cases: number;
  outcomes: Record<Outcome, number>;
  kinds: Record<string, number>;
  crashes: string[];
  dataChanged: string[];
  failures: Failure[];
  /** Cases whose connection the server left open after its error GOAWAY (node:http2 does; the servers close them after an unanswered PING). */
  leftOpen: number[];
  ms: number;
}

export function summaryLine(s: RunSummary): string {
  const kinds = Object.entries(s.kinds).map(([k, n]) => `${k} ${n}`).join(', ');
  return (
    `fuzz ${s.target}: seed ${s.seed}, ${s.cases} cases in ${(s.ms / 1000).toFixed(1)} s (${kinds}); ` +
    `connections answered ${s.outcomes.answered}, closed ${s.outcomes.closed}, hung ${s.outcomes.hung}` +
    (s.outcomes['open-after-goaway'] ? `, left open after an error GOAWAY ${s.outcomes['open-after-goaway']}` : '') +
    '; ' +
    `crashes ${s.crashes.length}; data changed ${s.dataChanged.length ? 'yes' : 'no'}` +
    s.failures.map((f) => `\n  FAILED: ${f.what} (replay: --seed ${s.seed} --case ${f.cases.join(',')})`).join('')
  );
}

const CHECK_EVERY_MS = 3000;

/** The last uncaught error in a node's output, with its stack, and the supervisor's line on it. */
function crashLines(output: string): string {
  const lines = output.split('\n');
  let at = -1;
  lines.forEach((l, i) => /^\w*Error\b|^node:|uncaught|FATAL/i.test(l) && (at = i));
  const exits = lines.filter((l) => /exited unexpectedly/.test(l)).slice(-2);
  return [...(at >= 0 ? lines.slice(Math.max(0, at - 3), at + 15) : []), ...exits].join('\n');
}

export async function fuzz(target: FuzzTarget, opts: RunOptions): Promise<RunSummary> {
  const log = opts.log ?? (() => {});
  const started = performance.now();
  const dataSetRevision = await writeDataSet(target.clientEndpoints[0]!);
  // Followers apply what the leader committed: wait until every node shows the data set.
  const views = async (): Promise<DataView[]> => Promise.all(target.clientEndpoints.map((e) => dataView(e, dataSetRevision)));
  const before = await views();
  const procsBefore = await Promise.all(target.nodes.map(processes));

  const summary: RunSummary = { target: target.kind, seed: opts.seed, cases: 0, outcomes: { answered: 0, closed: 0, hung: 0, 'open-after-goaway': 0 }, kinds: {}, crashes: [], dataChanged: [], failures: [], leftOpen: [], ms: 0 };
  const queue = opts.only ? [...opts.only] : undefined;
  let next = 0;
  const inFlight = new Set<number>();
  const sinceCheck = new Set<number>();
  const deadline = opts.durationMs !== undefined ? performance.now() + opts.durationMs : Infinity;
  const draw = (): number | undefined => {
    if (queue) return queue.shift();
    if ((performance.now() >= deadline && next >= (opts.minCases ?? 0)) || (opts.maxCases !== undefined && next >= opts.maxCases)) return undefined;
    return next++;
  };

  let stopChecks = false;
  /** Compares the processes with the start; a change is a crash of the cases since the last look. */
  const checkProcesses = async (): Promise<void> => {
    const suspects = [...sinceCheck, ...inFlight].sort((a, b) => a - b);
    sinceCheck.clear();
    for (const [i, node] of target.nodes.entries()) {
      let now: Record<string, string>;
      try {
        now = await processes(node);
      } catch (err) {
        now = { supervisor: `unreachable: ${(err as Error).message.split('\n')[0]}` };
      }
      const changes = crashed(procsBefore[i]!, now).filter((c) => !summary.crashes.includes(`node ${i + 1} ${c}`));
      for (const c of changes) {
        summary.crashes.push(`node ${i + 1} ${c}`);
        summary.failures.push({ cases: [...new Set(suspects)], what: `crash: node ${i + 1} ${c}` });
        log(`crash: node ${i + 1} ${c}\n${crashLines(node.output())}`);
      }
    }
  };
  /** Ends the checker's wait at once when the cases are done (it waited up to 3 s more). */
  let wake = () => {};
  const checker = (async () => {
    while (!stopChecks) {
      await new Promise<void>((r) => {
        const timer = setTimeout(r, CHECK_EVERY_MS);
        wake = () => {
          clearTimeout(timer);
          r();
        };
      });
      if (!stopChecks) await checkProcesses();
    }
  })();

  const worker = async (): Promise<void> => {
    for (let i = draw(); i !== undefined; i = draw()) {
      const rand = Rand.forCase(opts.seed, i);
      const c = await target.cases(rand);
      const endpoint = rand.pick(target.fuzzEndpoints);
      inFlight.add(i);
      const { outcome } = await c.run(endpoint, opts.answerMs);
      inFlight.delete(i);
      sinceCheck.add(i);
      summary.cases++;
      summary.outcomes[outcome]++;
      summary.kinds[c.kind] = (summary.kinds[c.kind] ?? 0) + 1;
      // A replay says what each case sent (and, where the case knows it, what came back).
      if (queue) log(`case ${i} (${outcome}): ${c.describe}`);
      if (outcome === 'open-after-goaway') {
        summary.leftOpen.push(i);
        summary.failures.push({ cases: [i], what: `left open after an error GOAWAY: case ${i} on ${endpoint}: ${c.describe}` });
        log(`left open after an error GOAWAY: case ${i}: ${c.describe}`);
      }
      if (outcome === 'hung') {
        summary.failures.push({ cases: [i], what: `hung: case ${i} on ${endpoint}: ${c.describe}` });
        log(`hung: case ${i}: ${c.describe}`);
      }
      if (summary.cases % 200 === 0) log(`${summary.cases} cases`);
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency ?? 8 }, worker));
  stopChecks = true;
  wake();
  await checker;
  // Let in-flight effects land (forwarded writes, a leader's follower bookkeeping), then look.
  await new Promise((r) => setTimeout(r, 1000));
  await checkProcesses();
  const after = await views().catch((err: Error) => err);
  if (after instanceof Error) summary.dataChanged.push(`the oracle's reads failed: ${after.message}`);
  else {
    after.forEach((v, i) => summary.dataChanged.push(...diffViews(before[0]!, v).map((d) => `node ${i + 1}: ${d}`)));
    before.forEach((v, i) => summary.dataChanged.push(...diffViews(before[0]!, v).map((d) => `node ${i + 1} before the run: ${d}`)));
  }
  if (summary.dataChanged.length) summary.failures.push({ cases: [], what: `data changed: ${summary.dataChanged.join('; ')}` });
  summary.ms = performance.now() - started;
  return summary;
}
