// The thread behind snapshot.ts: opens the database read-only, reads it in one read snapshot
// (one synchronous pass: lmdb-js renews a read transaction only between event-loop turns) and
// writes it as etcd's bbolt file to the path it was given. The main thread streams the file.
import fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { openMvcc } from '../../shared/mvcc/schema.js';
import { BoltWriter } from '../../shared/bbolt/write.js';
import { etcdBuckets, type ExportSummary } from '../../shared/etcd-snapshot/write.js';

export interface SnapshotJob {
  dataDir: string;
  file: string;
}

export type SnapshotReply = { ok: ExportSummary & { bytes: number } } | { error: string };

function exportTo(job: SnapshotJob): ExportSummary & { bytes: number } {
  const db = openMvcc(job.dataDir, { readOnly: true });
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
    void db.env.close();
  }
}

let reply: SnapshotReply;
try {
  reply = { ok: exportTo(workerData as SnapshotJob) };
} catch (err) {
  reply = { error: (err as Error).message };
}
parentPort!.postMessage(reply);
