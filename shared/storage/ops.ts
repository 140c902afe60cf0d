/**
 * The storage protocol's operations: `enum Op` of proto/kvs/storage.proto, the `op` of every
 * WriteRequest the gateway (and the storage's own lessor and auth startup) sends the engine.
 * Typed once here, with literal values so that a `switch` over them narrows; ops.test.ts
 * holds the table against the .proto, so the two cannot drift apart.
 */
export const Op = {
  PUT: 1,
  DELETE_RANGE: 2,
  TXN: 3,
  COMPACT: 4,
  LEASE_GRANT: 5,
  LEASE_REVOKE: 6,
  LEASE_KEEPALIVE: 7,
  LEASE_TIME_TO_LIVE: 8,
  LEASE_LEASES: 9,
  AUTH_ENABLE: 10,
  AUTH_DISABLE: 11,
  AUTHENTICATE: 12,
  AUTH_USER_ADD: 13,
  AUTH_USER_DELETE: 14,
  AUTH_USER_CHANGE_PASSWORD: 15,
  AUTH_USER_GRANT_ROLE: 16,
  AUTH_USER_REVOKE_ROLE: 17,
  AUTH_ROLE_ADD: 18,
  AUTH_ROLE_DELETE: 19,
  AUTH_ROLE_GRANT_PERMISSION: 20,
  AUTH_ROLE_REVOKE_PERMISSION: 21,
  AUTH_TOKEN_REFRESH: 22,
} as const;

export type OpName = keyof typeof Op;
export type OpValue = (typeof Op)[OpName];

/** Whether `op` is one of the auth store's operations (AUTH_ENABLE through AUTH_TOKEN_REFRESH). */
export function isAuthOp(op: number): boolean {
  return op >= Op.AUTH_ENABLE && op <= Op.AUTH_TOKEN_REFRESH;
}
