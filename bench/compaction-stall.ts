// How long does a compaction of a large history stall writes? Not part of the benchmark suite:
// `node dist/bench/compaction-stall.js [revisions] [keys]` (defaults 1,000,000 and 5,000).
//
// Builds a store of `revisions` puts over `keys` keys (128-byte values) directly through the
// apply path (testkit/history-fixture.ts: WAL entries applied to LMDB in transactions of
// 10,000, no WAL written; the engine continues after LMDB's applied index), opens the storage
// engine on it as the storage process does, runs one serial writer (each put waits for the previous one,
// so its latency is queueing + the drain + fdatasync), and after a second of writes submits a
// Compact to 1,000 revisions below the head. Prints the put latencies during the compaction
// (from its submission until its physical removal is finished) and before it.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { openMvcc, META } from '../shared/mvcc/schema.js';
import { createLogger } from '../shared/log.js';
import { encode } from '../shared/proto/index.js';
import type { Engine, WriteResult } from '../services/storage/engine.js';
import { openEngine } from '../services/storage/engine/open.js';
import { Op } from '../shared/storage/ops.js';
import { writeHistory } from '../testkit/history-fixture.js';

const revisions = Number(process.argv[2] ?? 1_000_000);
const keyCount = Number(process.argv[3] ?? 5_000);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-compact-stall-'));
const log = createLogger('bench', 'silent');

function submit(engine: Engine, op: number, type: string, req: object): Promise<WriteResult> {
  return new Promise((resolve) => engine.submit(op, encode(type, req), resolve));
}

function stats(xs: number[]): string {
  if (xs.length === 0) return 'no puts';
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!.toFixed(1);
  return `${s.length} puts, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${s[s.length - 1]!.toFixed(1)} ms`;
}

async function main(): Promise<void> {
  const t0 = performance.now();
  await writeHistory(dir, revisions, keyCount);
  console.log(`loaded ${revisions} revisions over ${keyCount} keys in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const db = openMvcc(dir, { readOnly: false, writemap: true });
  const engine = openEngine(db, dir, log);
  const head = engine.executor.revision;
  const target = head - 1000;
  let stop = false;
  let compactAt = Infinity;
  let doneAt = Infinity;
  const samples: { at: number; ms: number }[] = [];
  const writer = (async () => {
    for (let i = 0; !stop; i++) {
      const t = performance.now();
      const r = await submit(engine, Op.PUT, 'etcdserverpb.PutRequest', { key: Buffer.from(`/bench/writer-${i % 100}`), value: Buffer.alloc(128, 'w') });
      if (r.code !== 0) throw new Error(r.message);
      samples.push({ at: t, ms: performance.now() - t });
    }
  })();
  await new Promise((r) => setTimeout(r, 1000));
  compactAt = performance.now();
  const res = await submit(engine, Op.COMPACT, 'etcdserverpb.CompactionRequest', { revision: target });
  if (res.code !== 0) throw new Error(res.message);
  const answered = performance.now() - compactAt;
  // The physical removal is finished once compactedThrough reaches the compact revision.
  while ((db.meta.get(META.compactedThrough) as number | undefined) !== target) await new Promise((r) => setTimeout(r, 5));
  doneAt = performance.now();
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await writer;
  console.log(`compact to ${target} (head ${head}): answered after ${answered.toFixed(0)} ms, history removed after ${(doneAt - compactAt).toFixed(0)} ms`);
  console.log(`  before:  ${stats(samples.filter((s) => s.at < compactAt).map((s) => s.ms))}`);
  console.log(`  during:  ${stats(samples.filter((s) => s.at + s.ms >= compactAt && s.at <= doneAt).map((s) => s.ms))}`);
  console.log(`  history records left: ${db.history.getCount()}, keys: ${db.keyrevs.getKeysCount()}`);
  await engine.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(1);
});
