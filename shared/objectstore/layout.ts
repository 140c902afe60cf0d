// The object-store layout under one prefix (spec: "Object-store layout"), shared by the
// archiver (writes it), the boot-time restore and the `status`/`gc`/`restore`/`branch`
// commands (read it). Keys are relative to the prefix.
//
//   manifest/latest                                   -> Latest (JSON)
//   checkpoint/<term 10d>/<revision 20d>/manifest.json -> CheckpointManifest (JSON)
//   sst/<sha256 hex>                                  -> one content-addressed piece of a checkpoint
//   wal/<first index 20d>-<last index 20d>.wal        -> WAL records [first, last], in the local
//                                                        segment file format (CRC frames); term 0
//   wal/<first 20d>-<last 20d>.t<term 10d>.wal        -> the same, uploaded by the leader of <term>
//   term/<term 10d>-<start index 20d>.json            -> TermStart (JSON): where a leader's term
//                                                        begins in the log (wal-history.ts)
//   branches/<branch id>.json                         -> BranchRegistration (JSON), in the SOURCE prefix
//   leader-lock                                       -> the cluster leader lock
//   gc-running/<start time>-<random>                   -> present while a `kvs gc` runs (checkpoint writers
//                                                        look before they move manifest/latest)

export const MANIFEST_LATEST = 'manifest/latest';
export const CHECKPOINT_PREFIX = 'checkpoint/';
export const SST_PREFIX = 'sst/';
export const WAL_PREFIX = 'wal/';
export const TERM_PREFIX = 'term/';
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

/**
 * A WAL object's key. Term 0 (a single node, and objects written before terms were named) keeps
 * the original form; a cluster leader's uploads carry its term, so that a deposed leader's late
 * uploads land beside the new leader's, never over them (wal-history.ts decides which count).
 */
export function walKey(first: bigint, last: bigint, term = 0): string {
  return `${WAL_PREFIX}${pad(first, 20)}-${pad(last, 20)}${term ? `.t${pad(term, 10)}` : ''}.wal`;
}

/**
 * A listing's startAfter for the objects holding records past `index`: those sort after
 * wal/<index>-<index>.wal, which itself sorts after every term's <index>-<index> object
 * ('.t' < '.w'), none of which holds such a record.
 */
export function walKeysAfter(index: bigint): string {
  return walKey(index, index);
}

export function parseWalKey(key: string): { first: bigint; last: bigint; term: number } | undefined {
  const m = /^wal\/(\d{20})-(\d{20})(?:\.t(\d{10}))?\.wal$/.exec(key);
  return m ? { first: BigInt(m[1]), last: BigInt(m[2]), term: m[3] ? Number(m[3]) : 0 } : undefined;
}

/** The start is in the key, so that one listing tells every term's beginning. */
export function termStartKey(term: number, startIndex: bigint): string {
  return `${TERM_PREFIX}${pad(term, 10)}-${pad(startIndex, 20)}.json`;
}

export function parseTermStartKey(key: string): { term: number; startIndex: bigint } | undefined {
  const m = /^term\/(\d{10})-(\d{20})\.json$/.exec(key);
  return m ? { term: Number(m[1]), startIndex: BigInt(m[2]) } : undefined;
}

/**
 * term/<term>-<start>.json: written by a new leader before it serves. Its log from `startIndex` on is
 * the history; records of earlier terms at or past it were never acknowledged (wal-history.ts).
 */
export interface TermStart {
  term: number;
  startIndex: number;
  nodeId: string;
  createdAt: string;
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
