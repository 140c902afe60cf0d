// The object store of an embedded node: the archiver library (services/archiver/archiver.ts)
// in the caller's process, attached to open() (embed/open.ts). At open it restores the data
// directory from the object store (a node that lost its disk comes back whole), and the engine
// uploads its WAL through it (every batch before it is acknowledged with walSyncUpload, else
// each segment as it is sealed), as `kvs run`'s storage does through the archiver process;
// checkpoints every checkpointInterval. Also fork() and unfork(), as `kvs branch fork|unfork`.
//
// `objectStore` is a location like the CLI's flags (bucket, prefix, endpoint, credentials), or
// an object implementing kvs's ObjectStore interface (shared/objectstore/store.ts) that the
// program keeps owning: it gets the encryption layer (with encryptionKey) or the plaintext guard
// like any store kvs opens, and is not closed by the node.
import { DEFAULT_S3_ENDPOINT } from '../shared/config.js';
import type { Logger } from '../shared/log.js';
import { bodyLayer, normalizePrefix, openObjectStore } from '../shared/objectstore/index.js';
import type { ObjectStore } from '../shared/objectstore/store.js';
import type { Archive } from '../shared/objectstore/archive.js';
import { forkBranch, unforkBranch, type BranchArgNames } from '../shared/objectstore/branches.js';
import type { EngineOptions } from '../services/storage/engine.js';
import { archivedEngineOptions } from '../services/storage/wal-upload.js';
import { Archiver, type LeaderState } from '../services/archiver/archiver.js';
import { InProcessArchive } from '../services/archiver/in-process.js';
import type { BranchPoint as SourcePoint } from '../services/archiver/restore.js';
import type { Attachment } from './attachment.js';
import type { ResolvedOptions } from './check-options.js';
import type { ObjectStoreLocation, ObjectStoreOption } from './options.js';

/** Whether `o` is a location (bucket, prefix, ...) rather than an ObjectStore object. */
function isLocation(o: ObjectStoreOption): o is ObjectStoreLocation {
  return typeof (o as ObjectStore).get !== 'function';
}

/** The name a store goes by in the local manifest and in a branch's manifests: its prefix, or an object's location. */
function prefixOf(o: ObjectStoreOption): string {
  return isLocation(o) ? normalizePrefix(o.prefix) : o.location;
}

/** Named in the messages of an encrypted prefix opened without its key (and the other way round). */
const KEY_OPTION = 'the encryptionKey option';

/** Opens a store option: a location as `kvs run` opens its flags, an object wrapped (not owned). */
async function openStore(o: ObjectStoreOption, encryptionKey: Uint8Array | undefined, log?: Logger, prefix?: string): Promise<ObjectStore> {
  const key = encryptionKey ? Buffer.from(encryptionKey) : undefined;
  if (!isLocation(o)) return bodyLayer(o, key, { borrowed: true, keyOption: KEY_OPTION });
  if (typeof o.bucket !== 'string' || o.bucket === '') {
    throw new TypeError('kvs: an object-store location needs bucket (and optionally prefix, endpoint, credentials), or pass an ObjectStore object');
  }
  return openObjectStore({
    endpoint: o.endpoint ?? DEFAULT_S3_ENDPOINT,
    bucket: o.bucket,
    prefix: prefix ?? o.prefix ?? '',
    credentials: o.credentials,
    region: o.region,
    encryptionKey: key,
    keyOption: KEY_OPTION,
    log,
    // The archiver's uploads are awaited one at a time: small puts to a local directory skip
    // the thread pool, as in the archiver process.
    syncSmallPuts: true,
  });
}

/**
 * Another prefix a branch's checkpoints name (where its shared pieces live): the branch point's
 * source or the ancestor store when the name is theirs, else that prefix of the node's own
 * bucket (as `kvs run` opens --branch-prefix).
 */
function prefixOpener(options: ResolvedOptions, log: Logger): (prefix: string) => Promise<ObjectStore> {
  const named = [options.branchPoint?.sourceStore, options.ancestorStore].filter((o): o is ObjectStoreOption => o !== undefined);
  return async (prefix) => {
    const known = named.find((o) => prefixOf(o) === prefix);
    if (known) return openStore(known, options.encryptionKey, log);
    if (isLocation(options.objectStore!)) return openStore(options.objectStore!, options.encryptionKey, log, prefix);
    throw new Error(`this node's checkpoints share pieces with "${prefix}", which it cannot open: pass that store as ancestorStore`);
  };
}

/** The object store's attachment; a cluster member (embed/cluster.ts) uploads through `archive` as a leader. */
export interface ObjectStoreAttachment extends Attachment {
  /** Storage's side of the archiver, once prepared. */
  readonly archive: Archive | undefined;
}

/**
 * What open() attaches for `objectStore` (see embed/open.ts). A single node gets the engine
 * options of `kvs run`'s storage with an object store (archivedEngineOptions); a cluster member
 * passes its role (checkpoints on the leader only, under its term) and makes its own engine
 * options over `archive`, as storage's cluster mode does.
 */
export function objectStoreAttachment(cluster?: { role: LeaderState }): ObjectStoreAttachment {
  let store: ObjectStore | undefined;
  let source: ObjectStore | undefined;
  let archiver: Archiver | undefined;
  let archive: InProcessArchive | undefined;
  return {
    get archive() {
      return archive;
    },
    async prepare({ options, log }): Promise<EngineOptions> {
      try {
        const o = options.objectStore!;
        store = await openStore(o, options.encryptionKey, log);
        let branch: SourcePoint | undefined;
        if (options.branchPoint) {
          const { sourceStore, checkpointKey } = options.branchPoint;
          if (typeof checkpointKey !== 'string' || checkpointKey === '') {
            throw new TypeError('kvs open(): branchPoint.checkpointKey is required: the checkpoint key fork() returned');
          }
          source = await openStore(sourceStore, options.encryptionKey, log);
          branch = { sourcePrefix: prefixOf(sourceStore), source, checkpoint: checkpointKey };
        }
        archiver = await Archiver.open({
          dataDir: options.dataDir,
          log,
          store,
          // A location is recorded as `kvs run` records its flags, so either may open the directory.
          bucket: isLocation(o) ? o.bucket : o.location,
          prefix: isLocation(o) ? normalizePrefix(o.prefix) : '',
          openPrefix: prefixOpener(options, log),
          branch,
          checkpointIntervalMs: options.checkpointIntervalMs,
          role: cluster?.role,
        });
        archive = new InProcessArchive(archiver);
        return cluster ? {} : await archivedEngineOptions(archive, options, log);
      } catch (err) {
        await this.stop!();
        throw err;
      }
    },
    async start(host) {
      // Checkpoints copy the database through the engine's own environment.
      archiver!.databaseOpened(host.engine.db.env);
    },
    async stop() {
      // Waiting uploads fail first (their writes' outcome is unknown; they are in the WAL and
      // uploaded at the next open), as `kvs run`'s storage does when it stops.
      archive?.close();
      await archiver?.close();
      store?.close();
      source?.close();
      [archive, archiver, store, source] = [undefined, undefined, undefined, undefined];
    },
  };
}

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
