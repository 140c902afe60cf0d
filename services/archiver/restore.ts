// Boot-time restore (spec, Durability rule 1) and `kvs restore`: make a data directory hold
// everything the object store has, before storage opens it.
//
//   1. read manifest/latest;
//   2. restore its checkpoint if the local database is absent (a branch's first boot: the
//      source's checkpoint, read in place from the source prefix);
//   3. (storage replays the local WAL when it opens)
//   4. write the uploaded WAL the local WAL lacks as local segments, so that storage's replay
//      of step 3 covers it too.
//
// Everything is fetched into <data-dir>/archiver/ and moved into place when complete, and the
// local manifest is written last: a directory with data but no local manifest is partial.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { ObjectStore } from '../../shared/objectstore/store.js';
import { MANIFEST_LATEST, type CheckpointManifest, type Latest, type SstRef } from '../../shared/objectstore/layout.js';
import { listWalSegments, readLatest, requireCheckpointManifest } from '../../shared/objectstore/catalog.js';
import type { Logger } from '../../shared/log.js';
import { dbPath } from '../../shared/mvcc/schema.js';
import { fsyncDir } from '../../shared/fsync.js';
import { LOCAL_MANIFEST, dataEntries, readLocalManifest, writeLocalManifest, type LocalManifest } from './local-manifest.js';
import { localWalRange, materializeWal, type WalObject } from '../../shared/wal/objects.js';
import { readDbMeta, readLocalDbMeta } from './db-meta.js';
import { progressReporter } from '../../shared/progress.js';

/** A failure the node cannot start past; the message says what to do. */
export class StartupError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'StartupError';
  }
}

export interface BranchPoint {
  /** The source prefix (same bucket) and a store opened on it. */
  sourcePrefix: string;
  source: ObjectStore;
  /** checkpoint/<term>/<revision>/manifest.json in the source prefix. */
  checkpoint: string;
}

export interface RestoreOptions {
  log: Logger;
  /** Recorded in the local manifest; a data directory of another prefix is refused. */
  bucket: string;
  prefix: string;
  /** First boot of a branch: start from the source's checkpoint when this prefix has none. */
  branch?: BranchPoint;
  /** Opens another prefix of the same bucket (pieces a branch's checkpoints share with its source). */
  openPrefix?: (prefix: string) => Promise<ObjectStore>;
  /** false while storage may be running (the archiver restarting alone): the local WAL is left alone. */
  fetchWal?: boolean;
  /** Shown in `kvs ctl status` while the restore runs. */
  onState?: (state: string) => void;
  /** In a node: progress as lines of `log` (`kvs restore` draws its own on stderr). */
  progressInLog?: boolean;
}

export interface RestoreResult {
  latest?: Latest;
  /** The checkpoint restored into an absent database (none when the database was there). */
  restored?: string;
  /** Uploaded WAL records written as local segments. */
  walRecords: number;
  /** The uploaded WAL objects (listed once, reused by the archiver for its position). */
  walObjects: WalObject[];
  /**
   * Where this prefix's history starts: the latest checkpoint's applied index, or on a branch
   * without a checkpoint of its own, its fork point's. Its WAL objects continue from there.
   */
  baseIndex: number;
}

export async function restoreDataDir(store: ObjectStore, dataDir: string, opts: RestoreOptions): Promise<RestoreResult> {
  const { log } = opts;
  const state = opts.onState ?? (() => {});
  state('reading manifest/latest');
  let latest: Latest | undefined;
  try {
    latest = await readLatest(store);
  } catch (err) {
    throw new StartupError(
      `failed to read the object-store manifest ${store.location}/${MANIFEST_LATEST}: ${(err as Error).message}. ` +
        'Check that the object store is reachable and that the credentials, bucket, prefix and endpoint are right.',
      { cause: err },
    );
  }

  const local = readLocalManifest(dataDir);
  if (local) {
    if (local.bucket !== opts.bucket || local.prefix !== opts.prefix) {
      throw new StartupError(
        `data directory ${dataDir} belongs to bucket "${local.bucket}" prefix "${local.prefix}", not bucket "${opts.bucket}" prefix "${opts.prefix}": ` +
          'use the right --s3-bucket/--s3-prefix, or clear the directory to restore this prefix into it',
      );
    }
  } else if (dataEntries(dataDir).length && (latest || opts.branch)) {
    throw new StartupError(
      `data directory ${dataDir} is not empty but has no local manifest (${LOCAL_MANIFEST}): it holds partial or corrupted state ` +
        `(${dataEntries(dataDir).join(', ')}). Clear the directory to restore it from the object store ${store.location}.`,
    );
  }

  const result: RestoreResult = { latest, walRecords: 0, walObjects: [], baseIndex: latest?.appliedIndex ?? 0 };
  if (!latest && opts.branch && !local) {
    result.baseIndex = (await requireCheckpointManifest(opts.branch.source, opts.branch.checkpoint)).appliedIndex;
  } else if (!latest && local?.branch) {
    const source = await openOther(opts, local.branch.sourcePrefix);
    try {
      result.baseIndex = (await requireCheckpointManifest(source, local.branch.checkpoint)).appliedIndex;
    } finally {
      source.close();
    }
  }
  const scratch = path.join(dataDir, 'archiver', 'restore');
  if (!fs.existsSync(path.join(dbPath(dataDir), 'data.mdb'))) {
    let from: { store: ObjectStore; key: string; prefix: string } | undefined;
    if (latest) from = { store, key: latest.checkpoint, prefix: opts.prefix };
    else if (opts.branch && !local) from = { store: opts.branch.source, key: opts.branch.checkpoint, prefix: opts.branch.sourcePrefix };
    if (from) {
      state(`restoring checkpoint ${from.key}`);
      const manifest = await requireCheckpointManifest(from.store, from.key);
      await downloadCheckpoint(manifest, from, scratch, opts, state);
      const meta = await readDbMeta(scratch);
      if (meta.revision !== manifest.revision || meta.appliedIndex !== manifest.appliedIndex) {
        throw new StartupError(
          `checkpoint ${from.key} is inconsistent: its manifest says revision ${manifest.revision}, applied index ${manifest.appliedIndex}, ` +
            `its database holds revision ${meta.revision}, applied index ${meta.appliedIndex}`,
        );
      }
      fs.rmSync(path.join(dbPath(scratch), 'lock.mdb'), { force: true });
      fs.mkdirSync(dataDir, { recursive: true });
      fs.rmSync(dbPath(dataDir), { recursive: true, force: true });
      fs.renameSync(dbPath(scratch), dbPath(dataDir));
      fsyncDir(dataDir);
      result.restored = from.key;
      log.info({ checkpoint: from.key, revision: manifest.revision, appliedIndex: manifest.appliedIndex }, 'restored checkpoint');
    }
  }
  fs.rmSync(scratch, { recursive: true, force: true });

  if (latest || opts.branch || opts.fetchWal !== false) {
    state('listing uploaded WAL');
    // What is already in the database (a checkpoint restored, or the local one) is not needed.
    const applied = (await readLocalDbMeta(dataDir))?.appliedIndex ?? 0;
    result.walObjects = await listWalSegments(store, { after: BigInt(Math.min(applied, result.baseIndex)) });
  }
  if (opts.fetchWal !== false && result.walObjects.length) {
    state('fetching uploaded WAL');
    result.walRecords = await fetchMissingWal(store, result.walObjects, dataDir, log);
  }

  if (!local) {
    const m: LocalManifest = { format: 'kvs-data/1', bucket: opts.bucket, prefix: opts.prefix, createdAt: new Date().toISOString() };
    if (result.restored) m.restoredFrom = result.restored;
    if (opts.branch && !latest) m.branch = { sourcePrefix: opts.branch.sourcePrefix, checkpoint: opts.branch.checkpoint };
    writeLocalManifest(dataDir, m);
  }
  return result;
}

function openOther(opts: RestoreOptions, prefix: string): Promise<ObjectStore> {
  if (!opts.openPrefix) throw new StartupError(`this data directory is a branch of prefix "${prefix}", which this restore cannot open`);
  return opts.openPrefix(prefix);
}

/**
 * Fetches the pieces of a checkpoint into `<scratch>/db/data.mdb`, checking each against its
 * content address. Pieces with a `prefix` live in that prefix (a branch's source).
 */
async function downloadCheckpoint(
  manifest: CheckpointManifest,
  from: { store: ObjectStore; prefix: string },
  scratch: string,
  opts: RestoreOptions,
  state: (s: string) => void,
): Promise<void> {
  fs.rmSync(scratch, { recursive: true, force: true });
  fs.mkdirSync(dbPath(scratch), { recursive: true });
  const file = path.join(dbPath(scratch), 'data.mdb');
  const shown = progressReporter('restore', process.stderr, opts.progressInLog ? opts.log : undefined);
  const phase = `checkpoint at revision ${manifest.revision}: pieces`;
  const stores = new Map<string, ObjectStore>([[from.prefix, from.store]]);
  const storeOf = async (ref: SstRef): Promise<ObjectStore> => {
    const prefix = ref.prefix ?? from.prefix;
    let s = stores.get(prefix);
    if (!s) {
      if (!opts.openPrefix) throw new Error(`checkpoint piece ${ref.key} lives in prefix "${prefix}", which this restore cannot open`);
      s = await opts.openPrefix(prefix);
      stores.set(prefix, s);
    }
    return s;
  };
  const offsets: number[] = [];
  let offset = 0;
  for (const p of manifest.sst_files) {
    offsets.push(offset);
    offset += p.size;
  }
  const fd = fs.openSync(file, 'w');
  let done = 0;
  shown(phase, 0, manifest.sst_files.length);
  try {
    let next = 0;
    const worker = async () => {
      while (next < manifest.sst_files.length) {
        const i = next++;
        const ref = manifest.sst_files[i]!;
        const got = await (await storeOf(ref)).get(ref.key, ref.versionId ? { versionId: ref.versionId } : undefined);
        if (!got) throw new Error(`checkpoint piece ${ref.key} is missing from the object store (prefix "${ref.prefix ?? from.prefix}")`);
        const hash = createHash('sha256').update(got.body).digest('hex');
        if (!ref.key.endsWith(hash) || got.body.length !== ref.size) {
          throw new Error(`checkpoint piece ${ref.key} is damaged: ${got.body.length} bytes with sha256 ${hash}`);
        }
        fs.writeSync(fd, got.body, 0, got.body.length, offsets[i]);
        shown(phase, ++done, manifest.sst_files.length);
        if (done % 16 === 0) state(`restoring checkpoint: ${done}/${manifest.sst_files.length} pieces`);
      }
    };
    await Promise.all(Array.from({ length: Math.min(8, manifest.sst_files.length) }, worker));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Step 4: what the object store has beyond the local position (the larger of the local WAL's
 * last record and LMDB's applied index), and any hole between LMDB and the local WAL's start.
 */
async function fetchMissingWal(store: ObjectStore, objects: WalObject[], dataDir: string, log: Logger): Promise<number> {
  const walDir = path.join(dataDir, 'wal');
  const applied = BigInt((await readLocalDbMeta(dataDir))?.appliedIndex ?? 0);
  const local = localWalRange(walDir);
  let written = 0;
  if (local && local.first > applied + 1n) {
    written += await materializeWal(store, objects, walDir, applied + 1n, local.first - 1n, log);
  }
  const position = local && local.last > applied ? local.last : applied;
  written += await materializeWal(store, objects, walDir, position + 1n, undefined, log);
  if (written) log.info({ records: written, after: Number(position) }, 'fetched uploaded WAL records the local WAL lacked');
  return written;
}
