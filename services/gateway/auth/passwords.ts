// bcrypt through the native `bcrypt` package: hashing and comparing run on libuv's thread
// pool, so a burst of Authenticate calls does not stall the gateway's event loop. Passwords
// never leave this module except as hashes, and are never logged.
import bcrypt from 'bcrypt';

export function hashPassword(password: string, cost: number): Promise<string> {
  return bcrypt.hash(password, cost);
}

/** etcd writes $2a$ hashes, bcrypt $2b$: both compare. */
export function checkPassword(password: string, hash: Buffer): Promise<boolean> {
  if (hash.length === 0) return Promise.resolve(false);
  return bcrypt.compare(password, hash.toString('latin1'));
}
