// The thread behind snapshot.ts: it opens the database read-only and then, one job at a time,
// reads it in one read snapshot (one synchronous pass: lmdb-js renews a read transaction only
// between event-loop turns) and writes it as etcd's bbolt file to the path it was given, front
// to back after a dry run for the layout (which goes on from the last job's), telling the main
// thread the file's size first and then how much of it is written, so that the main thread
// streams the file while it is written. It is kept for the next call, and started with the
// gateway: loading this code and opening the database take longer than writing a small
// snapshot.
import fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { openMvcc, type MvccDb } from '../../shared/mvcc/schema.js';
import { SnapshotLayoutCache, writeEtcdSnapshot, type ExportSummary } from '../../shared/etcd-snapshot/write.js';

export interface SnapshotThreadData {
  dataDir: string;
}

export interface SnapshotJob {
  /** Where to write the file (a new file in the data directory's tmp/). */
  file: string;
}

/**
 * What the thread says of a job, in this order: the file's size (before its first byte is
 * written), how many bytes from the start are written (growing, up to the size), then the end.
 */
export type SnapshotReply =
  | { size: number }
  | { written: number }
  | { ok: ExportSummary & { bytes: number } }
  | { error: string };

const post = (r: SnapshotReply) => parentPort!.postMessage(r);
/** The last job's layout, which the next job's dry run goes on from (history only grows). */
const layouts = new SnapshotLayoutCache();

function exportTo(db: MvccDb, job: SnapshotJob): ExportSummary & { bytes: number } {
  const fd = fs.openSync(job.file, 'w', 0o600);
  try {
    let written = 0;
    db.env.resetReadTxn();
    return writeEtcdSnapshot(db, (at, bytes) => {
      // Pieces come in file order: the file is written up to the end of each.
      let done = 0;
      while (done < bytes.length) done += fs.writeSync(fd, bytes, done, bytes.length - done, at + done);
      written = Math.max(written, at + bytes.length);
      post({ written });
    }, (size) => post({ size }), layouts);
  } finally {
    fs.closeSync(fd);
  }
}

const dataDir = (workerData as SnapshotThreadData).dataDir;
let db: MvccDb | undefined;
let openError: Error | undefined;

/** Opens the database (again, after an error: a thread started early may have run before it existed). */
function open(): MvccDb | undefined {
  try {
    db = openMvcc(dataDir, { readOnly: true });
    openError = undefined;
    // Opening read the layout version: no read snapshot is held while the thread waits (it would
    // keep the writer from reusing pages freed after it).
    db.env.resetReadTxn();
  } catch (err) {
    // Reported with the next job, as that call's error.
    openError = err as Error;
  }
  return db;
}
open();

parentPort!.on('message', (job: SnapshotJob) => {
  let reply: SnapshotReply;
  try {
    const opened = db ?? open();
    if (!opened) throw openError ?? new Error('the database is not open');
    reply = { ok: exportTo(opened, job) };
  } catch (err) {
    reply = { error: (err as Error).message };
  }
  // No read snapshot is held between jobs.
  db?.env.resetReadTxn();
  post(reply);
});
