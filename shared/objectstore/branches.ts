// Branch registrations (`kvs branch fork|unfork`, and an embedded node's fork/unfork): one in
// the SOURCE prefix pins a checkpoint (and its SSTs) against gc, so that a branch node can start
// from it (spec: Durability rule 5).
import { readCheckpointManifest, readLatest } from './catalog.js';
import { branchKey, parseCheckpointKey, type BranchRegistration } from './layout.js';
import { PreconditionFailedError, type ObjectStore } from './store.js';

/** What the caller calls the branch id and the checkpoint key, for messages: the CLI's flags, or an embedding program's arguments. */
export interface BranchArgNames {
  branchId: string;
  checkpoint: string;
}

const FLAGS: BranchArgNames = { branchId: '--branch-id', checkpoint: '--checkpoint' };

/** Branch ids become object keys; keep them to one plain path segment. */
export function checkBranchId(id: unknown, names: BranchArgNames = FLAGS): string {
  if (typeof id !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id)) {
    throw new Error(`${names.branchId} must be 1-128 characters of letters, digits, '.', '_' or '-' (starting with a letter or digit), got "${id ?? ''}"`);
  }
  return id;
}

async function readRegistration(store: ObjectStore, branchId: string): Promise<BranchRegistration | undefined> {
  const res = await store.get(branchKey(branchId));
  return res && (JSON.parse(res.body.toString('utf8')) as BranchRegistration);
}

/** Registers `branchId` at `checkpoint` (default: the latest); returns the registration. Repeating a fork is harmless. */
export async function forkBranch(store: ObjectStore, branchId: string, checkpoint?: string, now = new Date(), names: BranchArgNames = FLAGS): Promise<BranchRegistration> {
  checkBranchId(branchId, names);
  if (checkpoint === undefined) {
    const latest = await readLatest(store);
    if (!latest) {
      throw new Error(`no checkpoint in ${store.location}: a branch forks from a checkpoint, and this prefix has none yet (no manifest/latest)`);
    }
    checkpoint = latest.checkpoint;
  }
  if (!parseCheckpointKey(checkpoint)) {
    throw new Error(`${names.checkpoint} must be a checkpoint key like checkpoint/0000000001/00000000000000000042/manifest.json, got "${checkpoint}"`);
  }
  const exists = async () => (await readCheckpointManifest(store, checkpoint!)) !== undefined;
  if (!(await exists())) throw new Error(`checkpoint ${checkpoint} does not exist in ${store.location}`);

  const reg: BranchRegistration = { branchId, checkpoint, createdAt: now.toISOString() };
  try {
    await store.put(branchKey(branchId), Buffer.from(JSON.stringify(reg, null, 2) + '\n'), { ifNoneMatch: '*' });
  } catch (err) {
    if (!(err instanceof PreconditionFailedError)) throw err;
    const existing = await readRegistration(store, branchId);
    if (existing?.checkpoint === checkpoint) return existing;
    throw new Error(
      `branch ${branchId} is already registered at ${existing?.checkpoint ?? 'another checkpoint'}; unfork it first (kvs branch unfork --branch-id ${branchId})`,
    );
  }
  // A gc that listed the registrations before ours may have deleted the checkpoint meanwhile.
  if (!(await exists())) {
    await store.delete(branchKey(branchId));
    throw new Error(`checkpoint ${checkpoint} was deleted (by a concurrent gc) while the branch was being registered; fork again`);
  }
  return reg;
}

/** Removes the registration, so that gc may reclaim its checkpoint. */
export async function unforkBranch(store: ObjectStore, branchId: string, names: BranchArgNames = FLAGS): Promise<BranchRegistration> {
  checkBranchId(branchId, names);
  const existing = await readRegistration(store, branchId);
  if (!existing) throw new Error(`branch ${branchId} is not registered in ${store.location}`);
  await store.delete(branchKey(branchId));
  return existing;
}
