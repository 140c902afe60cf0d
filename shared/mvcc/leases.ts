// The lease tables (schema.ts): what was granted, and which keys are attached to each lease.
// Storage writes them (services/storage/lease/); the gateway may read them directly. Live
// expiry deadlines are not here: they are wall-clock state that only storage keeps (a replayed
// WAL must rebuild these tables byte for byte).
import type { MvccDb } from './schema.js';

/** etcd's lease.MaxLeaseTTL (seconds): a larger TTL is refused with "too large lease TTL". */
export const MAX_LEASE_TTL = 9_000_000_000;
/** etcd's minimum TTL with default heartbeat and election settings: ceil(1.5 election timeout). */
export const MIN_LEASE_TTL = 2;

/** A lease id as a table key: 8 bytes, big-endian two's complement (as etcd's lease bucket). */
export function leaseKey(id: bigint): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigInt64BE(BigInt.asIntN(64, id));
  return b;
}

export function leaseIdOf(key: Uint8Array): bigint {
  return Buffer.from(key.buffer, key.byteOffset, key.length).readBigInt64BE(0);
}

export function encodeGrant(ttl: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigInt64BE(BigInt(ttl));
  return b;
}

function decodeGrant(value: Uint8Array): number {
  return Number(Buffer.from(value.buffer, value.byteOffset, value.length).readBigInt64BE(0));
}

/** The granted TTL of a lease, or undefined when no such lease exists. */
export function leaseTTL(db: MvccDb, id: bigint): number | undefined {
  const v = db.leases.get(leaseKey(id));
  return v === undefined ? undefined : decodeGrant(v);
}

export function leaseExists(db: MvccDb, id: bigint): boolean {
  return db.leases.doesExist(leaseKey(id));
}

/** Every lease with its granted TTL, in table order. */
export function* allLeases(db: MvccDb): Generator<{ id: bigint; ttl: number }> {
  for (const { key, value } of db.leases.getRange({})) yield { id: leaseIdOf(key), ttl: decodeGrant(value) };
}

/** The keys attached to a lease, in byte order (the order etcd deletes them in on revoke). */
export function leaseKeys(db: MvccDb, id: bigint): Buffer[] {
  return [...db.leasekeys.getValues(leaseKey(id))].map((k) => Buffer.from(k));
}
