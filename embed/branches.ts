// fork() and unfork(): a branch registration in the source prefix, as `kvs branch fork|unfork`
// make (shared/objectstore/branches.ts), for a program that opens branch nodes itself.
import { forkBranch, unforkBranch, type BranchArgNames } from '../shared/objectstore/branches.js';
import type { ObjectStoreOption } from './options.js';
import { openStore } from './store-option.js';

/** fork() and unfork() name their arguments in messages as a program passes them. */
const ARG_NAMES: BranchArgNames = { branchId: 'branchId', checkpoint: 'checkpointKey' };

export interface ForkOptions {
  /** The checkpoint to fork from; default the source's latest. */
  checkpointKey?: string;
  /** The source prefix's key, when its objects are encrypted. */
  encryptionKey?: Uint8Array;
}

/**
 * Registers branch `branchId` in `sourceStore` at a checkpoint (as `kvs branch fork`), pinning it
 * against gc there; resolves with the checkpoint key, for a branch node's
 * `branchPoint: { sourceStore, checkpointKey }`. Forking again at the same checkpoint is harmless.
 */
export async function fork(sourceStore: ObjectStoreOption, branchId: string, opts: ForkOptions = {}): Promise<string> {
  const store = await openStore(sourceStore, opts.encryptionKey);
  try {
    return (await forkBranch(store, branchId, opts.checkpointKey, new Date(), ARG_NAMES)).checkpoint;
  } finally {
    store.close();
  }
}

/** Unregisters branch `branchId` from `sourceStore` (as `kvs branch unfork`), so that gc there may reclaim its checkpoint. */
export async function unfork(sourceStore: ObjectStoreOption, branchId: string, opts: { encryptionKey?: Uint8Array } = {}): Promise<void> {
  const store = await openStore(sourceStore, opts.encryptionKey);
  try {
    await unforkBranch(store, branchId, ARG_NAMES);
  } finally {
    store.close();
  }
}
