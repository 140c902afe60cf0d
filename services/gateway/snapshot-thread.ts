// The thread behind snapshot.ts: it opens the database read-only and then, one job at a time,
// reads it in one read snapshot (one synchronous pass: lmdb-js renews a read transaction only
// between event-loop turns) and writes it as etcd's bbolt file to the path it was given. The
// main thread streams the file. It is kept for the next call: loading this code and opening
// the database take longer than writing a small snapshot.
import fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { openMvcc, type MvccDb } from '../../shared/mvcc/schema.js';
import { BoltWriter } from '../../shared/bbolt/write.js';
import { etcdBuckets, type ExportSummary } from '../../shared/etcd-snapshot/write.js';

export interface SnapshotThreadData {
  dataDir: string;
}

export interface SnapshotJob {
  /** Where to write the file (a new file in the data directory's tmp/). */
  file: string;
}

export type SnapshotReply = { ok: ExportSummary & { bytes: number } } | { error: string };

function exportTo(db: MvccDb, job: SnapshotJob): ExportSummary & { bytes: number } {
  const fd = fs.openSync(job.file, 'w', 0o600);
  try {
    const writer = new BoltWriter((pgid, bytes) => {
      let done = 0;
      while (done < bytes.length) done += fs.writeSync(fd, bytes, done, bytes.length - done, pgid * writer.pageSize + done);
    });
    db.env.resetReadTxn();
    const summary: ExportSummary = { revision: 0, compactRevision: 0, changes: 0 };
    for (const b of etcdBuckets(db, summary)) writer.bucket(b.name, b.entries);
    const { bytes } = writer.finish();
    return { ...summary, bytes };
  } finally {
    fs.closeSync(fd);
  }
}

let db: MvccDb | undefined;
let openError: Error | undefined;
try {
  db = openMvcc((workerData as SnapshotThreadData).dataDir, { readOnly: true });
  // Opening read the layout version: no read snapshot is held while the thread waits (it would
  // keep the writer from reusing pages freed after it).
  db.env.resetReadTxn();
} catch (err) {
  // Reported with the job, as that call's error.
  openError = err as Error;
}

parentPort!.on('message', (job: SnapshotJob) => {
  let reply: SnapshotReply;
  try {
    if (!db) throw openError ?? new Error('the database is not open');
    reply = { ok: exportTo(db, job) };
  } catch (err) {
    reply = { error: (err as Error).message };
  }
  // No read snapshot is held between jobs.
  db?.env.resetReadTxn();
  parentPort!.postMessage(reply);
});
