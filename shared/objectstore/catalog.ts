// Reading the object-store layout of one prefix (layout.ts): the latest pointer, checkpoints,
// WAL segments and branch registrations. Used by the status/gc/branch commands.
import {
  BRANCH_PREFIX,
  CHECKPOINT_PREFIX,
  MANIFEST_LATEST,
  WAL_PREFIX,
  parseCheckpointKey,
  parseWalKey,
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

export function readLatest(store: ObjectStore): Promise<Latest | undefined> {
  return readJson<Latest>(store, MANIFEST_LATEST);
}

export function readCheckpointManifest(store: ObjectStore, key: string): Promise<CheckpointManifest | undefined> {
  return readJson<CheckpointManifest>(store, key);
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

/** Every uploaded WAL segment, in index order. */
export async function listWalSegments(store: ObjectStore): Promise<WalSegmentEntry[]> {
  const out: WalSegmentEntry[] = [];
  for await (const o of store.list(WAL_PREFIX)) {
    const parsed = parseWalKey(o.key);
    if (parsed) out.push({ key: o.key, size: o.size, ...parsed });
  }
  return out;
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
