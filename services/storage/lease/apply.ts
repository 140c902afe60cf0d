// The only code that mutates the lease tables. Like mvcc/apply.ts, the live write path and WAL
// replay both go through it, so replay rebuilds the tables byte for byte.
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { leaseKey, encodeGrant } from '../../../shared/mvcc/leases.js';
import type { LeaseChanges } from '../../../shared/wal/entry.js';

export function applyGrant(db: MvccDb, id: bigint, ttl: number): void {
  db.leases.putSync(leaseKey(id), encodeGrant(ttl));
}

/** Removes a lease. Its keys were deleted by the same entry's mutations, which detached them. */
export function applyRevoke(db: MvccDb, id: bigint): void {
  const k = leaseKey(id);
  db.leases.removeSync(k);
  db.leasekeys.removeSync(k);
}

/** Moves `key` from the lease of its previous version to the lease of its new one (0n: none). */
export function reattach(db: MvccDb, key: Buffer, from: bigint, to: bigint): void {
  if (from === to) return;
  if (from !== 0n) db.leasekeys.removeSync(leaseKey(from), key);
  if (to !== 0n) db.leasekeys.putSync(leaseKey(to), key);
}

export function applyLeaseChanges(db: MvccDb, e: LeaseChanges): void {
  if (e.leaseGrant) applyGrant(db, e.leaseGrant.id, e.leaseGrant.ttl);
  if (e.leaseRevoke) applyRevoke(db, e.leaseRevoke.id);
}
