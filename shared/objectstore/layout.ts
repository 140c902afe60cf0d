// The object-store layout under one prefix (spec: "Object-store layout"), shared by the
// archiver (writes it), the boot-time restore and the `status`/`gc`/`restore`/`branch`
// commands (read it). Keys are relative to the prefix.
//
//   manifest/latest                                   -> Latest (JSON)
//   checkpoint/<term 10d>/<revision 20d>/manifest.json -> CheckpointManifest (JSON)
//   sst/<sha256 hex>                                  -> one content-addressed piece of a checkpoint
//   wal/<first index 20d>-<last index 20d>.wal        -> WAL records [first, last], in the local
//                                                        segment file format (CRC frames)
//   branches/<branch id>.json                         -> BranchRegistration (JSON), in the SOURCE prefix
//   leader-lock                                       -> the cluster leader lock
//   gc-running/<start time>-<random>                   -> present while a `kvs gc` runs (checkpoint writers
//                                                        look before they move manifest/latest)

export const MANIFEST_LATEST = 'manifest/latest';
export const CHECKPOINT_PREFIX = 'checkpoint/';
export const SST_PREFIX = 'sst/';
export const WAL_PREFIX = 'wal/';
export const BRANCH_PREFIX = 'branches/';
export const LEADER_LOCK = 'leader-lock';
export const GC_RUNNING_PREFIX = 'gc-running/';
/** A gc marker older than this is left by a gc that died; it no longer holds checkpoints back. */
export const GC_RUNNING_STALE_MS = 60 * 60 * 1000;

const pad = (n: number | bigint, width: number) => n.toString().padStart(width, '0');

export function checkpointKey(term: number, revision: number): string {
  return `${CHECKPOINT_PREFIX}${pad(term, 10)}/${pad(revision, 20)}/manifest.json`;
}

export function parseCheckpointKey(key: string): { term: number; revision: number } | undefined {
  const m = /^checkpoint\/(\d{10})\/(\d{20})\/manifest\.json$/.exec(key);
  return m ? { term: Number(m[1]), revision: Number(m[2]) } : undefined;
}

export function sstKey(sha256hex: string): string {
  return `${SST_PREFIX}${sha256hex}`;
}

export function walKey(first: bigint, last: bigint): string {
  return `${WAL_PREFIX}${pad(first, 20)}-${pad(last, 20)}.wal`;
}

export function parseWalKey(key: string): { first: bigint; last: bigint } | undefined {
  const m = /^wal\/(\d{20})-(\d{20})\.wal$/.exec(key);
  return m ? { first: BigInt(m[1]), last: BigInt(m[2]) } : undefined;
}

export function branchKey(branchId: string): string {
  return `${BRANCH_PREFIX}${branchId}.json`;
}

/** manifest/latest */
export interface Latest {
  checkpoint: string; // a checkpointKey()
  revision: number;
  term: number;
  /** WAL index the checkpoint includes: replay continues at appliedIndex + 1. */
  appliedIndex: number;
}

export interface SstRef {
  key: string; // sst/<sha256>
  size: number;
  /** Recorded on versioned buckets, for point-in-time restore. */
  versionId?: string;
  /** Set when the piece lives under another prefix of the bucket (a branch's source). */
  prefix?: string;
}

/** checkpoint/<term>/<revision>/manifest.json */
export interface CheckpointManifest {
  format: 'kvs-lmdb/1';
  revision: number;
  term: number;
  appliedIndex: number;
  compactRevision: number;
  createdAt: string; // ISO time
  /** The database file, in order: concatenating the pieces gives the LMDB data file. */
  sst_files: SstRef[];
  /** Checkpoint-local metadata objects (none so far; kept for the spec's shape). */
  pebble_meta: SstRef[];
  /** Where the pieces live when they are not under this prefix (a branch's first checkpoint). */
  source_prefix?: string;
}

/** branches/<id>.json in the source prefix: pins `checkpoint` and its sst/ objects against gc. */
export interface BranchRegistration {
  branchId: string;
  checkpoint: string;
  createdAt: string;
}
