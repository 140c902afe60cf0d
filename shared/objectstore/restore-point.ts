// Versioned point-in-time restore (spec: Durability rule 6). A restore point records, for one
// moment, the version id of every object a restore reads: manifest/latest, the checkpoint
// manifest it names, that checkpoint's pieces (SSTs and metadata), and the WAL segments after
// the checkpoint. `RestorePointStore` then serves exactly those versions, read-only, so the
// ordinary restore run over it rebuilds the state of that moment, even after later
// checkpoints, overwrites and gc (on a versioned bucket a delete only adds a delete marker).
import { readFile } from 'node:fs/promises';
import { MANIFEST_LATEST, TERM_PREFIX, parseWalKey, type CheckpointManifest, type Latest } from './layout.js';
import type { GetResult, ListOptions, ObjectInfo, ObjectStore, ObjectVersion, PutResult } from './store.js';

export interface RestorePoint {
  format: 'kvs-restore-point/1';
  createdAt: string;
  /** The prefix it was recorded from (for messages; restoring elsewhere is allowed). */
  location: string;
  checkpoint: string;
  revision: number;
  term: number;
  /** key (relative to the prefix) -> its version at the point */
  objects: Record<string, RecordedVersion>;
}

export interface RecordedVersion {
  versionId: string;
  /** Size of the body as the store returns it. */
  size: number;
  etag: string;
}

const NO_VERSIONS =
  'the bucket keeps no object versions: a restore point needs versioning enabled on the bucket before the first write ' +
  '(the local directory store has none)';

/** The newest version of every key under `prefix` that is not a delete marker (a key gc deleted since keeps its last version). */
async function newestVersions(store: ObjectStore, prefix: string): Promise<Map<string, ObjectVersion>> {
  const out = new Map<string, ObjectVersion>();
  for await (const v of store.listVersions(prefix)) {
    if (v.deleteMarker) continue;
    const seen = out.get(v.key);
    if (!seen || v.lastModified > seen.lastModified || (v.isLatest && !seen.isLatest)) out.set(v.key, v);
  }
  return out;
}

/** Records what a restore of the prefix would read now. */
export async function recordRestorePoint(store: ObjectStore, now = new Date()): Promise<RestorePoint> {
  const latestObj = await store.get(MANIFEST_LATEST);
  if (!latestObj) throw new Error(`no manifest/latest in ${store.location}: nothing to record (no checkpoint yet)`);
  if (!latestObj.versionId || latestObj.versionId === 'null') throw new Error(`${store.location}: ${NO_VERSIONS}`);
  const latest = JSON.parse(latestObj.body.toString('utf8')) as Latest;

  const objects: Record<string, RecordedVersion> = {
    [MANIFEST_LATEST]: { versionId: latestObj.versionId, size: latestObj.body.length, etag: latestObj.etag },
  };
  const cp = await store.get(latest.checkpoint);
  if (!cp?.versionId) throw new Error(`checkpoint ${latest.checkpoint} named by manifest/latest is missing from ${store.location}`);
  const manifest = JSON.parse(cp.body.toString('utf8')) as CheckpointManifest;
  objects[latest.checkpoint] = { versionId: cp.versionId, size: cp.body.length, etag: cp.etag };

  // Pieces: the version the archiver recorded, else the newest one (also if gc deleted it since).
  const pieceVersions = await newestVersions(store, 'sst/');
  for (const ref of [...manifest.sst_files, ...(manifest.pebble_meta ?? [])]) {
    if ((ref as { prefix?: string }).prefix !== undefined || manifest.source_prefix !== undefined) {
      throw new Error(`checkpoint ${latest.checkpoint} shares pieces with its source prefix (a branch): restore points cover one prefix only`);
    }
    const newest = pieceVersions.get(ref.key) ?? (await store.head(ref.key));
    const versionId = ref.versionId ?? newest?.versionId;
    if (!versionId || !newest) throw new Error(`piece ${ref.key} of ${latest.checkpoint} has no version in ${store.location}`);
    objects[ref.key] = { versionId, size: ref.size, etag: ref.versionId && ref.versionId !== newest.versionId ? '' : newest.etag };
  }

  // WAL segments the checkpoint does not cover, as they are now.
  for await (const o of store.list('wal/')) {
    const range = parseWalKey(o.key);
    if (!range || range.last <= BigInt(manifest.appliedIndex)) continue;
    const head = await store.head(o.key);
    if (head?.versionId) objects[o.key] = { versionId: head.versionId, size: head.size, etag: head.etag };
  }
  // Where each cluster term begins: which of those WAL objects are history (wal-history.ts).
  for await (const o of store.list(TERM_PREFIX)) {
    const head = await store.head(o.key);
    if (head?.versionId) objects[o.key] = { versionId: head.versionId, size: head.size, etag: head.etag };
  }
  return {
    format: 'kvs-restore-point/1',
    createdAt: now.toISOString(),
    location: store.location,
    checkpoint: latest.checkpoint,
    revision: latest.revision,
    term: latest.term,
    objects,
  };
}

export function parseRestorePoint(text: string, source: string): RestorePoint {
  let p: RestorePoint;
  try {
    p = JSON.parse(text) as RestorePoint;
  } catch (err) {
    throw new Error(`restore point ${source} is not JSON: ${(err as Error).message}`);
  }
  if (p?.format !== 'kvs-restore-point/1' || typeof p.objects !== 'object' || !p.objects[MANIFEST_LATEST]?.versionId) {
    throw new Error(`${source} is not a kvs restore point (format kvs-restore-point/1 with the version of manifest/latest)`);
  }
  return p;
}

export async function readRestorePointFile(file: string): Promise<RestorePoint> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`cannot read restore point ${file}: ${(err as Error).message}`);
  }
  return parseRestorePoint(text, file);
}

/** A read-only view of `inner` that serves each recorded key at its recorded version, and nothing else. */
export class RestorePointStore implements ObjectStore {
  readonly location: string;
  private readonly keys: string[];

  constructor(
    private readonly inner: ObjectStore,
    private readonly point: RestorePoint,
  ) {
    this.location = `${inner.location} at restore point ${point.createdAt}`;
    this.keys = Object.keys(point.objects).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  async get(key: string, opts: { versionId?: string } = {}): Promise<GetResult | undefined> {
    const versionId = this.point.objects[key]?.versionId;
    if (versionId === undefined || (opts.versionId !== undefined && opts.versionId !== versionId)) return undefined;
    const res = await this.inner.get(key, { versionId });
    if (!res) throw new Error(`${key} version ${versionId} of the restore point is gone from ${this.inner.location}`);
    return res;
  }

  /** From the recording: no request. */
  async head(key: string): Promise<ObjectInfo | undefined> {
    const v = this.point.objects[key];
    return v && { key, size: v.size, etag: v.etag, lastModified: new Date(this.point.createdAt), versionId: v.versionId };
  }

  async *list(prefix: string, opts: ListOptions = {}): AsyncIterable<ObjectInfo> {
    const after = opts.startAfter;
    for (const key of this.keys) {
      if (key.startsWith(prefix) && (after === undefined || Buffer.compare(Buffer.from(key), Buffer.from(after)) > 0)) yield (await this.head(key))!;
    }
  }

  async *listVersions(prefix: string): AsyncIterable<ObjectVersion> {
    for await (const info of this.list(prefix)) yield { ...info, versionId: info.versionId!, isLatest: true, deleteMarker: false };
  }

  private readOnly(): Promise<never> {
    return Promise.reject(new Error(`${this.location} is read-only: a restore point serves the recorded versions only`));
  }
  put(_key: string, _body: Buffer): Promise<PutResult> {
    return this.readOnly();
  }
  delete(_key: string): Promise<void> {
    return this.readOnly();
  }
  deleteMany(_keys: string[]): Promise<void> {
    return this.readOnly();
  }
  close(): void {
    this.inner.close();
  }
}
