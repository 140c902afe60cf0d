// The etcd snapshot export (shared/etcd-snapshot/write.ts) while a compaction's physical
// removal runs in steps: the file is the same, byte for byte, as that of a store whose removal
// finished at once, after every write and every step. (etcd restored from it must not see the
// versions the removal has yet to delete.) The same for the export streamed front to back with
// its layout cache kept from one export to the next (its dry run goes on from the last one's).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compactionPending } from '../../../shared/mvcc/history.js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { writeBoltFile } from '../../../shared/bbolt/write.js';
import { etcdBuckets, SnapshotLayoutCache, writeEtcdSnapshot, type ExportSummary } from '../../../shared/etcd-snapshot/write.js';
import { prng } from '../../../testkit/prng.js';
import { randomWrite, tempMvccDb } from '../../../testkit/mvcc-fixtures.js';
import { Executor } from './execute.js';
import { compactStep, finishCompaction } from './compaction.js';

const id = { clusterId: '1', memberId: '2', raftTerm: 1 };

/** Every bucket's entries (hex), and the file. */
function exported(db: MvccDb): { entries: Record<string, string[]>; file: Buffer; summary: ExportSummary } {
  db.env.resetReadTxn();
  const summary: ExportSummary = { revision: 0, compactRevision: 0, changes: 0 };
  const entries: Record<string, string[]> = {};
  for (const bucket of etcdBuckets(db, summary)) {
    const list: string[] = (entries[bucket.name.toString()] = []);
    const add = (k: Uint8Array, v: Uint8Array, n = v.length) => list.push(`${Buffer.from(k).toString('hex')}=${Buffer.from(v.buffer, v.byteOffset, n).toString('hex')}`);
    if (typeof bucket.entries === 'function') bucket.entries(add);
    else for (const [k, v] of bucket.entries) add(k, v);
  }
  db.env.resetReadTxn();
  return { entries, file: writeBoltFile(etcdBuckets(db, { revision: 0, compactRevision: 0, changes: 0 })), summary };
}

/** The file as the snapshot thread writes it (front to back, after a dry run), with `cache`. */
function streamed(db: MvccDb, cache: SnapshotLayoutCache): Buffer {
  db.env.resetReadTxn();
  let file = Buffer.alloc(0);
  let next = 0;
  writeEtcdSnapshot(db, (offset, bytes) => {
    assert.equal(offset, next, 'pieces come in file order');
    bytes.copy(file, offset);
    next += bytes.length;
  }, (size) => (file = Buffer.alloc(size)), cache);
  assert.equal(next, file.length, 'the whole file');
  db.env.resetReadTxn();
  return file;
}

test('the export during a stepped compaction equals the export after an immediate one', (t) => {
  const eager = tempMvccDb(t, 'kvs-export-eager-');
  const stepped = tempMvccDb(t, 'kvs-export-stepped-');
  const exE = new Executor(eager, id);
  const exS = new Executor(stepped, id);
  const rnd = prng(17);
  const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
  let sawPending = 0;
  let compactions = 0;
  const cache = new SnapshotLayoutCache();
  let reused = 0;
  for (let i = 0; i < 300; i++) {
    const write = randomWrite(rnd, keys, i, exE, true);
    if (!write) continue;
    const { op } = write;
    if (write.compaction) compactions++;
    eager.env.transactionSync(() => {
      op(exE);
      finishCompaction(eager);
    });
    stepped.env.transactionSync(() => op(exS));
    if (rnd() < 0.4) stepped.env.transactionSync(() => compactStep(stepped, 1 + Math.floor(rnd() * 3)));
    if (compactionPending(stepped)) sawPending++;
    const [s, e] = [exported(stepped), exported(eager)];
    assert.deepEqual(s.entries, e.entries, `after op ${i}`);
    assert.deepEqual(s.summary, e.summary, `after op ${i}`);
    assert.ok(s.file.equals(e.file), `after op ${i}: the files differ`);
    assert.ok(streamed(stepped, cache).equals(s.file), `after op ${i}: the file streamed with the layout cache differs`);
    if (cache.lastReused) reused++;
  }
  assert.ok(reused > 10, `the dry run went on from the last export's many times (${reused})`);
  assert.ok(compactions > 10 && sawPending > 50, `the removal was pending during many exports (${sawPending}, ${compactions} compactions)`);
});
