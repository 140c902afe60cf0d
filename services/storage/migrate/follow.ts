// `kvs migrate`'s second half: a kvs database that holds a restored etcd snapshot follows
// etcd's watch from there, and every change lands at etcd's own revision. Each revision's
// events (a Txn's several changes are one revision) become one WAL entry applied through
// mvcc/apply.ts, the code that applies kvs's own writes, so the database is one `kvs run`
// serves as if kvs had taken those writes itself. What a watch does not carry is polled:
// etcd's head revision (for the lag), its leases (grants and revokes), its compaction.
//
// The database is written without a WAL: each batch is one LMDB transaction, synced before the
// next poll reports progress, and after a crash the follow resumes from the revision the
// database holds (history is appended at revisions above it only).
import * as grpc from '@grpc/grpc-js';
import type { MvccDb } from '../../../shared/mvcc/schema.js';
import { META, readMeta } from '../../../shared/mvcc/schema.js';
import { encodeKeyValue, EMPTY } from '../../../shared/mvcc/keyvalue.js';
import { leaseIdOf, leaseKey } from '../../../shared/mvcc/leases.js';
import { compactMainRev } from '../../../shared/mvcc/hash.js';
import { bigint, int64, num } from '../../../shared/proto/index.js';
import { isUnavailable, USER_EMPTY, type EtcdClient } from '../../../shared/etcd-client.js';
import { authMeta, encodeRole, encodeUser, listRoles, listUsers, type Role, type User } from '../../../shared/auth/tables.js';
import { DISABLE, emptyChange, ENABLE } from '../auth/apply.js';
import { applyEntry } from '../mvcc/apply.js';
import { MUTATION_DELETE, MUTATION_PUT, type Mutation, type WalEntry } from '../../../shared/wal/entry.js';

/** etcd cancelled the watch: the revisions after ours are compacted away on etcd. */
export class CompactedError extends Error {
  constructor(
    readonly wanted: number,
    readonly compactRevision: number,
  ) {
    super(`etcd has compacted its history past revision ${wanted} (compact revision ${compactRevision}): the migration must start again from a new snapshot`);
    this.name = 'CompactedError';
  }
}

export interface Progress {
  /** The last revision applied to the database. */
  applied: number;
  /** etcd's revision as last seen. */
  head: number;
}

export interface FollowOptions {
  db: MvccDb;
  client: EtcdClient;
  signal: AbortSignal;
  /** How often etcd's head, leases and compaction are polled (and progress is reported). */
  pollMs?: number;
  /** A line for the operator: lag, caught up, reconnects. */
  say: (line: string) => void;
  /** Called after every poll, with the database synced to `applied`. */
  onProgress?: (p: Progress) => void;
}

interface WatchEvent {
  type: number;
  kv: { key: Uint8Array; createRevision: unknown; modRevision: unknown; version: unknown; value: Uint8Array; lease: unknown };
}

interface WatchResponse {
  header?: { revision: unknown };
  created?: boolean;
  canceled?: boolean;
  compactRevision?: unknown;
  cancelReason?: string;
  events?: WatchEvent[];
}

const ALL = Buffer.from([0]);
const RECONNECT_MS = [100, 250, 500, 1000, 2000];

function sync(db: MvccDb): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    (db.env as unknown as { sync(cb: (err?: Error) => void): void }).sync((err) => (err ? reject(err) : resolve())),
  );
}

/** One revision's events as the WAL entry kvs would have written for them. */
export function entryOf(revision: number, events: WatchEvent[]): WalEntry {
  const mutations: Mutation[] = events.map((e) => {
    const key = e.kv.key;
    if (e.type === 1) {
      return { type: MUTATION_DELETE, kv: encodeKeyValue({ key, createRevision: 0, modRevision: revision, version: 0, value: EMPTY, lease: 0n }) };
    }
    return {
      type: MUTATION_PUT,
      kv: encodeKeyValue({
        key,
        createRevision: num(e.kv.createRevision as number),
        modRevision: revision,
        version: num(e.kv.version as number),
        value: e.kv.value ?? EMPTY,
        lease: bigint(e.kv.lease as number),
      }),
    };
  });
  return { revision, mutations, compactRevision: 0 };
}

/** Splits a watch response's events into revisions, in order. */
export function byRevision(events: WatchEvent[]): { revision: number; events: WatchEvent[] }[] {
  const out: { revision: number; events: WatchEvent[] }[] = [];
  for (const e of events) {
    const rev = num(e.kv.modRevision as number);
    const last = out[out.length - 1];
    if (last && last.revision === rev) last.events.push(e);
    else out.push({ revision: rev, events: [e] });
  }
  return out;
}

function abortable(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Follows etcd until `signal` aborts; resolves with the last applied revision. Rejects with
 * CompactedError when etcd no longer holds the revisions after the database's, and with any
 * other error etcd answers that is not a lost connection.
 */
export async function follow(opts: FollowOptions): Promise<Progress> {
  const { db, client, signal, say } = opts;
  const progress: Progress = { applied: readMeta(db, META.revision), head: 0 };
  let reported = -1;
  const warned = new Set<string>();
  // At most one line per poll: the lag while behind, `caught up` each time the head is reached
  // with revisions applied since the last such line.
  const report = () => {
    const lag = Math.max(0, progress.head - progress.applied);
    if (lag > 0) say(`revision ${progress.applied}, etcd at ${progress.head}, lag ${lag}`);
    else if (progress.head > 0 && reported !== progress.applied) say(`caught up at revision ${progress.applied}`);
    else return;
    reported = lag > 0 ? -1 : progress.applied;
  };
  let attempt = 0;
  let failure: Error | undefined;

  const apply = (res: WatchResponse) => {
    const groups = byRevision(res.events ?? []).filter((g) => g.revision > progress.applied);
    if (groups.length) {
      db.env.transactionSync(() => {
        for (const g of groups) applyEntry(db, entryOf(g.revision, g.events), readMeta(db, META.appliedIndex));
      });
      progress.applied = groups[groups.length - 1]!.revision;
    }
    progress.head = Math.max(progress.head, num(res.header?.revision as number), progress.applied);
  };

  // The poll: head, leases, compaction; then the database is synced and progress reported.
  let polling: Promise<void> | undefined;
  const poll = async () => {
    try {
      const r = await client.call('KV', 'Range', { key: ALL, limit: 1, keysOnly: true });
      progress.head = Math.max(progress.head, num(r.header?.revision));
      await mirrorLeases(db, client);
      for (const w of await mirrorAuth(db, client)) if (!warned.has(w)) warned.add(w), say(w);
      await mirrorCompaction(db, client, progress.applied);
      await sync(db);
      report();
      opts.onProgress?.({ ...progress });
    } catch (err) {
      if ((err as grpc.ServiceError).details === USER_EMPTY) {
        failure ??= new Error('etcd has auth enabled and kvs migrate has no user: run it again with --user root:PASSWORD (it resumes where it stopped)');
      } else if (!isUnavailable(err)) failure ??= err as Error;
    }
  };
  const timer = setInterval(() => {
    polling ??= poll().finally(() => (polling = undefined));
  }, opts.pollMs ?? 1000);

  try {
    while (!signal.aborted && !failure) {
      try {
        await watchFrom(client, progress.applied + 1, signal, (res) => {
          attempt = 0;
          apply(res);
        }, () => (polling ??= poll().finally(() => (polling = undefined))));
      } catch (err) {
        if (err instanceof CompactedError || !isUnavailable(err)) throw err;
        if (signal.aborted) break;
        const next = client.failover();
        const wait = RECONNECT_MS[Math.min(attempt++, RECONNECT_MS.length - 1)]!;
        say(`lost etcd (${(err as grpc.ServiceError).details || (err as Error).message}); resuming from revision ${progress.applied + 1} via ${next} in ${wait} ms`);
        await abortable(wait, signal);
      }
    }
    if (failure) throw failure;
  } finally {
    clearInterval(timer);
    await polling;
    await sync(db);
  }
  return progress;
}

/**
 * One watch stream over every key from `start`, until the signal aborts (resolves) or the
 * stream fails (rejects). `onCreated` runs when etcd has accepted it.
 */
async function watchFrom(client: EtcdClient, start: number, signal: AbortSignal, onResponse: (r: WatchResponse) => void, onCreated: () => void): Promise<void> {
  const md = await client.metadata();
  const call = client.client('Watch').watch(md) as grpc.ClientDuplexStream<object, WatchResponse>;
  await new Promise<void>((resolve, reject) => {
    let settled = false;
    const end = (err?: Error) => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', stop);
      call.removeAllListeners('data');
      call.on('error', () => {}); // the cancel below ends the call with CANCELLED
      call.cancel();
      if (err) reject(err);
      else resolve();
    };
    const stop = () => end();
    signal.addEventListener('abort', stop, { once: true });
    call.on('data', (res: WatchResponse) => {
      try {
        if (res.canceled) {
          const compact = num(res.compactRevision as number);
          end(compact > 0 ? new CompactedError(start, compact) : new Error(`etcd cancelled the watch: ${res.cancelReason || 'no reason given'}`));
          return;
        }
        if (res.created) onCreated();
        if (res.events?.length || res.header) onResponse(res);
      } catch (err) {
        end(err as Error);
      }
    });
    call.on('error', (err) => end(err));
    call.on('end', () => end(Object.assign(new Error('etcd ended the watch stream'), { code: grpc.status.UNAVAILABLE })));
    if (signal.aborted) return end();
    call.write({ createRequest: { key: ALL, rangeEnd: ALL, startRevision: int64(BigInt(start)), progressNotify: true } });
  });
}

/** etcd's leases now in the database: grants of new ones (their granted TTL), revokes of gone ones. */
async function mirrorLeases(db: MvccDb, client: EtcdClient): Promise<void> {
  const res = await client.call<{ leases?: { ID: unknown }[] }>('Lease', 'LeaseLeases', {});
  const theirs = new Set((res.leases ?? []).map((l) => bigint(l.ID as number)));
  const ours = new Set([...db.leases.getKeys({})].map((k) => leaseIdOf(k as Buffer)));
  const grants: { id: bigint; ttl: number }[] = [];
  for (const id of theirs) {
    if (ours.has(id)) continue;
    const ttl = await client.call<{ grantedTTL: unknown; TTL: unknown }>('Lease', 'LeaseTimeToLive', { ID: int64(id) });
    // -1: it expired or was revoked between the two calls.
    if (num(ttl.TTL as number) === -1) continue;
    grants.push({ id, ttl: num(ttl.grantedTTL as number) });
  }
  const revokes = [...ours].filter((id) => !theirs.has(id));
  if (!grants.length && !revokes.length) return;
  db.env.transactionSync(() => {
    const index = readMeta(db, META.appliedIndex);
    // A revoke's key deletions arrive through the watch at their own revision; here the lease
    // itself goes (a key still attached is detached by its deletion).
    for (const g of grants) applyEntry(db, { revision: 0, mutations: [], compactRevision: 0, leaseGrant: g }, index);
    for (const id of revokes) {
      if (db.leases.doesExist(leaseKey(id))) applyEntry(db, { revision: 0, mutations: [], compactRevision: 0, leaseRevoke: { id } }, index);
    }
  });
}

/** Whether etcd still serves revision `rev` (a single-key read at it is cheap at any size). */
async function served(client: EtcdClient, rev: number): Promise<boolean> {
  try {
    await client.call('KV', 'Range', { key: ALL, revision: int64(BigInt(rev)), limit: 1, keysOnly: true });
    return true;
  } catch (err) {
    if ((err as grpc.ServiceError).details === 'etcdserver: mvcc: required revision has been compacted') return false;
    throw err;
  }
}

/**
 * etcd's compaction, mirrored: etcd serves revision R iff R >= its compact revision, so when it
 * no longer serves ours its new one is the first it serves, found by bisection up to the
 * applied revision (a compaction beyond that is mirrored once the watch has brought us there).
 */
async function mirrorCompaction(db: MvccDb, client: EtcdClient, applied: number): Promise<void> {
  const base = Math.max(compactMainRev(db), 1);
  if (base >= applied || (await served(client, base)) || !(await served(client, applied))) return;
  let lo = base; // not served
  let hi = applied; // served
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (await served(client, mid)) hi = mid;
    else lo = mid;
  }
  db.env.transactionSync(() => applyEntry(db, { revision: 0, mutations: [], compactRevision: hi }, readMeta(db, META.appliedIndex)));
}

const roleForm = (r: Role) =>
  JSON.stringify([r.name.toString('hex'), r.perms.map((p) => [p.permType, p.key.toString('hex'), p.rangeEnd.toString('hex')]).sort()]);
const userForm = (u: User) => JSON.stringify([u.name.toString('hex'), [...u.roles].sort()]);

/**
 * etcd's users, roles and enabled flag, mirrored (they are not in the watch). Passwords cannot
 * be read over etcd's API: a user's bcrypt hash stays the snapshot's, and a user etcd added
 * later has none on kvs (it cannot log in until given one; the returned warning says so).
 */
async function mirrorAuth(db: MvccDb, client: EtcdClient): Promise<string[]> {
  let enabled = false;
  try {
    await client.anonymous('Auth', 'UserList', {});
  } catch (err) {
    if ((err as grpc.ServiceError).details !== USER_EMPTY) throw err;
    enabled = true;
  }
  let names: { users: string[]; roles: string[] };
  try {
    const [u, r] = await Promise.all([client.call('Auth', 'UserList', {}), client.call('Auth', 'RoleList', {})]);
    names = { users: u.users ?? [], roles: r.roles ?? [] };
  } catch (err) {
    const details = (err as grpc.ServiceError).details;
    if (details === USER_EMPTY || details === 'etcdserver: permission denied') {
      return ['etcd has auth enabled and the --user given cannot list its users: kvs keeps the users and roles of the snapshot (give --user root:PASSWORD to follow them)'];
    }
    throw err;
  }
  const theirRoles: Role[] = [];
  for (const name of names.roles) {
    const r = await client.call('Auth', 'RoleGet', { role: name });
    theirRoles.push({
      name: Buffer.from(name),
      perms: (r.perm ?? []).map((p: any) => ({ permType: p.permType ?? 0, key: Buffer.from(p.key ?? []), rangeEnd: Buffer.from(p.rangeEnd ?? []) })),
    });
  }
  const ourUsers = new Map(listUsers(db).map((u) => [u.name.toString(), u]));
  const ourRoles = new Map(listRoles(db).map((r) => [r.name.toString(), r]));
  const change = emptyChange();
  const warnings: string[] = [];
  for (const name of names.users) {
    const r = await client.call('Auth', 'UserGet', { name });
    const ours = ourUsers.get(name);
    const theirs: User = { name: Buffer.from(name), password: ours?.password ?? Buffer.alloc(0), roles: [...(r.roles ?? [])].sort(), noPassword: ours?.noPassword ?? false };
    if (!ours) warnings.push(`user ${name} was added on etcd after the snapshot; etcd's API does not give its password: set one on kvs (etcdctl user passwd ${name}) before it logs in`);
    if (!ours || userForm(ours) !== userForm(theirs)) change.putUsers.push(encodeUser(theirs));
  }
  for (const name of ourUsers.keys()) if (!names.users.includes(name)) change.deleteUsers.push(Buffer.from(name));
  for (const role of theirRoles) {
    const ours = ourRoles.get(role.name.toString());
    if (!ours || roleForm(ours) !== roleForm(role)) change.putRoles.push(encodeRole(role));
  }
  for (const name of ourRoles.keys()) if (!names.roles.includes(name)) change.deleteRoles.push(Buffer.from(name));
  const meta = authMeta(db);
  if (meta.enabled !== enabled) change.enabled = enabled ? ENABLE : DISABLE;
  const changed = change.putUsers.length + change.deleteUsers.length + change.putRoles.length + change.deleteRoles.length > 0 || change.enabled !== 0;
  if (changed) {
    change.authRevision = meta.revision + 1;
    // The tokens kvs handed out belong to the old state (a restored database has none).
    change.deleteAllTokens = true;
    db.env.transactionSync(() => applyEntry(db, { revision: 0, mutations: [], compactRevision: 0, auth: change }, readMeta(db, META.appliedIndex)));
  }
  return warnings;
}
