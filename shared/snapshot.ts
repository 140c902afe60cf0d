// The snapshot file format, as etcd 3.4's Maintenance.Snapshot streams it and `etcdctl
// snapshot save` stores it: the database file, then its SHA-256 (32 bytes). etcd tells the two
// apart by size: a file whose size modulo 512 is 32 has the checksum appended (database files
// are whole pages). kvs's database file is a compacted copy of its LMDB environment.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { Worker } from 'node:worker_threads';

/** etcd's snapshotSendBufferSize: each SnapshotResponse carries up to this many bytes. */
export const SNAPSHOT_CHUNK_BYTES = 32 * 1024;
export const SHA256_BYTES = 32;

/** etcd's test (snapshot/v3_snapshot.go): does a snapshot file of this size end in a SHA-256? */
export function hasChecksum(size: number): boolean {
  return size % 512 === SHA256_BYTES;
}

/** SHA-256 of the first `length` bytes of a file, read in chunks. */
export async function sha256OfFile(file: string, length: number): Promise<Buffer> {
  const h = createHash('sha256');
  if (length > 0) {
    for await (const chunk of fs.createReadStream(file, { start: 0, end: length - 1, highWaterMark: 1 << 20 })) h.update(chunk as Buffer);
  }
  return h.digest();
}

// The same, on a worker thread: a restore that reads the file anyway hashes it on the other core.
const HASH_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const h = require('node:crypto').createHash('sha256');
const fd = fs.openSync(workerData.file, 'r');
const buf = Buffer.allocUnsafe(1 << 20);
for (let at = 0; at < workerData.length; ) {
  const n = fs.readSync(fd, buf, 0, Math.min(buf.length, workerData.length - at), at);
  if (n === 0) throw new Error(workerData.file + ' ended at ' + at + ' bytes while being hashed');
  h.update(buf.subarray(0, n));
  at += n;
}
fs.closeSync(fd);
parentPort.postMessage(h.digest());
`;

/** sha256OfFile on a worker thread. */
export function sha256OfFileInWorker(file: string, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const w = new Worker(HASH_WORKER, { eval: true, workerData: { file, length } });
    w.once('message', (digest: Uint8Array) => resolve(Buffer.from(digest)));
    w.once('error', reject);
    w.once('exit', (code) => reject(new Error(`the hashing thread exited (${code}) before hashing ${file}`)));
  });
}
