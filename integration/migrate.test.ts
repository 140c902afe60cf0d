// `kvs migrate`: a real etcd 3.4 takes writes while kvs follows it; `kvs run` on the result
// must answer every revision as etcd does, hold etcd's leases and compact revision, and give
// the next write etcd's next revision.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EtcdClient } from '../shared/etcd-client.js';
import { num, bigint, int64 } from '../shared/proto/index.js';
import { KVS_BIN, startEtcd, startKvs, tempDir, type Ctx, type EtcdNode, onCleanup, runCommand } from '../testkit/harness.js';
import { TcpProxy } from '../testkit/proxy.js';
import { makeCa } from '../testkit/certs.js';
import { startCluster } from '../testkit/node-cluster.js';

const ALL = Buffer.from([0]);

interface Migration {
  child: ChildProcess;
  lines: string[];
  /** Resolves with the first line (already printed or to come) matching `re`. */
  waitFor(re: RegExp, timeoutMs?: number): Promise<string>;
  /** SIGINT, then the exit code. */
  stop(): Promise<number | null>;
}

function startMigrate(t: Ctx, args: string[]): Migration {
  const child = spawn(process.execPath, [KVS_BIN, 'migrate', ...args], { env: { ...process.env, KVS_MIGRATE_POLL_MS: '100' }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const onLine = (line: string) => {
    lines.push(line);
    for (const w of waiters.splice(0)) (w.re.test(line) ? w.resolve(line) : waiters.push(w));
  };
  createInterface({ input: child.stdout! }).on('line', onLine);
  createInterface({ input: child.stderr! }).on('line', (l) => onLine(`stderr: ${l}`));
  onCleanup(t, async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return {
    child,
    lines,
    waitFor(re, timeoutMs = 60_000) {
      const seen = lines.find((l) => re.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no line matching ${re} in ${timeoutMs} ms; output:\n${lines.join('\n')}`)), timeoutMs);
        const w = { re, resolve: (l: string) => (clearTimeout(timer), resolve(l)) };
        waiters.push(w);
        void exited.then((code) => {
          if (waiters.includes(w)) {
            clearTimeout(timer);
            reject(new Error(`kvs migrate exited (${code}) before a line matching ${re}; output:\n${lines.join('\n')}`));
          }
        });
      });
    },
    async stop() {
      child.kill('SIGINT');
      return exited;
    },
  };
}

function clientOf(t: Ctx, endpoint: string): EtcdClient {
  const c = new EtcdClient({ endpoints: [endpoint] });
  onCleanup(t, () => c.close());
  return c;
}

const put = (c: EtcdClient, key: string, value: string, lease?: bigint) =>
  c.call('KV', 'Put', { key: Buffer.from(key), value: Buffer.from(value), ...(lease ? { lease: int64(lease) } : {}) });

/** Every key at `rev` as plain values, or the error's details. */
async function rangeAt(c: EtcdClient, rev: number): Promise<unknown> {
  try {
    const r = await c.call('KV', 'Range', { key: ALL, rangeEnd: ALL, revision: int64(BigInt(rev)) });
    return (r.kvs ?? []).map((kv: any) => ({
      key: Buffer.from(kv.key).toString(),
      value: Buffer.from(kv.value ?? []).toString(),
      create: num(kv.createRevision),
      mod: num(kv.modRevision),
      version: num(kv.version),
      lease: bigint(kv.lease).toString(),
    }));
  } catch (err) {
    return { error: (err as { details?: string }).details };
  }
}

async function head(c: EtcdClient): Promise<number> {
  const r = await c.call('KV', 'Range', { key: ALL, limit: 1 });
  return num(r.header.revision);
}

async function leases(c: EtcdClient): Promise<{ id: string; granted: number; keys: string[] }[]> {
  const r = await c.call('Lease', 'LeaseLeases', {});
  const out = [];
  for (const l of r.leases ?? []) {
    const ttl = await c.call('Lease', 'LeaseTimeToLive', { ID: l.ID, keys: true });
    out.push({ id: bigint(l.ID).toString(), granted: num(ttl.grantedTTL), keys: (ttl.keys ?? []).map((k: Uint8Array) => Buffer.from(k).toString()).sort() });
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : 1));
}

/** Every revision from 1 to the head read on both, and the leases. */
async function assertSameHistory(kvs: EtcdClient, etcd: EtcdClient, through: number): Promise<void> {
  for (let rev = 1; rev <= through; rev++) {
    assert.deepEqual(await rangeAt(kvs, rev), await rangeAt(etcd, rev), `revision ${rev}`);
  }
  assert.deepEqual(await leases(kvs), await leases(etcd), 'leases');
}

/** Puts, overwrites, deletes, a Txn of several changes, leases (one revoked with its keys). */
/** Waits for `m` to report it caught up at `rev`, then stops it: it must exit 0. */
async function catchUpAndStop(m: Migration, rev: number): Promise<void> {
  await m.waitFor(new RegExp(`^caught up at revision ${rev}$`));
  assert.equal(await m.stop(), 0, m.lines.join('\n'));
}

/** catchUpAndStop at `last` (default: etcd's revision now), then kvs run on `dir` must answer every revision through it as etcd does. */
async function assertMigrated(t: Ctx, m: Migration, dir: string, etcd: EtcdClient, last?: number): Promise<void> {
  last ??= await head(etcd);
  await catchUpAndStop(m, last);
  const node = await startKvs(t, { dataDir: dir });
  await assertSameHistory(clientOf(t, node.endpoint), etcd, last);
}

/** A fresh etcd and a client of it; with `tag`, workload(tag) is written to it first. */
async function freshEtcd(t: Ctx, tag?: string): Promise<{ etcdNode: EtcdNode; etcd: EtcdClient }> {
  const etcdNode = await startEtcd(t);
  const etcd = clientOf(t, etcdNode.endpoint);
  if (tag !== undefined) await workload(etcd, tag);
  return { etcdNode, etcd };
}

async function workload(c: EtcdClient, tag: string): Promise<void> {
  for (let i = 0; i < 20; i++) await put(c, `${tag}/k${i % 7}`, `v${i}`);
  await c.call('KV', 'DeleteRange', { key: Buffer.from(`${tag}/k1`) });
  await c.call('KV', 'DeleteRange', { key: Buffer.from(`${tag}/k4`), rangeEnd: Buffer.from(`${tag}/k6`) });
  await c.call('KV', 'Txn', {
    compare: [{ key: Buffer.from(`${tag}/k0`), target: 1, result: 0, version: int64(0n) }],
    success: [],
    failure: [
      { requestPut: { key: Buffer.from(`${tag}/t1`), value: Buffer.from('a') } },
      { requestPut: { key: Buffer.from(`${tag}/t2`), value: Buffer.from('b') } },
      { requestDeleteRange: { key: Buffer.from(`${tag}/k2`) } },
    ],
  });
  const kept = bigint((await c.call('Lease', 'LeaseGrant', { TTL: int64(600n) })).ID);
  const gone = bigint((await c.call('Lease', 'LeaseGrant', { TTL: int64(600n) })).ID);
  await put(c, `${tag}/leased/a`, '1', kept);
  await put(c, `${tag}/leased/b`, '2', kept);
  await put(c, `${tag}/leased/c`, '3', gone);
  await c.call('Lease', 'LeaseRevoke', { ID: int64(gone) });
  await put(c, `${tag}/after`, 'x');
}

test('kvs migrate follows etcd at its own revisions; kvs run then answers every revision as etcd does', async (t) => {
  const { etcdNode, etcd } = await freshEtcd(t, 'before');
  const dir = await tempDir(t, 'kvs-migrate-');
  const m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir]);
  await m.waitFor(/^restored etcd's snapshot/);
  await m.waitFor(/^caught up at revision/);
  await workload(etcd, 'during');
  await etcd.call('KV', 'Compact', { revision: int64(BigInt((await head(etcd)) - 5)), physical: true });
  await put(etcd, 'during/last', 'z');
  const last = await head(etcd);
  await catchUpAndStop(m, last);
  assert.match(m.lines.at(-1)!, new RegExp(`^stopped at revision ${last};`));

  const node = await startKvs(t, { dataDir: dir });
  const kvs = clientOf(t, node.endpoint);
  await assertSameHistory(kvs, etcd, last);
  const next = await put(kvs, 'next', '1');
  assert.equal(num(next.header.revision), last + 1, 'the next write gets etcd\'s next revision');
});

test('a dropped connection resumes from the last applied revision', async (t) => {
  const { etcdNode, etcd } = await freshEtcd(t);
  const port = Number(etcdNode.endpoint.split(':')[1]);
  const proxy = new TcpProxy({ name: 'etcd', target: () => port });
  onCleanup(t, () => proxy.close());
  await proxy.start();
  const dir = await tempDir(t, 'kvs-migrate-');
  const m = startMigrate(t, ['--from', proxy.address, '--data-dir', dir]);
  await m.waitFor(/^caught up at revision/);
  await workload(etcd, 'one');
  await m.waitFor(new RegExp(`^caught up at revision ${await head(etcd)}$`));
  proxy.set('refuse');
  await m.waitFor(/^lost etcd/);
  await workload(etcd, 'two');
  proxy.heal();
  await assertMigrated(t, m, dir, etcd);
});

test('a migration stopped long enough for etcd to compact past it starts again from a new snapshot', async (t) => {
  const { etcdNode, etcd } = await freshEtcd(t, 'a');
  const dir = await tempDir(t, 'kvs-migrate-');
  let m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir]);
  await catchUpAndStop(m, await head(etcd));
  await workload(etcd, 'b');
  await etcd.call('KV', 'Compact', { revision: int64(BigInt(await head(etcd))) });
  await put(etcd, 'c', '1');
  const last = await head(etcd);
  m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir]);
  await m.waitFor(/taking a new snapshot$/);
  await assertMigrated(t, m, dir, etcd, last);
});

test('kvs migrate refuses what it cannot follow, with the reason', async (t) => {
  const etcdNode = await startEtcd(t);
  const dir = await tempDir(t, 'kvs-migrate-');
  const kvsMigrate = (args: string[]) => runCommand(process.execPath, [KVS_BIN, 'migrate', ...args], { timeoutMs: 30_000 });

  let r = await kvsMigrate(['--data-dir', dir]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /--from: give the etcd endpoints/);

  r = await kvsMigrate(['--from', 'not an endpoint', '--data-dir', dir]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /bad endpoint "not an endpoint"/);

  r = await kvsMigrate(['--from', '127.0.0.1:1', '--data-dir', dir, '--dial-timeout', '500ms']);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /cannot reach etcd at 127\.0\.0\.1:1/);

  // A node's data directory (kvs has served it) is never overwritten.
  const node = await startKvs(t);
  await node.stop();
  r = await kvsMigrate(['--from', etcdNode.endpoint, '--data-dir', node.dataDir]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /holds a kvs WAL|kvs migrate did not make/);

  // A directory that follows another etcd cluster.
  const other = await startEtcd(t);
  const m = startMigrate(t, ['--from', other.endpoint, '--data-dir', dir]);
  await m.waitFor(/^caught up at revision/);
  assert.equal(await m.stop(), 0);
  r = await kvsMigrate(['--from', etcdNode.endpoint, '--data-dir', dir]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /follows etcd cluster [0-9a-f]+, and the endpoints given are cluster [0-9a-f]+/);
});

test('users, roles and auth turned on during the migration (the fence) are followed; passwords come from the snapshot', async (t) => {
  const { etcdNode, etcd } = await freshEtcd(t);
  const auth = (method: string, req: object) => etcd.call('Auth', method, req);
  await auth('UserAdd', { name: 'root', password: 'rootpw' });
  await auth('RoleAdd', { name: 'root' });
  await auth('UserGrantRole', { user: 'root', role: 'root' });
  await auth('UserAdd', { name: 'alice', password: 'alicepw' });
  await auth('RoleAdd', { name: 'app' });
  await auth('RoleGrantPermission', { name: 'app', perm: { permType: 0, key: Buffer.from('/app/'), rangeEnd: Buffer.from('/app0') } });
  await auth('UserGrantRole', { user: 'alice', role: 'app' });
  await put(etcd, '/app/a', '1');

  const dir = await tempDir(t, 'kvs-migrate-');
  const m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir, '--user', 'root:rootpw']);
  await m.waitFor(/^caught up at revision/);
  // During: alice may now write too, bob appears, and writers are fenced by turning auth on.
  await auth('RoleGrantPermission', { name: 'app', perm: { permType: 2, key: Buffer.from('/app/'), rangeEnd: Buffer.from('/app0') } });
  await auth('UserAdd', { name: 'bob', password: 'bobpw' });
  await auth('AuthEnable', {});
  const root = new EtcdClient({ endpoints: [etcdNode.endpoint], user: 'root:rootpw' });
  onCleanup(t, () => root.close());
  await put(root, '/app/b', '2');
  const last = await head(root);
  await m.waitFor(/^user bob was added on etcd after the snapshot/);
  await catchUpAndStop(m, last);
  assert.match(m.lines.at(-1)!, /--auth-enabled \(etcd has auth enabled\)$/);

  const node = await startKvs(t, { dataDir: dir, args: ['--auth-enabled'] });
  const anonymous = clientOf(t, node.endpoint);
  await assert.rejects(anonymous.call('KV', 'Range', { key: Buffer.from('/app/a') }), (err: { details?: string }) => err.details === 'etcdserver: user name is empty');
  const kvsRoot = new EtcdClient({ endpoints: [node.endpoint], user: 'root:rootpw' });
  onCleanup(t, () => kvsRoot.close());
  const alice = new EtcdClient({ endpoints: [node.endpoint], user: 'alice:alicepw' });
  onCleanup(t, () => alice.close());
  await put(alice, '/app/c', '3'); // the permission granted during the migration
  const got = await alice.call('KV', 'Range', { key: Buffer.from('/app/'), rangeEnd: Buffer.from('/app0') });
  assert.deepEqual(got.kvs.map((kv: any) => Buffer.from(kv.value).toString()), ['1', '2', '3']);
  assert.deepEqual((await kvsRoot.call('Auth', 'RoleGet', { role: 'app' })).perm.map((p: any) => p.permType ?? 0), [2]);
  const bob = new EtcdClient({ endpoints: [node.endpoint], user: 'bob:bobpw' });
  onCleanup(t, () => bob.close());
  await assert.rejects(bob.call('KV', 'Range', { key: Buffer.from('/app/a') }), /authentication failed/);
});

test('kvs migrate takes etcdctl\'s TLS flags: a mutual-TLS etcd is followed', async (t) => {
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const client = await ca.client('migrate', 'migrate');
  const etcdNode = await startEtcd(t, [], { tls: { cert: server.cert, key: server.key, clientCa: ca.cert }, probe: ca.clientTls(client) });
  const etcd = new EtcdClient({ endpoints: [`https://${etcdNode.endpoint}`], cacert: ca.cert, cert: client.cert, key: client.key });
  onCleanup(t, () => etcd.close());
  await workload(etcd, 'tls');
  const dir = await tempDir(t, 'kvs-migrate-');
  const m = startMigrate(t, ['--from', `https://${etcdNode.endpoint}`, '--data-dir', dir, '--cacert', ca.cert, '--cert', client.cert, '--key', client.key]);
  await put(etcd, 'tls/more', '1');
  await assertMigrated(t, m, dir, etcd);
});

test('a migrated data directory seeds a new cluster through the object store; nodes that join catch up on its history', async (t) => {
  const { etcdNode, etcd } = await freshEtcd(t, 'seed');
  await etcd.call('KV', 'Compact', { revision: int64(BigInt((await head(etcd)) - 4)) });
  await put(etcd, 'seed/last', '1');
  const last = await head(etcd);
  const dir = await tempDir(t, 'kvs-migrate-');
  const m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir]);
  await catchUpAndStop(m, last);

  // n1 starts on the migrated directory and leads; n2 starts with an empty disk.
  const cluster = await startCluster(t, 2, { dataDir: (id) => (id === 'n1' ? dir : undefined) });
  const later = await cluster.add('n3');
  for (const n of [...cluster.nodes, later]) {
    await assertSameHistory(clientOf(t, n.endpoint), etcd, last);
  }
});

test('kill -9 of kvs migrate while changes stream in: a new run resumes, nothing lost or applied twice', async (t) => {
  const { etcdNode, etcd } = await freshEtcd(t);
  const dir = await tempDir(t, 'kvs-migrate-');
  let m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir]);
  await m.waitFor(/^caught up at revision/);
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing; i++) await put(etcd, `load/k${i % 50}`, `v${i}`);
  })();
  for (let round = 0; round < 3; round++) {
    await m.waitFor(/^(caught up at|revision \d+, etcd at)/);
    m.child.kill('SIGKILL');
    await new Promise((resolve) => m.child.once('exit', resolve));
    m = startMigrate(t, ['--from', etcdNode.endpoint, '--data-dir', dir]);
    await m.waitFor(/^following etcd from revision/);
  }
  writing = false;
  await writer;
  await assertMigrated(t, m, dir, etcd);
});
