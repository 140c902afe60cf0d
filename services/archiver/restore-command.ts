// `kvs restore`: object store -> a new data directory, without starting a node. The same
// restore a node does at boot (restoreDataDir), into an empty directory.
import type { Config } from '../../shared/config.js';
import { createLogger } from '../../shared/log.js';
import { openObjectStore, objectStoreOptions } from '../../shared/objectstore/index.js';
import { dataEntries } from './local-manifest.js';
import { restoreDataDir, type BranchPoint } from './restore.js';
import { RestorePointStore, readRestorePointFile } from '../../shared/objectstore/restore-point.js';

export async function restoreCommand(cfg: Config, opts: { restorePoint?: string } = {}): Promise<string> {
  const log = createLogger('restore', cfg.logLevel === 'info' ? 'warn' : cfg.logLevel, cfg.logFormat);
  const existing = dataEntries(cfg.dataDir);
  if (existing.length) {
    throw new Error(`data directory ${cfg.dataDir} is not empty (${existing.join(', ')}): kvs restore fills a new or empty directory`);
  }
  const options = { ...objectStoreOptions(cfg), log };
  let store = await openObjectStore(options);
  // Point-in-time: the same restore, over the versions the restore point recorded.
  if (opts.restorePoint) store = new RestorePointStore(store, await readRestorePointFile(opts.restorePoint));
  const openPrefix = (prefix: string) => openObjectStore({ ...options, prefix });
  let branch: BranchPoint | undefined;
  try {
    if (cfg.branchPrefix !== undefined && cfg.branchCheckpoint) {
      branch = { sourcePrefix: cfg.branchPrefix, source: await openPrefix(cfg.branchPrefix), checkpoint: cfg.branchCheckpoint };
    }
    const r = await restoreDataDir(store, cfg.dataDir, { log, bucket: options.bucket, prefix: options.prefix, branch, openPrefix });
    if (!r.restored && !r.walRecords) throw new Error(`${store.location} holds no checkpoint and no WAL: nothing to restore`);
    const what = [r.restored ? `checkpoint ${r.restored}` : 'no checkpoint', `${r.walRecords} uploaded WAL records`].join(' and ');
    return `restored ${what} from ${store.location} into ${cfg.dataDir}\n`;
  } finally {
    store.close();
    branch?.source.close();
  }
}
