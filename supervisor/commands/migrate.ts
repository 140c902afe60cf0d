// `kvs migrate --from ENDPOINTS --data-dir DIR`: a live cut-over from etcd. The first run
// takes a snapshot over etcd's Maintenance.Snapshot RPC and restores it into DIR (every
// revision etcd holds, leases, users and roles: snapshot-restore.ts); then, and on every later
// run on the same DIR, it follows etcd's watch and applies each change at etcd's own revision
// (services/storage/migrate/follow.ts) until SIGINT or SIGTERM. `kvs run` on DIR then serves
// etcd's data and history under the same revisions. When etcd has compacted away the revisions
// the directory would need (a long stop, or a watch etcd cancels as compacted), it starts again
// from a new snapshot.
import fs from 'node:fs';
import path from 'node:path';
import { EtcdClient, isUnavailable, type EtcdClientOptions } from '../../shared/etcd-client.js';
import { dbPath, META, openMvcc, readMeta } from '../../shared/mvcc/schema.js';
import { authMeta } from '../../shared/auth/tables.js';
import { CompactedError, follow } from '../../services/storage/migrate/follow.js';
import { claimDataDir, releaseDataDir } from '../../shared/data-dir-lock.js';
import { restoreSnapshot } from '../snapshot-restore.js';

export interface MigrateOptions extends EtcdClientOptions {
  dataDir: string;
  pollMs?: number;
  /** Where the lines for the operator go (stdout). */
  say: (line: string) => void;
  signal: AbortSignal;
}

/** The meta entry naming the etcd cluster a migrated database follows (until kvs serves it). */
export const MIGRATE_SOURCE = 'migrateSource';

interface Source {
  clusterId: string;
}

async function etcdClusterId(client: EtcdClient): Promise<string> {
  const s = await client.call('Maintenance', 'Status', {});
  return BigInt.asUintN(64, BigInt(String(s.header?.clusterId ?? 0))).toString(16);
}

/** Streams etcd's snapshot into `file` (the database, then its SHA-256, as etcdctl saves it). */
async function saveSnapshot(client: EtcdClient, file: string, signal: AbortSignal): Promise<number> {
  const md = await client.metadata();
  const call = client.client('Maintenance').snapshot({}, md);
  const out = fs.createWriteStream(file, { flags: 'wx' });
  let bytes = 0;
  const abort = () => call.cancel();
  signal.addEventListener('abort', abort, { once: true });
  try {
    await new Promise<void>((resolve, reject) => {
      call.on('data', (r: { blob?: Uint8Array }) => {
        if (!r.blob?.length) return;
        bytes += r.blob.length;
        if (!out.write(r.blob)) {
          call.pause();
          out.once('drain', () => call.resume());
        }
      });
      call.on('error', reject);
      out.on('error', reject);
      call.on('end', () => out.end(() => resolve()));
    });
  } finally {
    signal.removeEventListener('abort', abort);
    out.destroy();
  }
  const fd = fs.openSync(file, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  return bytes;
}

/**
 * A database in `dataDir` this migration may go on with: made by `kvs migrate` from the same
 * etcd cluster and not served by kvs since (its first start gives it an identity of its own).
 */
function checkResumable(dataDir: string, clusterId: string): number {
  const db = openMvcc(dataDir, { readOnly: false });
  try {
    const source = db.meta.get(MIGRATE_SOURCE) as Source | undefined;
    if (!source) throw new Error(`${dataDir} holds a database that kvs migrate did not make; migrate into a new data directory`);
    if (source.clusterId !== clusterId) {
      throw new Error(`${dataDir} follows etcd cluster ${source.clusterId}, and the endpoints given are cluster ${clusterId}; migrate into a new data directory`);
    }
    if (db.meta.get(META.memberId) !== undefined) {
      throw new Error(`kvs has served ${dataDir} since it was migrated, so its revisions are its own now; migrate into a new data directory`);
    }
    return readMeta(db, META.revision);
  } finally {
    void db.env.close();
  }
}

/** A fresh snapshot of etcd restored into `dataDir` (replacing what it held once complete). */
async function restoreFresh(client: EtcdClient, dataDir: string, clusterId: string, opts: MigrateOptions): Promise<number> {
  const work = path.join(dataDir, '.migrate');
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });
  try {
    const file = path.join(work, 'snapshot.db');
    const bytes = await saveSnapshot(client, file, opts.signal);
    if (opts.signal.aborted) throw new Error('stopped before the snapshot was complete; nothing was restored');
    const staged = path.join(work, 'restored');
    const r = await restoreSnapshot({ file, dataDir: staged });
    const db = openMvcc(staged, { readOnly: false });
    try {
      db.env.transactionSync(() => db.meta.putSync(MIGRATE_SOURCE, { clusterId } satisfies Source));
      await new Promise<void>((resolve, reject) =>
        (db.env as unknown as { sync(cb: (err?: Error) => void): void }).sync((err) => (err ? reject(err) : resolve())),
      );
    } finally {
      await db.env.close();
    }
    // Replaced as a whole: a crash in between leaves no database, and the next run starts over.
    fs.rmSync(dbPath(dataDir), { recursive: true, force: true });
    fs.renameSync(dbPath(staged), dbPath(dataDir));
    opts.say(`restored etcd's snapshot (${bytes} bytes) into ${dataDir}: revision ${r.revision}, ${r.keys} keys`);
    return r.revision;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

function authEnabledIn(dataDir: string): boolean {
  if (!fs.existsSync(path.join(dbPath(dataDir), 'data.mdb'))) return false;
  const db = openMvcc(dataDir, { readOnly: true });
  try {
    return authMeta(db).enabled;
  } finally {
    void db.env.close();
  }
}

export async function migrate(opts: MigrateOptions): Promise<{ revision: number; authEnabled: boolean }> {
  const dataDir = path.resolve(opts.dataDir);
  fs.mkdirSync(dataDir, { recursive: true });
  if (fs.existsSync(path.join(dataDir, 'wal')) && fs.readdirSync(path.join(dataDir, 'wal')).some((n) => n.endsWith('.wal'))) {
    throw new Error(`${dataDir} holds a kvs WAL: it is a node's data directory; migrate into a new one`);
  }
  await claimDataDir(dataDir);
  const client = new EtcdClient(opts);
  try {
    let clusterId: string | undefined;
    for (let i = 0; ; i++) {
      try {
        await client.connect();
        clusterId = await etcdClusterId(client);
        break;
      } catch (err) {
        if (!isUnavailable(err) && !/cannot reach etcd/.test((err as Error).message)) throw err;
        if (i + 1 >= opts.endpoints.length) throw err;
        client.failover();
      }
    }
    opts.say(`etcd cluster ${clusterId} at ${client.endpoint}`);
    let revision = fs.existsSync(path.join(dbPath(dataDir), 'data.mdb')) ? checkResumable(dataDir, clusterId) : await restoreFresh(client, dataDir, clusterId, opts);
    for (;;) {
      if (opts.signal.aborted) return { revision, authEnabled: authEnabledIn(dataDir) };
      opts.say(`following etcd from revision ${revision + 1}`);
      const db = openMvcc(dataDir, { readOnly: false });
      try {
        const p = await follow({ db, client, signal: opts.signal, say: opts.say, pollMs: opts.pollMs });
        return { revision: p.applied, authEnabled: authMeta(db).enabled };
      } catch (err) {
        if (!(err instanceof CompactedError)) throw err;
        opts.say(`${err.message}; taking a new snapshot`);
      } finally {
        await db.env.close();
      }
      revision = await restoreFresh(client, dataDir, clusterId, opts);
    }
  } finally {
    client.close();
    releaseDataDir(dataDir);
  }
}

