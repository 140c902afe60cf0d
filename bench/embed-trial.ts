// One trial of an embed-* workload's embedded side (bench/workloads/embed.ts starts it in a
// session of its own): opens a node on a fresh temp directory, runs the timed loops, prints
// {"opsPerSec": n} and exits.
import { embeddedSide, timed, type Kind } from './workloads/embed.js';
import type { WorkloadOptions } from './workload.js';

const { kind, workers, ms, opts } = JSON.parse(process.argv[2] ?? '') as { kind: Kind; workers: number; ms: number; opts: WorkloadOptions };
const side = await embeddedSide(kind, workers, opts);
try {
  process.stdout.write(JSON.stringify({ opsPerSec: await timed(side, workers, ms) }));
} finally {
  await side.close();
}
