// kvs's state in etcd 3.4's backend schema: the buckets of the bbolt file that etcd's
// Maintenance.Snapshot streams, `etcdctl snapshot restore` restores and etcd serves from.
//
//   key              etcd's revision key (8-byte big-endian main, '_', 8-byte big-endian sub,
//                    't' for a deletion) -> mvccpb.KeyValue (a deletion: the key alone)
//                    (mvcc/kvstore.go, revision.go)
//   meta             consistent_index (u64 BE), finishedCompactRev and scheduledCompactRev
//                    (revision keys of the compact revision, sub 0) once compacted
//   lease            lease id (int64 BE) -> leasepb.Lease {ID, TTL} (lease/lessor.go)
//   auth             authEnabled (1 byte), authRevision (u64 BE) (auth/store.go)
//   authUsers        user name -> authpb.User; authRoles: role name -> authpb.Role
//   cluster          clusterVersion -> "3.4.0" (etcdserver/api/membership/store.go)
//   alarm, members, members_removed: empty (a restore replaces the membership anyway)
//
// Which changes go into `key`: every change above the compact revision, and of those at or
// below it what etcd's compaction keeps, each key's newest change if it is a put
// (services/storage/mvcc/compaction.ts has the same rule; while kvs's physical removal is in
// progress its leftovers are left out here). So etcd restored from the file serves the same
// Range at every revision from the compact revision to the head.
import type { MvccDb } from '../mvcc/schema.js';
import { META, readMeta } from '../mvcc/schema.js';
import { revKey, refIsPut, refRevKey, REVKEY_BYTES } from '../mvcc/revision.js';
import { scanHistory } from '../mvcc/history-scan.js';
import { BoltWriter, DEFAULT_PAGE_SIZE, type BucketEntries, type PutEntry } from '../bbolt/write.js';
import { AUTH_KEY, BUCKET, META_KEY, REVISION_KEY_BYTES, encodeUint64 } from './schema.js';
import { refAt } from '../mvcc/keyindex.js';
import { compactionPending } from '../mvcc/history.js';
import { authMeta, authTables } from '../auth/tables.js';

const name = (n: string) => Buffer.from(n);
const CLUSTER_VERSION_KEY = Buffer.from('clusterVersion');
/** What etcd 3.4 records as the cluster version (major.minor.0). */
export const CLUSTER_VERSION = '3.4.0';

const ETCD_TOMBSTONE_REVKEY_BYTES = REVISION_KEY_BYTES + 1;

/**
 * etcd's on-disk revision key (schema.ts's encodeRevisionKey) written into `into` when given:
 * the export writes one per history record, so without a Buffer (or a BigInt) each.
 */
export function etcdRevisionKey(main: number, sub: number, tombstone: boolean, into?: Buffer): Buffer {
  const b = into ?? Buffer.allocUnsafe(tombstone ? ETCD_TOMBSTONE_REVKEY_BYTES : REVISION_KEY_BYTES);
  // Revisions are below 2^53: two 32-bit halves.
  b.writeUInt32BE(Math.floor(main / 2 ** 32), 0);
  b.writeUInt32BE(main >>> 0, 4);
  b[8] = 0x5f; // '_'
  b.writeUInt32BE(Math.floor(sub / 2 ** 32), 9);
  b.writeUInt32BE(sub >>> 0, 13);
  if (tombstone) b[17] = 0x74; // 't'
  return b;
}

function pushVarint(out: number[], n: bigint): void {
  let v = BigInt.asUintN(64, n);
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
}

/** leasepb.Lease {ID = 1, TTL = 2} (int64 varints; zero fields are left out, as gogoproto does). */
export function encodeLease(id: bigint, ttl: number): Buffer {
  const out: number[] = [];
  if (id !== 0n) {
    out.push(0x08);
    pushVarint(out, id);
  }
  if (ttl !== 0) {
    out.push(0x10);
    pushVarint(out, BigInt(ttl));
  }
  return Buffer.from(out);
}

/** A key and value, valid until the next entry is read (the writer copies them). */
export type Entry = readonly [Uint8Array, Uint8Array];
export interface EtcdBucket {
  name: Buffer;
  entries: BucketEntries;
}

/** What the snapshot holds, for the caller's log and reply. */
export interface ExportSummary {
  /** kvs's revision in the read snapshot exported. */
  revision: number;
  compactRevision: number;
  /** Entries written to the `key` bucket. */
  changes: number;
}

/** Where a stored KeyValue's key field ends, and whether it is a tombstone (no version field). */
function recordShape(r: Uint8Array, length: number): { keyStart: number; keyEnd: number; tombstone: boolean } {
  if (r[0] !== 0x0a) throw new Error('a history record without a key field (the database is damaged)');
  let pos = 1;
  let klen = 0;
  for (let shift = 1, b = 0x80; b & 0x80; shift *= 128) {
    b = r[pos++]!;
    klen += (b & 0x7f) * shift;
  }
  const keyStart = pos;
  const keyEnd = pos + klen;
  // Fields come in number order: create_revision (0x10) and mod_revision (0x18) may precede
  // version (0x20), which every put has and no tombstone has.
  pos = keyEnd;
  let tombstone = true;
  while (pos < length) {
    const tag = r[pos]!;
    if (tag === 0x20) {
      tombstone = false;
      break;
    }
    if (tag !== 0x10 && tag !== 0x18) break;
    pos++;
    while (r[pos++]! & 0x80);
  }
  return { keyStart, keyEnd, tombstone };
}

/** How far a walk over `history` for the `key` bucket went: records seen (kept or not), and the last. */
interface KeyScan {
  records: number;
  main: number;
  sub: number;
}

/**
 * The `key` bucket from `history`: every change in revision order, converted to etcd's key and
 * (for deletions) value, without what a compaction to `compactRev` removes. With `scan`, only
 * the records after scan's last one (all when it has seen none), and scan is moved on.
 */
function keyBucket(db: MvccDb, compactRev: number, summary: ExportSummary, scan?: KeyScan): (put: PutEntry) => void {
  return (put) => {
    const pending = compactRev > 0 && compactionPending(db);
    const rk = Buffer.allocUnsafe(REVKEY_BYTES);
    // Reused for every entry (the writer copies them before put returns).
    const putKey = Buffer.allocUnsafe(REVISION_KEY_BYTES);
    const tombstoneKey = Buffer.allocUnsafe(ETCD_TOMBSTONE_REVKEY_BYTES);
    scanHistory(db, ({ main, sub, record, length }) => {
      if (scan) {
        scan.records++;
        scan.main = main;
        scan.sub = sub;
      }
      const { keyStart, keyEnd, tombstone } = recordShape(record, length);
      if (main <= compactRev) {
        if (tombstone) return;
        if (pending) {
          const newest = refAt(db, Buffer.from(record.subarray(keyStart, keyEnd)), compactRev);
          if (!newest || !refIsPut(newest) || !refRevKey(newest, rk).equals(revKey(main, sub))) return;
        }
      }
      summary.changes++;
      // kvs's tombstone is the key field and mod_revision; etcd's is the key field alone.
      put(etcdRevisionKey(main, sub, tombstone, tombstone ? tombstoneKey : putKey), record, tombstone ? keyEnd : length);
    }, scan && scan.records > 0 ? scan : undefined);
  };
}

function* leaseBucket(db: MvccDb): Generator<Entry> {
  for (const { key, value } of db.leases.getRange({})) {
    const k = Buffer.from(key);
    yield [k, encodeLease(k.readBigInt64BE(0), Number(Buffer.from(value).readBigInt64BE(0)))];
  }
}

function* rawTable(table: { getRange(o: object): Iterable<{ key: Uint8Array; value: Uint8Array }> } | undefined): Generator<Entry> {
  if (!table) return;
  for (const { key, value } of table.getRange({})) yield [key, value];
}

/**
 * etcd's buckets of `db`, in name order, read lazily in the caller's read snapshot (iterate it
 * without yielding to the event loop, or inside one read transaction). `summary` is filled in
 * as the buckets are read.
 */
export function etcdBuckets(db: MvccDb, summary: ExportSummary): EtcdBucket[] {
  const revision = readMeta(db, META.revision);
  const compactRev = readMeta(db, META.compactRevision);
  summary.revision = revision;
  summary.compactRevision = compactRev;
  summary.changes = 0;
  const auth = authMeta(db);
  const tables = authTables(db);
  const compacted: Entry[] = compactRev > 0
    ? [[name(META_KEY.finishedCompactRev), etcdRevisionKey(compactRev, 0, false)], [name(META_KEY.scheduledCompactRev), etcdRevisionKey(compactRev, 0, false)]]
    : [];
  // In the byte order of the names, as a bbolt file holds them.
  return [
    { name: name(BUCKET.alarm), entries: [] },
    { name: name(BUCKET.auth), entries: [[name(AUTH_KEY.enabled), Buffer.from([auth.enabled ? 1 : 0])], [name(AUTH_KEY.revision), encodeUint64(auth.revision)]] },
    { name: name(BUCKET.authRoles), entries: rawTable(tables?.roles) },
    { name: name(BUCKET.authUsers), entries: rawTable(tables?.users) },
    { name: name(BUCKET.cluster), entries: [[CLUSTER_VERSION_KEY, Buffer.from(CLUSTER_VERSION)]] },
    { name: name(BUCKET.key), entries: keyBucket(db, compactRev, summary) },
    { name: name(BUCKET.lease), entries: leaseBucket(db) },
    { name: name(BUCKET.members), entries: [] },
    { name: name(BUCKET.membersRemoved), entries: [] },
    { name: name(BUCKET.meta), entries: [[name(META_KEY.consistentIndex), encodeUint64(readMeta(db, META.appliedIndex))], ...compacted] },
  ];
}

/**
 * The layout of the last export, kept for the next: a dry run stopped after the `key`
 * bucket's entries. History only grows until a compaction, so the next export's dry run goes
 * on from there with the records added since instead of reading them all again (when the
 * compact revision is the same, no compaction's removal is in progress, and history holds
 * exactly the records seen then plus those after).
 */
export class SnapshotLayoutCache {
  kept: { dry: BoltWriter; compactRev: number; scan: KeyScan; changes: number } | undefined;
  /** Whether the last dry run went on from the kept one (for the log, and tests). */
  lastReused = false;
}

/** The dry run of the `key` bucket up to the read snapshot's head: from `cache` when it still applies. */
function dryKeyBucket(db: MvccDb, compactRev: number, summary: ExportSummary, cache: SnapshotLayoutCache | undefined): BoltWriter {
  const records = (db.history.getStats() as { entryCount: number }).entryCount;
  const pending = compactRev > 0 && compactionPending(db);
  const kept = cache?.kept;
  const reuse = kept && kept.compactRev === compactRev && !pending && kept.scan.records <= records;
  const dry = reuse ? kept.dry.fork() : new BoltWriter(() => {}, { pageSize: PAGE_SIZE, dryRun: true });
  const scan = reuse ? { ...kept.scan } : { records: 0, main: 0, sub: 0 };
  summary.changes = reuse ? kept.changes : 0;
  keyBucket(db, compactRev, summary, scan)(reuse ? dry.putEntry() : dry.beginBucket(name(BUCKET.key)));
  if (cache) cache.lastReused = reuse === true;
  if (scan.records !== records) {
    // History changed below the kept point (rewritten, or records removed): read it all.
    if (reuse) {
      cache!.kept = undefined;
      return dryKeyBucket(db, compactRev, summary, cache);
    }
  } else if (cache) {
    cache.kept = pending ? undefined : { dry: dry.fork(), compactRev, scan, changes: summary.changes };
  }
  dry.endBucket();
  return dry;
}

/** The buckets with `key` first (the file's order of pages). */
function keyFirst(buckets: EtcdBucket[]): EtcdBucket[] {
  const isKey = (b: EtcdBucket) => b.name.equals(name(BUCKET.key));
  return [...buckets.filter(isKey), ...buckets.filter((b) => !isKey(b))];
}

/** etcd's page size (bbolt's default on amd64 and arm64). */
const PAGE_SIZE = DEFAULT_PAGE_SIZE;

/**
 * Writes etcd's bbolt file of `db` to `sink` front to back (from offset 0, every piece in
 * file order), so that it can be streamed while it is written: a dry run over the buckets
 * computes the layout (the meta pages name the root page and the page count; continued from
 * `cache` when given and still valid), `onLayout` is told the file's size, then the same
 * buckets are written. The `key` bucket's pages come first, so that the dry run kept in the
 * cache does not depend on the small buckets. Both passes read the caller's read snapshot:
 * call it without yielding to the event loop (or inside one read transaction).
 */
export function writeEtcdSnapshot(
  db: MvccDb,
  sink: (offset: number, bytes: Buffer) => void,
  onLayout: (bytes: number) => void = () => {},
  cache?: SnapshotLayoutCache,
): ExportSummary & { bytes: number } {
  const summary: ExportSummary = { revision: 0, compactRevision: 0, changes: 0 };
  const [, ...others] = keyFirst(etcdBuckets(db, summary));
  const dry = dryKeyBucket(db, summary.compactRevision, summary, cache);
  for (const b of others) dry.bucket(b.name, b.entries);
  const layout = dry.finish();
  onLayout(layout.bytes);
  // The same buckets again (their entries are read as they are written), in the same order.
  const again: ExportSummary = { revision: 0, compactRevision: 0, changes: 0 };
  const writer = new BoltWriter((pgid, bytes) => sink(pgid * PAGE_SIZE, bytes), { pageSize: PAGE_SIZE, layout });
  const [key, ...rest] = keyFirst(etcdBuckets(db, again));
  writer.bucket(key!.name, key!.entries);
  for (const b of rest) writer.bucket(b.name, b.entries);
  const { bytes } = writer.finish();
  return { ...summary, bytes };
}
