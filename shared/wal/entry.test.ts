import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type } from '../proto/index.js';
import { decodeWalEntry, encodeWalEntry, MUTATION_DELETE, MUTATION_PUT, type AuthChange, type AuthTokenRecord, type Mutation, type WalEntry } from './entry.js';

const token: Required<AuthTokenRecord> = { digest: Buffer.from('d1'), user: 'alice', expiresAtMs: 1_900_000_000_123 };
const auth: Required<AuthChange> = {
  putUsers: [Buffer.from('u')], deleteUsers: [Buffer.from('old')], putRoles: [Buffer.from('r')], deleteRoles: [Buffer.from('gone')],
  enabled: 1, authRevision: 7, putTokens: [token], deleteTokens: [Buffer.from('d0')], deleteAllTokens: true,
};
const mutation: Required<Mutation> = { type: MUTATION_DELETE, kv: Buffer.from('kv') };
// Every field set: the lease id needs all 64 bits, beyond a double's 53.
const full: Required<WalEntry> = {
  revision: 42, mutations: [{ type: MUTATION_PUT, kv: Buffer.from('a') }, mutation], compactRevision: 40,
  leaseGrant: { id: (1n << 62n) + 3n, ttl: 60 }, leaseRevoke: { id: 9n }, auth,
};

test('a WAL entry with every field set survives encoding and decoding', () => {
  const back = decodeWalEntry(encodeWalEntry(full));
  assert.equal(back.revision, 42);
  assert.equal(back.compactRevision, 40);
  assert.deepEqual(back.leaseGrant, full.leaseGrant);
  assert.deepEqual(back.leaseRevoke, full.leaseRevoke);
  assert.deepEqual(back.mutations.map((m) => [m.type, Buffer.from(m.kv).toString()]), [[MUTATION_PUT, 'a'], [MUTATION_DELETE, 'kv']]);
  const a = back.auth!;
  assert.equal(a.enabled, 1);
  assert.equal(a.authRevision, 7);
  assert.equal(a.deleteAllTokens, true);
  assert.deepEqual(a.putTokens.map((t) => [Buffer.from(t.digest).toString(), t.user, t.expiresAtMs]), [['d1', 'alice', 1_900_000_000_123]]);
  assert.deepEqual([a.putUsers, a.deleteUsers, a.putRoles, a.deleteRoles, a.deleteTokens].map((l) => l.map((b) => Buffer.from(b).toString())), [['u'], ['old'], ['r'], ['gone'], ['d0']]);
});

test('an entry without lease or auth changes decodes without them', () => {
  const back = decodeWalEntry(encodeWalEntry({ revision: 3, mutations: [], compactRevision: 0 }));
  assert.deepEqual(back, { revision: 3, mutations: [], compactRevision: 0 });
});

test('the TypeScript shapes name exactly the fields of the messages in proto/kvs/storage.proto', () => {
  const fields = (name: string) => type(name).fieldsArray.map((f) => f.name).sort();
  assert.deepEqual(Object.keys(full).sort(), fields('kvs.storage.WalEntry'));
  assert.deepEqual(Object.keys(auth).sort(), fields('kvs.storage.AuthChange'));
  assert.deepEqual(Object.keys(token).sort(), fields('kvs.storage.AuthToken'));
  assert.deepEqual(Object.keys(mutation).sort(), fields('kvs.storage.Mutation'));
  assert.deepEqual(Object.keys(full.leaseGrant).sort(), fields('kvs.storage.LeaseGrant'));
  assert.deepEqual(Object.keys(full.leaseRevoke).sort(), fields('kvs.storage.LeaseRevoke'));
  const kinds = type('kvs.storage.Mutation').lookupEnum('Type').values;
  assert.deepEqual({ PUT: MUTATION_PUT, DELETE: MUTATION_DELETE }, { ...kinds });
});
