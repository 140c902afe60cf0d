// A data directory with a long MVCC history, written straight through the apply path (no WAL,
// no server): for tests and measurements of compaction on stores of millions of revisions,
// which would take minutes to write through a client. A node started on it continues after
// the last revision (LMDB's applied index; the WAL is empty).
import { openMvcc } from '../shared/mvcc/schema.js';
import { encodeKeyValue } from '../shared/mvcc/keyvalue.js';
import { applyEntry } from '../services/storage/mvcc/apply.js';
import { MUTATION_PUT, type WalEntry } from '../shared/wal/entry.js';

/** The key of fixture key number `k`. */
export function fixtureKey(k: number): string {
  return `/registry/pods/ns-${k % 50}/pod-${String(k).padStart(6, '0')}`;
}

/**
 * Writes revisions 2..revisions+1 into `dataDir`, one put each, over `keys` keys in a
 * scattered order (key (rev * 7919) % keys), with `valueBytes`-byte values; 10,000 revisions
 * per LMDB transaction. Returns the last revision.
 */
export async function writeHistory(dataDir: string, revisions: number, keys: number, valueBytes = 128): Promise<number> {
  const db = openMvcc(dataDir, { readOnly: false, writemap: true });
  const value = Buffer.alloc(valueBytes, 'v');
  const versions = new Array<number>(keys).fill(0);
  const created = new Array<number>(keys).fill(0);
  const last = revisions + 1;
  for (let first = 2; first <= last; first += 10_000) {
    db.env.transactionSync(() => {
      for (let rev = first; rev <= Math.min(first + 9_999, last); rev++) {
        const k = (rev * 7919) % keys;
        if (!versions[k]) created[k] = rev;
        versions[k]++;
        const kv = encodeKeyValue({ key: Buffer.from(fixtureKey(k)), createRevision: created[k]!, modRevision: rev, version: versions[k]!, value, lease: 0n });
        const entry: WalEntry = { revision: rev, compactRevision: 0, mutations: [{ type: MUTATION_PUT, kv }] };
        applyEntry(db, entry, rev - 1);
      }
    });
  }
  await db.env.close();
  return last;
}
