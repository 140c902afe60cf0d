// Maintenance.Snapshot: a consistent copy of the database, streamed as etcd 3.4 streams it
// (v3rpc/maintenance.go): chunks of 32 KiB with remaining_bytes counting down, then one last
// message whose blob is the SHA-256 of everything sent, which `etcdctl snapshot save` stores
// at the end of the file and a restore verifies.
//
// The file is etcd's own format (a bbolt database in etcd 3.4's schema,
// shared/etcd-snapshot/write.ts), so `etcdctl snapshot status` and `snapshot restore` read it
// and an etcd started on the restored directory serves kvs's keys, history, leases and users.
// A worker thread (snapshot-thread.ts, started by the first call and kept between calls) writes
// it into the data directory's tmp/ from one read transaction (consistent, and the storage
// process's writes go on), front to back after a dry run that computes its layout (the first
// page names the last), and it is streamed from there while it is written: the stream starts
// after the dry run, and a slow client holds a file open, not a read transaction.
import { createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { ServerCall } from '../../shared/grpc/server.js';
import { frameSnapshotChunk, SnapshotFrames } from './snapshot-frames.js';
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

/**
 * One chunk as one message: framed once into a reused buffer on our gRPC server, serialized by
 * the call otherwise (the JSON gateway's calls write JSON).
 */
function writeChunk(call: Call, frames: SnapshotFrames, remainingBytes: number, blob: Buffer): Promise<void> {
  if (!(call instanceof ServerCall)) return writeMessage(call, { remainingBytes, blob });
  const frame = frames.take();
  const length = frameSnapshotChunk(frame, remainingBytes, blob);
  return new Promise((resolve) => {
    if (call.writeFramed(frame.subarray(0, length), () => frames.give(frame))) resolve();
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
  private stopped = false;

  constructor(private readonly dataDir: string) {}

  take(): Worker {
    const w = this.idle ?? this.start();
    this.idle = undefined;
    return w;
  }

  /** A thread whose job is done: kept for the next call, or stopped when one is kept already. */
  give(w: Worker): void {
    if (this.idle || this.stopped) void w.terminate();
    else this.idle = w;
  }

  /** The gateway closes: the waiting thread is stopped now, a busy one when its job ends. */
  stop(): Promise<unknown> {
    this.stopped = true;
    const w = this.idle;
    this.idle = undefined;
    return w ? w.terminate() : Promise.resolve();
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

function pool(dataDir: string): SnapshotThreads {
  let p = threads.get(dataDir);
  if (!p) threads.set(dataDir, (p = new SnapshotThreads(dataDir)));
  return p;
}

/**
 * Stops the snapshot threads of `dataDir` (the gateway closing, or an embedding program closing
 * its gateway): a gateway started again on it later gets threads of its own.
 */
export function stopSnapshotThreads(dataDir: string): Promise<unknown> {
  const p = threads.get(dataDir);
  threads.delete(dataDir);
  return p ? p.stop() : Promise.resolve();
}

/** A file being written by a snapshot thread: its size, then how much of it is written. */
class ExportInProgress {
  /** The file's size, once the thread has computed its layout. */
  size: number | undefined;
  written = 0;
  summary: (ExportSummary & { bytes: number }) | undefined;
  /** When the thread had written the whole file (Date.now()). */
  doneAt = 0;
  error: Error | undefined;
  private wake: (() => void) | undefined;

  update(fn: () => void): void {
    fn();
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** Resolves once `ready()` holds; rejects with the thread's error. */
  async until(ready: () => boolean): Promise<void> {
    for (;;) {
      if (this.error) throw this.error;
      if (ready()) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}

/** Writes the etcd snapshot file of the database in `dataDir` on a worker thread. */
function exportSnapshot(dataDir: string, job: SnapshotJob, cancelled: { on(fn: () => void): void }): ExportInProgress {
  const threads = pool(dataDir);
  const w = threads.take();
  const progress = new ExportInProgress();
  let settled = false;
  const settle = (fn: () => void, reusable: boolean) => {
    if (settled) return;
    settled = true;
    w.off('message', onMessage);
    w.off('error', onError);
    w.off('exit', onExit);
    if (reusable) threads.give(w);
    else void w.terminate();
    progress.update(fn);
  };
  const onMessage = (r: SnapshotReply) => {
    if ('size' in r) progress.update(() => (progress.size = r.size));
    else if ('written' in r) progress.update(() => (progress.written = r.written));
    else if ('ok' in r) settle(() => ((progress.summary = r.ok), (progress.doneAt = Date.now())), true);
    else settle(() => (progress.error = new Error(r.error)), true);
  };
  const onError = (err: Error) => settle(() => (progress.error = err), false);
  const onExit = (code: number) => settle(() => (progress.error = new Error(`the snapshot thread exited with code ${code}`)), false);
  w.on('message', onMessage);
  w.on('error', onError);
  w.on('exit', onExit);
  cancelled.on(() => settle(() => (progress.error = new Error('cancelled')), false));
  w.postMessage(job satisfies SnapshotJob);
  return progress;
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
  let fd: fs.promises.FileHandle | undefined;
  try {
    const exp = exportSnapshot(dataDir, { file }, { on: (fn) => onCancel.push(fn) });
    await exp.until(() => exp.size !== undefined);
    const total = exp.size!;
    const layoutMs = Date.now() - started;
    log.info({ bytes: total, ms: layoutMs }, 'sending database snapshot (etcd format) as it is written');
    fd = await fs.promises.open(file, 'r');
    const sha = createHash('sha256');
    let sent = 0;
    // Read in large pieces (one trip to the thread pool each), sent as etcd's 32 KiB messages.
    // One buffer for every piece: each message is copied out of it into its frame
    // (snapshot-frames.ts), so nothing holds the last piece when the next is read.
    const buffer = Buffer.allocUnsafe(READ_BYTES);
    const frames = new SnapshotFrames();
    while (sent < total) {
      await exp.until(() => exp.written > sent);
      if (cancelled) return;
      const piece = buffer.subarray(0, Math.min(READ_BYTES, exp.written - sent));
      const { bytesRead } = await fd.read(piece, 0, piece.length, sent);
      if (bytesRead !== piece.length) throw new Error(`the snapshot file ended at ${sent + bytesRead} of ${total} bytes`);
      sha.update(piece);
      for (let at = 0; at < piece.length; at += SNAPSHOT_CHUNK_BYTES) {
        if (cancelled) return;
        const blob = piece.subarray(at, at + SNAPSHOT_CHUNK_BYTES);
        sent += blob.length;
        await writeChunk(call, frames, total - sent, blob);
      }
    }
    // The thread's last word: the file it wrote has the layout it announced.
    await exp.until(() => exp.summary !== undefined);
    if (cancelled) return;
    await writeMessage(call, { remainingBytes: 0, blob: sha.digest() });
    call.end();
    const summary = exp.summary!;
    // layoutMs: until the stream started; writtenMs: until the file was written; ms: until sent.
    const times = { layoutMs, writtenMs: exp.doneAt - started, ms: Date.now() - started };
    log.info({ bytes: total, revision: summary.revision, compactRevision: summary.compactRevision, changes: summary.changes, ...times }, 'sent database snapshot and its sha256');
  } catch (err) {
    if (cancelled) return;
    log.error({ err }, 'snapshot failed');
    if (!cancelled) call.emit('error', { code: grpc.status.INTERNAL, details: `kvs: snapshot failed: ${(err as Error).message}` });
  } finally {
    await fd?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
