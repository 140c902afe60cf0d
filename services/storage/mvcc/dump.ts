// Every table's contents as lines, for tests that compare two databases (a live one and one
// rebuilt from the WAL must be byte-identical).
import type { MvccDb } from '../../../shared/mvcc/schema.js';

export function dump(db: MvccDb): string[] {
  const out: string[] = [];
  const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
  for (const { key, value } of db.history.getRange({})) out.push(`h ${hex(key)} ${hex(value)}`);
  for (const { key, value } of db.keyrevs.getRange({})) out.push(`r ${hex(key)} ${hex(value)}`);
  for (const { key } of db.deleted.getRange({})) out.push(`d ${hex(key)}`);
  for (const { key, value } of db.leases.getRange({})) out.push(`l ${hex(key)} ${hex(value)}`);
  for (const { key, value } of db.leasekeys.getRange({})) out.push(`lk ${hex(key)} ${hex(value)}`);
  for (const k of ['revision', 'compactRevision', 'compactedThrough']) out.push(`m ${k} ${db.meta.get(k)}`);
  return out;
}
