// `--log-level debug`: one line per WAL entry appended, describing its shape only: index,
// revision, kind and mutation counts. Never keys nor values, at any level: debug is what an
// operator turns on in production to follow a problem, and logs are shipped and kept where
// the data's access rules do not apply (keys carry data too: names, tenants, ids).
import type { Logger } from '../../../shared/log.js';
import { decode, num, bigint, type Long } from '../../../shared/proto/index.js';
import type { WalRecord } from '../../../shared/wal/frame.js';

type Int64 = number | Long;
interface Entry {
  revision: Int64;
  mutations: { type: number }[];
  compactRevision: Int64;
  leaseGrant?: { id: Int64; ttl: Int64 };
  leaseRevoke?: { id: Int64 };
}

const DELETE = 1; // kvs.storage.Mutation.Type

/**
 * The WAL's `onAppend` hook for `log`, or undefined unless it logs at debug: then the append
 * path pays one undefined check per batch and builds nothing. The level is read once, when
 * the WAL is opened (it is fixed by --log-level for the process's life).
 */
export function walEntryDebugLog(log: Logger): ((records: readonly WalRecord[]) => void) | undefined {
  if (!log.isLevelEnabled('debug')) return undefined;
  return (records) => {
    for (const r of records) log.debug(describeEntry(r), 'WAL entry');
  };
}

/** The log fields of one record (a kvs.storage.WalEntry payload). */
export function describeEntry(record: WalRecord): Record<string, unknown> {
  const e = decode<Entry>('kvs.storage.WalEntry', record.payload);
  let deletes = 0;
  for (const m of e.mutations) if (m.type === DELETE) deletes++;
  const puts = e.mutations.length - deletes;
  const fields: Record<string, unknown> = { index: Number(record.index), revision: num(e.revision), kind: kind(e, puts, deletes), mutations: e.mutations.length };
  if (puts && deletes) Object.assign(fields, { puts, deletes });
  // Lease ids in hex, as etcdctl prints them.
  if (e.leaseGrant) Object.assign(fields, { lease: bigint(e.leaseGrant.id).toString(16), ttl: num(e.leaseGrant.ttl) });
  if (e.leaseRevoke) fields.lease = bigint(e.leaseRevoke.id).toString(16);
  if (num(e.compactRevision)) fields.compactRevision = num(e.compactRevision);
  return fields;
}

function kind(e: Entry, puts: number, deletes: number): string {
  if (e.leaseGrant) return 'lease-grant';
  if (e.leaseRevoke) return 'lease-revoke';
  if (num(e.compactRevision)) return 'compaction';
  // A txn's entry may hold both.
  if (puts && deletes) return 'put+delete';
  return deletes ? 'delete' : 'put';
}
