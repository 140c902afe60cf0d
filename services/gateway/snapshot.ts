// Maintenance.Snapshot: a consistent copy of the database, streamed as etcd 3.4 streams it
// (v3rpc/maintenance.go): chunks of 32 KiB with remaining_bytes counting down, then one last
// message whose blob is the SHA-256 of everything sent, which `etcdctl snapshot save` stores
// at the end of the file and a restore verifies.
//
// The file is etcd's own format (a bbolt database in etcd 3.4's schema,
// shared/etcd-snapshot/write.ts), so `etcdctl snapshot status` and `snapshot restore` read it
// and an etcd started on the restored directory serves kvs's keys, history, leases and users.
// A worker thread (snapshot-thread.ts) writes it into the data directory's tmp/ from one read
// transaction (consistent, and the storage process's writes go on), then it is streamed from
// there, so a slow client holds a file open, not a read transaction.
import { createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import type { ServerCall, UnaryCallback } from '../../shared/grpc/http2-server.js';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { SNAPSHOT_CHUNK_BYTES } from '../../shared/snapshot.js';
import type { Logger } from '../../shared/log.js';
import type { ExportSummary } from '../../shared/etcd-snapshot/write.js';
import type { SnapshotJob, SnapshotReply } from './snapshot-thread.js';

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

const THREAD = new URL('./snapshot-thread.js', import.meta.url);
/** How much of the file is read at once (a multiple of SNAPSHOT_CHUNK_BYTES). */
const READ_BYTES = 32 * SNAPSHOT_CHUNK_BYTES;

/** Writes the etcd snapshot file of the database in `dataDir` to `file` on a worker thread. */
function exportSnapshot(job: SnapshotJob, cancelled: { on(fn: () => void): void }): Promise<ExportSummary & { bytes: number }> {
  return new Promise((resolve, reject) => {
    const w = new Worker(THREAD, { workerData: job });
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      fn();
    };
    cancelled.on(() => {
      settle(() => reject(new Error('cancelled')));
      void w.terminate();
    });
    w.once('message', (r: SnapshotReply) => settle(() => ('ok' in r ? resolve(r.ok) : reject(new Error(r.error)))));
    w.once('error', (err) => settle(() => reject(err)));
    w.once('exit', (code) => settle(() => reject(new Error(`the snapshot thread exited with code ${code}`))));
  });
}

export async function streamSnapshot(dataDir: string, call: Call, log: Logger): Promise<void> {
  let cancelled = false;
  const onCancel: (() => void)[] = [];
  call.on('cancelled', () => {
    cancelled = true;
    for (const fn of onCancel) fn();
  });
  const base = snapshotTempDir(dataDir);
  fs.mkdirSync(base, { recursive: true });
  const dir = fs.mkdtempSync(path.join(base, 'snapshot-'));
  const file = path.join(dir, 'db');
  const started = Date.now();
  try {
    const summary = await exportSnapshot({ dataDir, file }, { on: (fn) => onCancel.push(fn) });
    if (cancelled) return;
    const total = summary.bytes;
    log.info({ bytes: total, revision: summary.revision, compactRevision: summary.compactRevision, changes: summary.changes, ms: Date.now() - started }, 'sending database snapshot (etcd format)');
    const sha = createHash('sha256');
    let sent = 0;
    // Read in large pieces (one trip to the thread pool each), sent as etcd's 32 KiB messages.
    for await (const chunk of fs.createReadStream(file, { highWaterMark: READ_BYTES })) {
      const piece = chunk as Buffer;
      sha.update(piece);
      for (let at = 0; at < piece.length; at += SNAPSHOT_CHUNK_BYTES) {
        if (cancelled) return;
        const blob = piece.subarray(at, at + SNAPSHOT_CHUNK_BYTES);
        sent += blob.length;
        await writeMessage(call, { remainingBytes: total - sent, blob });
      }
    }
    if (cancelled) return;
    await writeMessage(call, { remainingBytes: 0, blob: sha.digest() });
    call.end();
    log.info({ bytes: total, ms: Date.now() - started }, 'sent database snapshot and its sha256');
  } catch (err) {
    if (cancelled) return;
    log.error({ err }, 'snapshot failed');
    if (!cancelled) call.emit('error', { code: grpc.status.INTERNAL, details: `kvs: snapshot failed: ${(err as Error).message}` });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
