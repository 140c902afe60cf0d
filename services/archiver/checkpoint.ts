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
import { readCheckpointManifest } from './restore.js';
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
    const live = openMvcc(dataDir, { readOnly: true });
    try {
      await live.env.backup(dbPath(scratch), false);
    } finally {
      await live.env.close();
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
    const orphans: number[] = [];
    const shown = progressReporter('checkpoint');
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
          } else {
            refs[i] = { key, size: n };
            try {
              const put = await store.put(key, Buffer.from(body), { ifNoneMatch: '*' });
              if (put.versionId) refs[i]!.versionId = put.versionId;
              uploaded++;
            } catch (err) {
              if (!(err instanceof PreconditionFailedError)) throw err;
              // Already stored, by a checkpoint that did not become latest: an orphan that gc
              // may be deleting right now. Checked again once the manifest names it.
              orphans.push(i);
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
      const existing = await readCheckpointManifest(store, key);
      const latest: Latest = { checkpoint: key, revision: existing.revision, term: existing.term, appliedIndex: existing.appliedIndex };
      const unchanged = opts.previous?.checkpoint === key;
      if (!unchanged) await store.put(MANIFEST_LATEST, Buffer.from(JSON.stringify(latest)));
      log.info({ key }, 'a checkpoint at this revision exists already; keeping it');
      return { unchanged, key, latest, manifest: existing, pieces: count, uploaded };
    }
    await restoreOrphans(store, file, pieceBytes, refs, orphans);
    const latest: Latest = { checkpoint: key, revision: meta.revision, term: opts.term, appliedIndex: meta.appliedIndex };
    await store.put(MANIFEST_LATEST, Buffer.from(JSON.stringify(latest)));
    log.info({ key, revision: meta.revision, appliedIndex: meta.appliedIndex, pieces: count, uploaded }, 'checkpoint written');
    return { unchanged: false, key, latest, manifest, pieces: count, uploaded };
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * Pieces found already stored but unreferenced: `kvs gc` deletes such orphans (after an hour)
 * without coordinating with checkpoints. Now that the manifest references them gc keeps them;
 * one deleted meanwhile is uploaded again.
 */
async function restoreOrphans(store: ObjectStore, file: string, pieceBytes: number, refs: SstRef[], orphans: number[]): Promise<void> {
  if (!orphans.length) return;
  const fd = fs.openSync(file, 'r');
  try {
    for (const i of orphans) {
      if (await store.head(refs[i]!.key)) continue;
      const body = Buffer.allocUnsafe(refs[i]!.size);
      fs.readSync(fd, body, 0, body.length, i * pieceBytes);
      await store.put(refs[i]!.key, body);
    }
  } finally {
    fs.closeSync(fd);
  }
}

/** The pieces of a checkpoint as known refs; `prefix` marks pieces read from another prefix. */
export function knownPieces(manifest: CheckpointManifest, prefix?: string): Map<string, SstRef> {
  const out = new Map<string, SstRef>();
  for (const r of manifest.sst_files) out.set(r.key, prefix !== undefined && r.prefix === undefined ? { ...r, prefix } : r);
  return out;
}
