// Maintenance.Snapshot: a consistent copy of the database, streamed as etcd 3.4 streams it
// (v3rpc/maintenance.go): chunks of 32 KiB with remaining_bytes counting down, then one last
// message whose blob is the SHA-256 of everything sent, which `etcdctl snapshot save` stores
// at the end of the file and a restore verifies.
//
// The copy is LMDB's compacting copy (mdb_env_copy2 with MDB_CP_COMPACT) taken from this
// process's read-only environment: it reads one read transaction, so it is consistent, it
// does not block the storage process's writes, and it leaves free pages out.
import { createHash } from 'node:crypto';
import type { ServerCall, UnaryCallback } from '../../shared/grpc/server.js';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { SNAPSHOT_CHUNK_BYTES } from '../../shared/snapshot.js';
import type { Logger } from '../../shared/log.js';

/** Where copies are made: inside the data directory (same disk as the database). */
export function snapshotTempDir(dataDir: string): string {
  return path.join(dataDir, 'tmp');
}

/** Removes copies left behind by a gateway that died while streaming. */
export function removeStaleSnapshots(dataDir: string): void {
  const dir = snapshotTempDir(dataDir);
  let names: string[] = [];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return;
  }
  for (const n of names) if (n.startsWith('snapshot-')) fs.rmSync(path.join(dir, n), { recursive: true, force: true });
}

interface SnapshotMessage { remainingBytes: number; blob: Buffer }
type Call = ServerCall<unknown, SnapshotMessage>;

function writeMessage(call: Call, msg: SnapshotMessage): Promise<void> {
  return new Promise((resolve) => {
    if (call.write(msg)) resolve();
    else call.once('drain', resolve);
  });
}

export async function streamSnapshot(db: MvccDb, dataDir: string, call: Call, log: Logger): Promise<void> {
  let cancelled = false;
  call.on('cancelled', () => (cancelled = true));
  const base = snapshotTempDir(dataDir);
  fs.mkdirSync(base, { recursive: true });
  const dir = fs.mkdtempSync(path.join(base, 'snapshot-'));
  const file = path.join(dir, 'data.mdb');
  const started = Date.now();
  try {
    await db.env.backup(dir, true);
    const total = fs.statSync(file).size;
    log.info({ bytes: total }, 'sending database snapshot');
    const sha = createHash('sha256');
    let sent = 0;
    for await (const chunk of fs.createReadStream(file, { highWaterMark: SNAPSHOT_CHUNK_BYTES })) {
      if (cancelled) return;
      const blob = chunk as Buffer;
      sent += blob.length;
      sha.update(blob);
      await writeMessage(call, { remainingBytes: total - sent, blob });
    }
    if (cancelled) return;
    await writeMessage(call, { remainingBytes: 0, blob: sha.digest() });
    call.end();
    log.info({ bytes: total, ms: Date.now() - started }, 'sent database snapshot and its sha256');
  } catch (err) {
    log.error({ err }, 'snapshot failed');
    if (!cancelled) call.emit('error', { code: grpc.status.INTERNAL, details: `kvs: snapshot failed: ${(err as Error).message}` });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
