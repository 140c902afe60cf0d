// Reading the object-store layout of one prefix (layout.ts): the latest pointer, checkpoints,
// WAL segments and branch registrations. Used by the status/gc/branch commands, the archiver
// and the boot-time restore.
import {
  BRANCH_PREFIX,
  CHECKPOINT_PREFIX,
  GC_RUNNING_PREFIX,
  MANIFEST_LATEST,
  TERM_PREFIX,
  WAL_PREFIX,
  parseCheckpointKey,
  parseTermStartKey,
  parseWalKey,
  walKeysAfter,
  type BranchRegistration,
  type CheckpointManifest,
  type Latest,
} from './layout.js';
import type { ObjectInfo, ObjectStore } from './store.js';
import { historyOf, type HistoryWal, type ListedWal } from './wal-history.js';

async function readJson<T>(store: ObjectStore, key: string): Promise<T | undefined> {
  const res = await store.get(key);
  if (!res) return undefined;
  try {
    return JSON.parse(res.body.toString('utf8')) as T;
  } catch (err) {
    throw new Error(`object ${key} in ${store.location} is not valid JSON: ${(err as Error).message}`);
  }
}

/** manifest/latest, or undefined on a prefix without a checkpoint. */
export async function readLatest(store: ObjectStore): Promise<Latest | undefined> {
  const latest = await readJson<Latest>(store, MANIFEST_LATEST);
  if (latest && (typeof latest.checkpoint !== 'string' || typeof latest.appliedIndex !== 'number')) {
    throw new Error(`object ${MANIFEST_LATEST} in ${store.location} lacks checkpoint or appliedIndex`);
  }
  return latest;
}

/** A checkpoint's manifest, or undefined when it does not exist. */
export async function readCheckpointManifest(store: ObjectStore, key: string): Promise<CheckpointManifest | undefined> {
  const m = await readJson<CheckpointManifest>(store, key);
  if (m && (m.format !== 'kvs-lmdb/1' || !Array.isArray(m.sst_files))) {
    throw new Error(`checkpoint ${store.location}/${key} is not a kvs-lmdb/1 checkpoint`);
  }
  return m;
}

/** A checkpoint's manifest, which must exist. */
export async function requireCheckpointManifest(store: ObjectStore, key: string): Promise<CheckpointManifest> {
  const m = await readCheckpointManifest(store, key);
  if (!m) throw new Error(`checkpoint ${store.location}/${key} does not exist`);
  return m;
}

/** The markers of `kvs gc` runs in progress (see runGc), with their start times. */
export async function listGcRuns(store: ObjectStore): Promise<ObjectInfo[]> {
  return listAll(store, GC_RUNNING_PREFIX);
}

export interface CheckpointEntry {
  key: string;
  term: number;
  revision: number;
}

/** Newest first: by term, then revision. */
export function compareCheckpointsNewestFirst(a: CheckpointEntry, b: CheckpointEntry): number {
  return b.term - a.term || b.revision - a.revision;
}

/** Every checkpoint manifest under the prefix, newest first. */
export async function listCheckpoints(store: ObjectStore): Promise<CheckpointEntry[]> {
  const out: CheckpointEntry[] = [];
  for await (const o of store.list(CHECKPOINT_PREFIX)) {
    const parsed = parseCheckpointKey(o.key);
    if (parsed) out.push({ key: o.key, ...parsed });
  }
  return out.sort(compareCheckpointsNewestFirst);
}

/** An uploaded WAL object as the history uses it (wal-history.ts). */
export type WalSegmentEntry = HistoryWal;

/** Every WAL object as it is stored, history or not (gc, status); `startAfter` a key. */
export async function listWalObjects(store: ObjectStore, startAfter?: string): Promise<ListedWal[]> {
  const listed: ListedWal[] = [];
  for await (const o of store.list(WAL_PREFIX, startAfter === undefined ? undefined : { startAfter })) {
    const parsed = parseWalKey(o.key);
    if (parsed) listed.push({ key: o.key, size: o.size, ...parsed });
  }
  return listed;
}

/** Where each cluster term begins (term/ objects); the lowest index when one was written twice. */
export async function listTermStarts(store: ObjectStore): Promise<Map<number, bigint>> {
  const out = new Map<number, bigint>();
  for await (const o of store.list(TERM_PREFIX)) {
    const t = parseTermStartKey(o.key);
    if (!t) continue;
    const seen = out.get(t.term);
    if (seen === undefined || t.startIndex < seen) out.set(t.term, t.startIndex);
  }
  return out;
}

/**
 * The uploaded WAL that is history, in index order (the keys' order: first, then last,
 * zero-padded), each object cut where a newer term begins (wal-history.ts). With `after`,
 * those holding records after that index: sync mode leaves one object per batch until gc, so
 * a start-up reads from the latest checkpoint's index on (StartAfter) rather than everything.
 * A segment reaching back over `after` (async mode) sorts before that point: when the listing
 * does not continue right at after+1, the whole prefix is read.
 */
export async function listWalSegments(store: ObjectStore, opts: { after?: bigint } = {}): Promise<WalSegmentEntry[]> {
  const { after } = opts;
  const starts = await listTermStarts(store);
  const read = async (startAfter?: string) =>
    historyOf(await listWalObjects(store, startAfter), starts).filter((o) => after === undefined || o.last > after);
  if (!after) return read();
  // Keys after wal/<after>-<after>: every segment whose first index is above `after`, and
  // those starting at `after` that go beyond it. Continuing right at after+1, that is all (a
  // segment reaching back over `after` would repeat records these hold). Otherwise, or when
  // nothing follows (an idle node since its checkpoint), an earlier segment may reach past
  // `after`, and only the whole listing can tell. Terms' beginnings come from term/, whole.
  const from = await read(walKeysAfter(after));
  if (from.length && from[0]!.first <= after + 1n) return from;
  return read();
}

/**
 * The index through which the object store holds the history: the latest checkpoint's, or the
 * last uploaded record past it (never below `atLeast`, a checkpoint the caller knows of).
 */
export async function storedPosition(store: ObjectStore, atLeast = 0): Promise<number> {
  const checkpointIndex = Math.max((await readLatest(store))?.appliedIndex ?? 0, atLeast);
  const objects = await listWalSegments(store, { after: BigInt(checkpointIndex) });
  const last = objects.reduce((n, o) => (o.last > n ? o.last : n), 0n);
  return Math.max(Number(last), checkpointIndex);
}

export async function listBranches(store: ObjectStore): Promise<BranchRegistration[]> {
  const keys: string[] = [];
  for await (const o of store.list(BRANCH_PREFIX)) if (o.key.endsWith('.json')) keys.push(o.key);
  const out: BranchRegistration[] = [];
  for (const key of keys) {
    const reg = await readJson<BranchRegistration>(store, key);
    if (reg) out.push(reg);
  }
  return out;
}

/** Objects under `prefix`, collected. */
export async function listAll(store: ObjectStore, prefix: string): Promise<ObjectInfo[]> {
  const out: ObjectInfo[] = [];
  for await (const o of store.list(prefix)) out.push(o);
  return out;
}

/** The directory of a checkpoint (`checkpoint/<term>/<revision>/`), where its local objects live. */
export function checkpointDir(manifestKey: string): string {
  return manifestKey.slice(0, manifestKey.lastIndexOf('/') + 1);
}
