// Maintenance.Snapshot: a consistent copy of the database, streamed as etcd 3.4 streams it
// (v3rpc/maintenance.go): chunks of 32 KiB with remaining_bytes counting down, then one last
// message whose blob is the SHA-256 of everything sent, which `etcdctl snapshot save` stores
// at the end of the file and a restore verifies.
//
// The file is etcd's own format (a bbolt database in etcd 3.4's schema,
// shared/etcd-snapshot/write.ts), so `etcdctl snapshot status` and `snapshot restore` read it
// and an etcd started on the restored directory serves kvs's keys, history, leases and users.
// A worker thread (snapshot-thread.ts, kept between calls) writes it into the data
// directory's tmp/ from one read transaction (consistent, and the storage process's writes go
// on), then it is streamed from there, so a slow client holds a file open, not a read
// transaction.
import { createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import type { ServerCall, UnaryCallback } from '../../shared/grpc/server.js';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { SNAPSHOT_CHUNK_BYTES } from '../../shared/snapshot.js';
import type { Logger } from '../../shared/log.js';
import type { ExportSummary } from '../../shared/etcd-snapshot/write.js';
import type { SnapshotJob, SnapshotReply, SnapshotThreadData } from './snapshot-thread.js';

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

/**
 * The snapshot threads of one data directory. A thread that wrote its file waits for the next
 * call (loading its code and opening the database take a few hundred milliseconds, more than
 * writing a small snapshot); calls at the same time get threads of their own, of which one is
 * kept; a cancelled call's thread is stopped (its pass cannot be interrupted otherwise).
 */
class SnapshotThreads {
  private idle: Worker | undefined;

  constructor(private readonly dataDir: string) {}

  take(): Worker {
    const w = this.idle ?? this.start();
    this.idle = undefined;
    return w;
  }

  /** A thread whose job is done: kept for the next call, or stopped when one is kept already. */
  give(w: Worker): void {
    if (this.idle) void w.terminate();
    else this.idle = w;
  }

  private start(): Worker {
    const w = new Worker(THREAD, { workerData: { dataDir: this.dataDir } satisfies SnapshotThreadData });
    w.unref();
    const gone = () => {
      if (this.idle === w) this.idle = undefined;
    };
    w.on('error', gone);
    w.on('exit', gone);
    return w;
  }
}

const threads = new Map<string, SnapshotThreads>();

/** Writes the etcd snapshot file of the database in `dataDir` on a worker thread. */
function exportSnapshot(dataDir: string, job: SnapshotJob, cancelled: { on(fn: () => void): void }): Promise<ExportSummary & { bytes: number }> {
  let pool = threads.get(dataDir);
  if (!pool) threads.set(dataDir, (pool = new SnapshotThreads(dataDir)));
  const w = pool.take();
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (fn: () => void, reusable: boolean) => {
      if (settled) return;
      settled = true;
      w.off('message', onMessage);
      w.off('error', onError);
      w.off('exit', onExit);
      if (reusable) pool!.give(w);
      else void w.terminate();
      fn();
    };
    const onMessage = (r: SnapshotReply) => settle(() => ('ok' in r ? resolve(r.ok) : reject(new Error(r.error))), true);
    const onError = (err: Error) => settle(() => reject(err), false);
    const onExit = (code: number) => settle(() => reject(new Error(`the snapshot thread exited with code ${code}`)), false);
    w.on('message', onMessage);
    w.on('error', onError);
    w.on('exit', onExit);
    cancelled.on(() => settle(() => reject(new Error('cancelled')), false));
    w.postMessage(job satisfies SnapshotJob);
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
    const summary = await exportSnapshot(dataDir, { file }, { on: (fn) => onCancel.push(fn) });
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
