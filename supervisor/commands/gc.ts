// `kvs gc`: the spec's three passes over one prefix, in order (Durability rule 4):
//   1. checkpoints beyond the newest `keep` (never the one manifest/latest names, never one a
//      branch registration pins);
//   2. orphan SSTs: referenced by a checkpoint deleted in pass 1 and by no surviving one; also
//      SSTs no checkpoint references at all (left by an interrupted gc or upload) once they
//      are older than `orphanMinAgeMs`, so that a checkpoint being uploaded keeps its pieces;
//   3. WAL segments fully covered by the latest checkpoint (last index <= its appliedIndex).
// Each pass re-reads what it depends on, so a gc interrupted anywhere leaves a restorable
// prefix and the next run finishes the job.
// While it runs, a `gc-running/` marker tells checkpoint writers that pieces they reuse may be
// going (services/archiver/checkpoint.ts, ensurePieces).
import { randomBytes } from 'node:crypto';
import {
  checkpointDir,
  listAll,
  listBranches,
  listCheckpoints,
  listWalObjects,
  readCheckpointManifest,
  readLatest,
} from '../../shared/objectstore/catalog.js';
import { GC_RUNNING_PREFIX, SST_PREFIX, type CheckpointManifest } from '../../shared/objectstore/layout.js';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import type { Progress } from '../../shared/progress.js';

export interface GcOptions {
  /** Newest checkpoints kept; at least 1. */
  keep: number | string;
  /** Unreferenced SSTs younger than this are left alone (default one hour). */
  orphanMinAgeMs?: number;
  now?: Date;
  progress?: Progress;
  /** Delete nothing: count what a run would delete (the console's "what gc would delete"). */
  dryRun?: boolean;
}

export interface GcResult {
  checkpoints: number;
  orphanSsts: number;
  walSegments: number;
  /** Things the operator should know (a pinned checkpoint that is gone, ...). */
  warnings: string[];
  /** The checkpoints deleted (or, in a dry run, that would be). */
  checkpointKeys: string[];
}

const BATCH = 1000;

/**
 * Every piece a checkpoint names. A branch's checkpoints may name pieces that live in its
 * source prefix; counting those as referenced here too is harmless (a same-named piece here
 * has the same content) and keeps a mixed manifest's own pieces safe.
 */
function pieces(m: CheckpointManifest): string[] {
  return [...(m.sst_files ?? []), ...(m.pebble_meta ?? [])].map((r) => r.key);
}

async function manifestOf(store: ObjectStore, key: string): Promise<CheckpointManifest | undefined> {
  return readCheckpointManifest(store, key);
}

async function deleteInBatches(store: ObjectStore, keys: string[], phase: string, progress?: Progress): Promise<void> {
  progress?.(phase, 0, keys.length);
  for (let i = 0; i < keys.length; i += BATCH) {
    await store.deleteMany(keys.slice(i, i + BATCH));
    progress?.(phase, Math.min(i + BATCH, keys.length), keys.length);
  }
}

export async function runGc(store: ObjectStore, opts: GcOptions): Promise<GcResult> {
  const keep = typeof opts.keep === 'number' ? opts.keep : /^\d+$/.test(opts.keep) ? Number(opts.keep) : NaN;
  if (!Number.isInteger(keep) || keep < 1) {
    throw new Error(`--keep must be a whole number of at least 1 (the latest checkpoint is always needed), got "${opts.keep}"`);
  }
  // A dry run changes nothing, so it needs no marker (and runs beside a real gc harmlessly).
  if (opts.dryRun) return passes(store, keep, opts);
  const marker = `${GC_RUNNING_PREFIX}${new Date().toISOString()}-${randomBytes(4).toString('hex')}`;
  await store.put(marker, Buffer.from(JSON.stringify({ startedAt: new Date().toISOString(), pid: process.pid })));
  try {
    return await passes(store, keep, opts);
  } finally {
    await store.delete(marker);
  }
}

async function passes(store: ObjectStore, keep: number, opts: GcOptions): Promise<GcResult> {
  const now = opts.now ?? new Date();
  const orphanMinAgeMs = opts.orphanMinAgeMs ?? 60 * 60 * 1000;
  const progress = opts.progress;
  const warnings: string[] = [];

  // ---- pass 1: checkpoints
  const latest = await readLatest(store);
  const checkpoints = await listCheckpoints(store);
  const branches = await listBranches(store);
  const retained = new Set(checkpoints.slice(0, keep).map((c) => c.key));
  if (latest) retained.add(latest.checkpoint);
  const existing = new Set(checkpoints.map((c) => c.key));
  for (const b of branches) {
    retained.add(b.checkpoint);
    if (!existing.has(b.checkpoint)) warnings.push(`branch ${b.branchId} pins ${b.checkpoint}, which does not exist`);
  }
  const doomed = checkpoints.filter((c) => !retained.has(c.key));
  const piecesOfDoomed = new Set<string>();
  progress?.('checkpoints', 0, doomed.length);
  for (const [i, c] of doomed.entries()) {
    const m = await manifestOf(store, c.key);
    if (m) for (const k of pieces(m)) piecesOfDoomed.add(k);
    if (opts.dryRun) continue;
    // The manifest goes first: a checkpoint is either whole or invisible.
    await store.delete(c.key);
    const rest = (await listAll(store, checkpointDir(c.key))).map((o) => o.key);
    if (rest.length > 0) await store.deleteMany(rest);
    progress?.('checkpoints', i + 1, doomed.length);
  }

  // ---- pass 2: orphan SSTs
  const referenced = new Set<string>();
  const doomedKeys = new Set(doomed.map((c) => c.key));
  for (const c of (await listCheckpoints(store)).filter((c) => !doomedKeys.has(c.key))) {
    const m = await manifestOf(store, c.key);
    if (m) for (const k of pieces(m)) referenced.add(k);
  }
  const orphans: string[] = [];
  for await (const o of store.list(SST_PREFIX)) {
    if (referenced.has(o.key)) continue;
    const oldEnough = now.getTime() - o.lastModified.getTime() >= orphanMinAgeMs;
    if (piecesOfDoomed.has(o.key) || oldEnough) orphans.push(o.key);
  }
  if (!opts.dryRun) await deleteInBatches(store, orphans, 'orphan SSTs', progress);

  // ---- pass 3: WAL segments covered by the latest checkpoint
  const latestNow = await readLatest(store);
  let segments: string[] = [];
  if (latestNow && (await manifestOf(store, latestNow.checkpoint))) {
    const covered = BigInt(latestNow.appliedIndex);
    // Every object below the checkpoint, whatever its term: also a deposed leader's late ones.
    segments = (await listWalObjects(store)).filter((s) => s.last <= covered).map((s) => s.key);
  } else if (latestNow) {
    warnings.push(`manifest/latest names ${latestNow.checkpoint}, which does not exist; WAL segments kept`);
  }
  if (!opts.dryRun) await deleteInBatches(store, segments, 'WAL segments', progress);

  return { checkpoints: doomed.length, orphanSsts: orphans.length, walSegments: segments.length, warnings, checkpointKeys: doomed.map((c) => c.key) };
}
