// Reading the object-store layout of one prefix (layout.ts): the latest pointer, checkpoints,
// WAL segments and branch registrations. Used by the status/gc/branch commands, the archiver
// and the boot-time restore.
import {
  BRANCH_PREFIX,
  CHECKPOINT_PREFIX,
  GC_RUNNING_PREFIX,
  MANIFEST_LATEST,
  WAL_PREFIX,
  parseCheckpointKey,
  parseWalKey,
  walKey,
  type BranchRegistration,
  type CheckpointManifest,
  type Latest,
} from './layout.js';
import type { ObjectInfo, ObjectStore } from './store.js';

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

export interface WalSegmentEntry {
  key: string;
  first: bigint;
  last: bigint;
  size: number;
}

/**
 * Uploaded WAL segments, in index order (the keys' order: first, then last, zero-padded).
 * With `after`, those holding records after that index: sync mode leaves one object per
 * batch until gc, so a start-up reads from the latest checkpoint's index on (StartAfter)
 * rather than everything. A segment reaching back over `after` (async mode) sorts before
 * that point: when the listing does not continue right at after+1, the whole prefix is read.
 */
export async function listWalSegments(store: ObjectStore, opts: { after?: bigint } = {}): Promise<WalSegmentEntry[]> {
  const { after } = opts;
  const read = async (startAfter?: string) => {
    const out: WalSegmentEntry[] = [];
    for await (const o of store.list(WAL_PREFIX, startAfter === undefined ? undefined : { startAfter })) {
      const parsed = parseWalKey(o.key);
      if (parsed && (after === undefined || parsed.last > after)) out.push({ key: o.key, size: o.size, ...parsed });
    }
    return out;
  };
  if (!after) return read();
  // Keys after wal/<after>-<after>.wal: every segment whose first index is above `after`, and
  // those starting at `after` that go beyond it. Continuing right at after+1, that is all (a
  // segment reaching back over `after` would repeat records these hold). Otherwise, or when
  // nothing follows (an idle node since its checkpoint), an earlier segment may reach past
  // `after`, and only the whole listing can tell.
  const from = await read(walKey(after, after));
  if (from.length && from[0]!.first <= after + 1n) return from;
  return read();
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
