// The thread behind hash-worker.ts: its own read-only handle on the database, one job at a
// time, each in a fresh read snapshot. Errors travel as etcd's code and message.
import { parentPort, workerData } from 'node:worker_threads';
import { openMvcc, META, readMeta } from '../../shared/mvcc/schema.js';
import { hashAll, hashKV } from '../../shared/mvcc/hash.js';
import { EtcdError } from '../../shared/errors.js';
import type { HashJob, HashReply } from './hash-worker.js';

const db = openMvcc((workerData as { dataDir: string }).dataDir, { readOnly: true });

parentPort!.on('message', (job: HashJob) => {
  let reply: HashReply;
  try {
    db.env.resetReadTxn();
    if (job.kind === 'hash') {
      const revision = readMeta(db, META.revision);
      reply = { id: job.id, ok: { hash: hashAll(db), revision, compactRevision: 0 } };
    } else {
      reply = { id: job.id, ok: hashKV(db, job.revision) };
    }
  } catch (err) {
    const e = err as Error;
    reply = { id: job.id, error: { code: err instanceof EtcdError ? err.code : 13, message: e.message } };
  }
  parentPort!.postMessage(reply);
});
