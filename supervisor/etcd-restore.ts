// `kvs snapshot restore` of an etcd snapshot: fills a new kvs database (in the staging
// directory snapshot-restore.ts renames into place) from etcd's backend, so that a node
// started on it serves what etcd served: every stored change of every key with its revisions
// and version (the history above the compaction, and below it each key's version live at the
// compaction), the compact revision, leases with their keys, users, roles and the auth flag.
// Like etcd's own restore the result is a new member (new ids, fresh WAL), and every lease
// starts its full TTL again when the node starts.
//
// The tables are written with kvs's own encoders (shared/mvcc, shared/auth), as
// services/storage's apply code would leave them, but in bulk: history in revision order
// (appended), key-index entries as they come, and the derived tables (deleted keys, lease
// keys) once at the end from what the walk saw.
import fs from 'node:fs';
import { fileSource } from '../shared/bbolt/read.js';
import { EtcdSnapshot, type EtcdChange } from '../shared/etcd-snapshot/read.js';
import { MAX_KEY_BYTES, META, openMvcc, type MvccDb } from '../shared/mvcc/schema.js';
import { EVENT_DELETE, EVENT_PUT, REF_BYTES, REVKEY_BYTES, keyRevValue, revKey } from '../shared/mvcc/revision.js';
import { encodeKeyValue, EMPTY } from '../shared/mvcc/keyvalue.js';
import { encodeGrant, leaseKey, MIN_LEASE_TTL } from '../shared/mvcc/leases.js';
import { liveCount } from '../shared/mvcc/keyindex.js';
import { AUTH_META_KEY, authTables, encodeRole, encodeUser } from '../shared/auth/tables.js';

export interface EtcdRestoreResult {
  revision: number;
  /** -1 when etcd had never compacted. */
  compactRevision: number;
  keys: number;
  /** Stored changes (history records) imported. */
  changes: number;
  leases: number;
  users: number;
  roles: number;
  authEnabled: boolean;
  /** What was found but not carried over, for the user to know. */
  notes: string[];
}

/** Changes, and record bytes, written per LMDB transaction (the database is not live: this only bounds memory). */
const BATCH = 20_000;
const BATCH_BYTES = 64 << 20;
const APPEND = { append: true };

/** Fills the (new, empty) database under `stagingDir` from the etcd backend in the first `length` bytes of `file`. */
export async function restoreEtcd(file: string, length: number, stagingDir: string): Promise<EtcdRestoreResult> {
  const fd = fs.openSync(file, 'r');
  try {
    const snap = new EtcdSnapshot(fileSource(fd, length));
    const notes: string[] = [];
    const unknown = snap.unknownBuckets();
    if (unknown.length) notes.push(`left out buckets kvs does not know: ${unknown.map((b) => JSON.stringify(b)).join(', ')}`);
    // Read before anything is written, so a damaged small bucket fails the restore early.
    const { finished, scheduled } = snap.compaction();
    const leases = snap.leases();
    const auth = snap.auth();
    // etcd resumes an interrupted compaction at start (mvcc/kvstore.go restore); kvs resumes
    // the physical removal of what it makes unreachable the same way (compactedThrough).
    const compact = Math.max(finished, scheduled);
    const checkpointed = leases.filter((l) => l.remainingTTL > 0).length;
    if (checkpointed) notes.push(`${checkpointed} leases had a checkpointed remaining TTL; like every lease they start their full TTL when the node starts`);

    const db = openMvcc(stagingDir, { readOnly: false });
    try {
      const { head, changes, keyLeases, deleted } = writeHistory(db, snap.changes());
      const leaseIds = new Set(leases.map((l) => l.id));
      let detached = 0;
      db.env.transactionSync(() => {
        for (const key of deleted) db.deleted.putSync(Buffer.from(key, 'latin1'), EMPTY_VALUE);
        for (const l of leases) db.leases.putSync(leaseKey(l.id), encodeGrant(Math.max(l.ttl, MIN_LEASE_TTL)));
        for (const [key, id] of keyLeases) {
          // etcd too leaves a key whose lease is gone unattached (its Attach fails).
          if (!leaseIds.has(id)) detached++;
          else db.leasekeys.putSync(leaseKey(id), Buffer.from(key, 'latin1'));
        }
        const t = authTables(db);
        if (!t) throw new Error('kvs: the auth tables could not be created in the new database');
        for (const u of auth.users) t.users.putSync(u.name, encodeUser(u));
        for (const r of auth.roles) t.roles.putSync(r.name, encodeRole(r));
        db.meta.putSync(AUTH_META_KEY, { enabled: auth.enabled, revision: auth.revision });
        // etcd's current revision: the newest stored, but not below the compaction (a
        // compaction can remove the newest changes, when they were deletions).
        db.meta.putSync(META.revision, Math.max(1, head, compact));
        if (compact > 0) {
          db.meta.putSync(META.compactRevision, compact);
          db.meta.putSync(META.compactedThrough, Math.max(0, finished));
        }
        db.meta.putSync(META.appliedIndex, 0);
      });
      if (detached) notes.push(`${detached} ${detached === 1 ? 'key names a lease' : 'keys name leases'} the snapshot does not hold; as on etcd, kept and attached to no lease`);
      await new Promise<void>((resolve, reject) =>
        (db.env as unknown as { sync(cb: (err?: Error) => void): void }).sync((err) => (err ? reject(err) : resolve())),
      );
      return {
        revision: Math.max(1, head, compact),
        compactRevision: compact > 0 ? compact : -1,
        keys: liveCount(db, { start: Buffer.alloc(0) }),
        changes,
        leases: leases.length,
        users: auth.users.length,
        roles: auth.roles.length,
        authEnabled: auth.enabled,
        notes,
      };
    } finally {
      await db.env.close();
    }
  } finally {
    fs.closeSync(fd);
  }
}

const EMPTY_VALUE = Buffer.alloc(0);

/**
 * Writes every change into history and the key index, in transactions of BATCH changes, and
 * returns what the derived tables need: the keys whose newest change is a deletion, and the
 * lease of each key whose newest change is a put with one (keys as latin1 strings).
 */
function writeHistory(db: MvccDb, changes: Generator<EtcdChange[]>): { head: number; changes: number; keyLeases: Map<string, bigint>; deleted: Set<string> } {
  // Records go in uncompressed: LZ4 against the dictionary costs several times the rest of an
  // import per record, and the layout reads uncompressed records beside compressed ones
  // (shared/mvcc/schema.ts); what kvs writes later is compressed as usual.
  const history = db.env.openDB<Buffer, Buffer>({ name: 'history', encoding: 'binary', keyEncoding: 'binary' });
  const revKeyScratch = Buffer.alloc(REVKEY_BYTES);
  const refScratch = Buffer.alloc(REF_BYTES);
  let maxKey = Buffer.alloc(0);
  const keyLeases = new Map<string, bigint>();
  const deleted = new Set<string>();
  let head = 0;
  let count = 0;
  let done = false;
  while (!done) {
    db.env.transactionSync(() => {
      for (let n = 0, bytes = 0; n < BATCH && bytes < BATCH_BYTES; ) {
        const next = changes.next();
        if (next.done) {
          done = true;
          return;
        }
        for (const c of next.value) {
          if (c.key.length > MAX_KEY_BYTES) {
            throw new Error(`key ${JSON.stringify(c.key.subarray(0, 64).toString('utf8'))}… (revision ${c.main}) is ${c.key.length} bytes, longer than the ${MAX_KEY_BYTES} bytes a kvs key can be; the restore was not made`);
          }
          // kvs's tombstones carry their mod_revision (shared/mvcc/schema.ts).
          const kv = c.tombstone ? encodeKeyValue({ key: c.key, createRevision: 0, modRevision: c.main, version: 0, value: EMPTY, lease: 0n }) : c.kv;
          // Scratch buffers: putSync copies them into LMDB before it returns.
          const rk = revKey(c.main, c.sub, revKeyScratch);
          // Revisions come in order (the reader checks), so every record is an append.
          if (!(history.putSync(rk, kv, APPEND) as unknown as boolean)) throw new Error(`kvs: history refused revision ${c.main}_${c.sub} out of order`);
          const ref = keyRevValue(c.main, c.sub, c.tombstone ? EVENT_DELETE : EVENT_PUT, refScratch);
          // A key above every key so far is appended (LMDB skips the search; keys created in
          // ascending order, as a bulk load often makes them, all are); others are inserted.
          if (c.key.compare(maxKey) > 0) {
            if (!(db.keyrevs.putSync(c.key, ref, APPEND) as unknown as boolean)) throw new Error(`kvs: the key index refused key ${c.key.toString('hex')} as its last`);
            maxKey = Buffer.from(c.key);
          } else {
            db.keyrevs.putSync(c.key, ref);
          }
          // The key as a string only when a table needs it (most puts need neither).
          if (c.tombstone) {
            const k = c.key.toString('latin1');
            deleted.add(k);
            keyLeases.delete(k);
          } else if (c.lease !== 0n || deleted.size || keyLeases.size) {
            const k = c.key.toString('latin1');
            deleted.delete(k);
            if (c.lease !== 0n) keyLeases.set(k, c.lease);
            else keyLeases.delete(k);
          }
          head = c.main;
          bytes += kv.length;
        }
        n += next.value.length;
        count += next.value.length;
      }
    });
  }
  return { head, changes: count, keyLeases, deleted };
}
