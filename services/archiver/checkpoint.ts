// A checkpoint: a consistent copy of the LMDB file, stored as content-addressed pieces under
// sst/, then its index checkpoint/<term>/<revision>/manifest.json, then manifest/latest.
//
// The copy is LMDB's own (mdb_env_copy through a read-only environment, in this process, so
// storage is not blocked): one read transaction, so the revision and applied index recorded
// are read back from the copy itself. It is not compacted: LMDB writes copy-on-write into
// free pages and leaves the others where they are, so between two checkpoints most fixed-size
// pieces are byte-identical, and a piece already in the object store is not uploaded again.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { PreconditionFailedError, type ObjectStore } from '../../shared/objectstore/store.js';
import {
  GC_RUNNING_STALE_MS,
  MANIFEST_LATEST,
  checkpointKey,
  sstKey,
  type CheckpointManifest,
  type Latest,
  type SstRef,
} from '../../shared/objectstore/layout.js';
import type { Logger } from '../../shared/log.js';
import { dbPath, openMvcc } from '../../shared/mvcc/schema.js';
import { readDbMeta } from './db-meta.js';
import { listGcRuns, requireCheckpointManifest } from '../../shared/objectstore/catalog.js';
import { progressReporter } from '../../shared/progress.js';

/** 1 MiB: a multiple of LMDB's 4 KiB page, so pieces split on page boundaries. */
export const PIECE_BYTES = 1024 * 1024;
const PARALLEL_UPLOADS = 4;

export interface CheckpointOptions {
  log: Logger;
  term: number;
  /** The checkpoint this one follows, if any: nothing changed since it means none is taken. */
  previous?: Latest;
  /** Pieces known to be stored, by key (the previous checkpoint's; a branch's: its source's). */
  known: Map<string, SstRef>;
  pieceBytes?: number;
  /**
   * Cluster mode: another node (a deposed leader finishing late) may write manifest/latest too,
   * so it is replaced only if unchanged since read (If-Match). A single node is its prefix's only
   * writer, and its bucket may be versioned (restore points), where RGW's conditional writes are
   * not reliable: it writes after the same newer-or-not check, unconditionally.
   */
  guardLatest?: boolean;
  /**
   * The database as storage has it open in this process (an embedded node): copied through
   * that environment. Without it, a read-only environment is opened for the copy and closed.
   */
  live?: LiveDatabase;
}

/** What a checkpoint needs of an open LMDB environment: its copy (mdb_env_copy). */
export interface LiveDatabase {
  backup(path: string, compact: boolean): Promise<void>;
}

export interface CheckpointResult {
  unchanged: boolean;
  key: string;
  latest: Latest;
  manifest?: CheckpointManifest;
  pieces: number;
  uploaded: number;
}

export async function takeCheckpoint(store: ObjectStore, dataDir: string, opts: CheckpointOptions): Promise<CheckpointResult> {
  const { log } = opts;
  const pieceBytes = opts.pieceBytes ?? PIECE_BYTES;
  const scratch = path.join(dataDir, 'archiver', 'checkpoint');
  fs.rmSync(scratch, { recursive: true, force: true });
  fs.mkdirSync(dbPath(scratch), { recursive: true });
  try {
    if (opts.live) await opts.live.backup(dbPath(scratch), false);
    else {
      const live = openMvcc(dataDir, { readOnly: true });
      try {
        await live.env.backup(dbPath(scratch), false);
      } finally {
        await live.env.close();
      }
    }
    const meta = await readDbMeta(scratch);
    if (opts.previous && opts.previous.appliedIndex === meta.appliedIndex) {
      return { unchanged: true, key: opts.previous.checkpoint, latest: opts.previous, pieces: 0, uploaded: 0 };
    }

    const file = path.join(dbPath(scratch), 'data.mdb');
    const size = fs.statSync(file).size;
    const count = Math.ceil(size / pieceBytes);
    const refs: SstRef[] = new Array(count);
    let uploaded = 0;
    /** Pieces taken as stored without writing them: checked again once the manifest names them. */
    const reused: number[] = [];
    const shown = progressReporter('checkpoint', process.stderr, log);
    const phase = `revision ${meta.revision}: pieces`;
    let done = 0;
    shown(phase, 0, count);
    const fd = fs.openSync(file, 'r');
    try {
      let next = 0;
      const worker = async () => {
        const buf = Buffer.allocUnsafe(pieceBytes);
        while (next < count) {
          const i = next++;
          const n = fs.readSync(fd, buf, 0, Math.min(pieceBytes, size - i * pieceBytes), i * pieceBytes);
          const body = buf.subarray(0, n);
          const key = sstKey(createHash('sha256').update(body).digest('hex'));
          const known = opts.known.get(key);
          if (known) {
            refs[i] = known;
            reused.push(i);
          } else {
            refs[i] = { key, size: n };
            try {
              const put = await store.put(key, Buffer.from(body), { ifNoneMatch: '*' });
              if (put.versionId) refs[i]!.versionId = put.versionId;
              uploaded++;
            } catch (err) {
              if (!(err instanceof PreconditionFailedError)) throw err;
              // Already stored, by a checkpoint that did not become latest: an orphan that gc
              // may be deleting right now.
              reused.push(i);
            }
          }
          shown(phase, ++done, count);
        }
      };
      await Promise.all(Array.from({ length: Math.min(PARALLEL_UPLOADS, count) }, worker));
    } finally {
      fs.closeSync(fd);
    }

    const key = checkpointKey(opts.term, meta.revision);
    const manifest: CheckpointManifest = {
      format: 'kvs-lmdb/1',
      revision: meta.revision,
      term: opts.term,
      appliedIndex: meta.appliedIndex,
      compactRevision: meta.compactRevision,
      createdAt: new Date().toISOString(),
      sst_files: refs,
      pebble_meta: [],
    };
    // A branch's checkpoint shares pieces with its source: name where they live.
    const foreign = refs.find((r) => r.prefix !== undefined);
    if (foreign) manifest.source_prefix = foreign.prefix;
    try {
      await store.put(key, Buffer.from(JSON.stringify(manifest)), { ifNoneMatch: '*' });
    } catch (err) {
      if (!(err instanceof PreconditionFailedError)) throw err;
      // A checkpoint at this revision exists: only a compaction happened since (it creates no
      // revision), or an earlier attempt stopped before manifest/latest. It stays as it is
      // (a branch may pin it); the WAL covers the rest.
      const existing = await requireCheckpointManifest(store, key);
      const latest: Latest = { checkpoint: key, revision: existing.revision, term: existing.term, appliedIndex: existing.appliedIndex };
      const unchanged = opts.previous?.checkpoint === key;
      if (!unchanged) {
        // Its pieces may have gone as orphans meanwhile (it never became latest).
        const ours = new Map(refs.map((r, i) => [r.key, i]));
        const missing = await ensurePieces(store, file, pieceBytes, existing.sst_files, existing.sst_files.map((_, i) => i), (r) => ours.get(r.key));
        if (missing.length) {
          throw new Error(`checkpoint ${store.location}/${key} exists but lacks pieces this copy cannot supply (${missing.join(', ')}); it cannot become latest`);
        }
        await advanceLatest(store, latest, log, opts.guardLatest === true);
      }
      log.info({ key }, 'a checkpoint at this revision exists already; keeping it');
      return { unchanged, key, latest, manifest: existing, pieces: count, uploaded };
    }
    await ensurePieces(store, file, pieceBytes, refs, reused, (_, i) => i);
    const latest: Latest = { checkpoint: key, revision: meta.revision, term: opts.term, appliedIndex: meta.appliedIndex };
    await advanceLatest(store, latest, log, opts.guardLatest === true);
    log.info({ key, revision: meta.revision, appliedIndex: meta.appliedIndex, pieces: count, uploaded }, 'checkpoint written');
    return { unchanged: false, key, latest, manifest, pieces: count, uploaded };
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Points manifest/latest at `latest` unless it names a newer checkpoint already: one of a later
 * term (a deposed leader's checkpoint finishing late must not move it back, nor below what gc
 * has removed since), or of this term at a higher index. Conditional in cluster mode, so two
 * writers cannot both win on a stale read (CheckpointOptions.guardLatest). The checkpoint itself stays; gc removes it when it is old enough.
 */
async function advanceLatest(store: ObjectStore, latest: Latest, log: Logger, conditional: boolean): Promise<void> {
  for (;;) {
    const cur = await store.get(MANIFEST_LATEST);
    if (cur) {
      const was = JSON.parse(cur.body.toString('utf8')) as Latest;
      if (was.term > latest.term || (was.term === latest.term && was.appliedIndex > latest.appliedIndex)) {
        log.warn({ latest: was.checkpoint, ours: latest.checkpoint }, 'manifest/latest names a newer checkpoint; leaving it');
        return;
      }
    }
    try {
      const cond = !conditional ? undefined : cur ? { ifMatch: cur.etag } : { ifNoneMatch: '*' as const };
      await store.put(MANIFEST_LATEST, Buffer.from(JSON.stringify(latest)), cond);
      return;
    } catch (err) {
      if (!(err instanceof PreconditionFailedError)) throw err;
    }
  }
}

/**
 * Makes sure the pieces `indexes` of `refs` exist before manifest/latest names a manifest that
 * lists them. `kvs gc` does not coordinate with checkpoints: it lists the manifests, then deletes
 * pieces none of them names (those of checkpoints it deleted, and old unreferenced ones). A
 * piece this checkpoint reused without writing it (known from the previous checkpoint, or found
 * present by create-if-absent) may be among them. Each gc run keeps a `gc-running/` marker while
 * it runs, so, once our manifest is written:
 * - a gc that starts later lists our manifest and keeps our pieces;
 * - a gc that ended earlier has done its deletes, which the HEADs below see (a missing piece is
 *   uploaded again from the copy);
 * - a gc still running may delete after our HEADs: the checkpoint fails (latest stays where it
 *   was) and the next attempt, which finds this manifest, checks again.
 * Pieces that live in a branch's source prefix are pinned there by the branch registration.
 * `source(ref, i)` gives the piece's index in the local copy, if it has that piece.
 * Returns the missing pieces the copy cannot supply.
 */
async function ensurePieces(
  store: ObjectStore,
  file: string,
  pieceBytes: number,
  refs: SstRef[],
  indexes: number[],
  source: (ref: SstRef, i: number) => number | undefined,
): Promise<string[]> {
  const running = (await listGcRuns(store)).filter((o) => Date.now() - o.lastModified.getTime() < GC_RUNNING_STALE_MS);
  if (running.length) {
    throw new Error(
      `kvs gc is running on ${store.location} (${running.map((o) => o.key).join(', ')}); the checkpoint becomes latest at the next attempt. ` +
        `If no gc is running, delete the marker (it is ignored after ${GC_RUNNING_STALE_MS / 60000} minutes).`,
    );
  }
  const own = indexes.filter((i) => refs[i]!.prefix === undefined);
  const cannot: string[] = [];
  const fd = fs.openSync(file, 'r');
  try {
    let next = 0;
    const worker = async () => {
      while (next < own.length) {
        const i = own[next++]!;
        const ref = refs[i]!;
        if (await store.head(ref.key)) continue;
        const at = source(ref, i);
        if (at === undefined) {
          cannot.push(ref.key);
          continue;
        }
        const body = Buffer.allocUnsafe(ref.size);
        fs.readSync(fd, body, 0, body.length, at * pieceBytes);
        await store.put(ref.key, body);
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_UPLOADS * 2, own.length) }, worker));
  } finally {
    fs.closeSync(fd);
  }
  return cannot;
}

/** The pieces of a checkpoint as known refs; `prefix` marks pieces read from another prefix. */
export function knownPieces(manifest: CheckpointManifest, prefix?: string): Map<string, SstRef> {
  const out = new Map<string, SstRef>();
  for (const r of manifest.sst_files) out.set(r.key, prefix !== undefined && r.prefix === undefined ? { ...r, prefix } : r);
  return out;
}
