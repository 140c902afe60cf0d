// Applies the physical effect of an auth write (WalEntry.auth) to the auth tables: the live
// write path and WAL replay both come here, so a replayed entry lands as it did the first time.
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { AUTH_META_KEY, authMeta, authTables, decodeRole, decodeUser, encodeToken } from '../../../shared/auth/tables.js';
import type { AuthChange } from '../../../shared/wal/entry.js';
import { asBuffer as buf } from '../../../shared/bytes.js';

export const ENABLE = 1;
export const DISABLE = 2;

export function emptyChange(): AuthChange {
  return { putUsers: [], deleteUsers: [], putRoles: [], deleteRoles: [], enabled: 0, authRevision: 0, putTokens: [], deleteTokens: [], deleteAllTokens: false };
}

/** Inside the caller's write transaction. */
export function applyAuthChange(db: MvccDb, c: AuthChange): void {
  const t = authTables(db);
  if (!t) throw new Error('the auth tables are missing from a writable database');
  for (const name of c.deleteUsers) t.users.removeSync(buf(name));
  for (const u of c.putUsers) t.users.putSync(decodeUser(u).name, buf(u));
  for (const name of c.deleteRoles) t.roles.removeSync(buf(name));
  for (const r of c.putRoles) t.roles.putSync(decodeRole(r).name, buf(r));
  if (c.deleteAllTokens) for (const key of [...t.tokens.getKeys({})]) t.tokens.removeSync(key);
  for (const d of c.deleteTokens) t.tokens.removeSync(buf(d));
  for (const tk of c.putTokens) t.tokens.putSync(buf(tk.digest), encodeToken(buf(tk.digest), { user: tk.user, expiresAtMs: tk.expiresAtMs }));
  if (c.enabled || c.authRevision) {
    const m = authMeta(db);
    db.meta.putSync(AUTH_META_KEY, {
      enabled: c.enabled ? c.enabled === ENABLE : m.enabled,
      revision: c.authRevision || m.revision,
    });
  }
}
