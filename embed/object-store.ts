// The object store of an embedded node: the archiver library (services/archiver/archiver.ts)
// in the caller's process, attached to open() (embed/open.ts). At open it restores the data
// directory from the object store (a node that lost its disk comes back whole), and the engine
// uploads its WAL through it (every batch before it is acknowledged with walSyncUpload, else
// each segment as it is sealed), as `kvs run`'s storage does through the archiver process;
// checkpoints every checkpointInterval. (fork() and unfork() are in branches.ts; opening the
// `objectStore` option's two forms in store-option.ts.)
import type { Logger } from '../shared/log.js';
import { normalizePrefix } from '../shared/objectstore/index.js';
import type { ObjectStore } from '../shared/objectstore/store.js';
import type { Archive } from '../shared/objectstore/archive.js';
import type { EngineOptions } from '../services/storage/engine.js';
import { archivedEngineOptions } from '../services/storage/wal-upload.js';
import { Archiver, type LeaderState } from '../services/archiver/archiver.js';
import { InProcessArchive } from '../services/archiver/in-process.js';
import type { BranchPoint as SourcePoint } from '../services/archiver/restore.js';
import type { Attachment } from './attachment.js';
import type { ResolvedOptions } from './check-options.js';
import type { ObjectStoreOption } from './options.js';
import { isLocation, openStore, prefixOf } from './store-option.js';

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
  /** The node's prefix, opened (a cluster member's peer agent takes the leader lock there), once prepared. */
  readonly store: ObjectStore | undefined;
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
    get store() {
      return store;
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
