// The way out to etcd: `etcdctl snapshot save` against kvs writes etcd 3.4's own snapshot
// format (a bbolt database in etcd's schema, then its SHA-256). etcd's tools are the judges:
// `etcdctl snapshot status` checks the file's integrity (bbolt's tx.Check) and counts it,
// `etcdctl snapshot restore` restores it, and a real etcd 3.4 started on the result must serve
// what kvs serves: the same Range and HashKV at every revision from the compact revision to
// the head, the same compact revision, the leases with their keys, the users and roles with
// auth enabled. Also etcd's four e2e snapshot tests (tests/e2e/ctl_v3_snapshot_test.go,
// ctl_v3_auth_test.go), step by step against kvs, and a property test of the bbolt writer
// alone, judged by `etcdctl snapshot status`.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Crc32c } from '@aws-crypto/crc32c';
import { Etcd3 } from 'etcd3';
import {
  ETCD_BIN, ETCDCTL_BIN, TEST_CALL_OPTIONS, TEST_FAULT_HANDLING, client, etcdctl, onCleanup, pollUntil, runCommand, startKvs, startProcess, tempDir,
  type Ctx, type ServerProcess,
} from '../testkit/harness.js';
import { etcdArgs, freePorts } from '../testkit/loopback.js';
import { encodeRequest } from './differential.js';
import { prng } from '../testkit/prng.js';
import * as grpc from '@grpc/grpc-js';
import { service } from '../shared/proto/index.js';
import { writeBoltFile } from '../shared/bbolt/write.js';
import { etcdRevisionKey } from '../shared/etcd-snapshot/write.js';

interface Creds { user: string; password: string }

const MAINTENANCE = 'etcdserverpb.Maintenance';

function authedClient(t: Ctx, endpoint: string, creds?: Creds): Etcd3 {
  if (!creds) return client(t, endpoint);
  const c = new Etcd3({ hosts: `http://${endpoint}`, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING, auth: { username: creds.user, password: creds.password } });
  onCleanup(t, () => c.close());
  return c;
}

const userArgs = (creds?: Creds) => (creds ? ['--user', `${creds.user}:${creds.password}`] : []);

async function saveSnapshot(endpoint: string, file: string, creds?: Creds): Promise<void> {
  const r = await etcdctl(endpoint, [...userArgs(creds), 'snapshot', 'save', file], { timeoutMs: 120_000 });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.equal(r.stdout, `Snapshot saved at ${file}\n`);
}

interface SnapshotStatus { hash: number; revision: number; totalKey: number; totalSize: number }

async function snapshotStatus(file: string): Promise<SnapshotStatus> {
  const r = await runCommand(ETCDCTL_BIN, ['--write-out', 'json', 'snapshot', 'status', file], { env: { ETCDCTL_API: '3' } });
  assert.equal(r.exitCode, 0, `etcdctl snapshot status: ${r.stderr}`);
  return JSON.parse(r.stdout) as SnapshotStatus;
}

interface RestoredEtcd { endpoint: string; proc: ServerProcess; dataDir: string; name: string; peerUrl: string }

/** `etcdctl snapshot restore` into a new directory, and /usr/bin/etcd started there. */
async function restoreIntoEtcd(t: Ctx, file: string): Promise<RestoredEtcd> {
  const dir = await tempDir(t, 'kvs-export-etcd-');
  const dataDir = path.join(dir, 'data');
  const [clientPort, peerPort] = (await freePorts(2)) as [number, number];
  const name = 'restored';
  const peerUrl = `http://127.0.0.1:${peerPort}`;
  const r = await runCommand(ETCDCTL_BIN, [
    'snapshot', 'restore', file, '--name', name, '--data-dir', dataDir,
    '--initial-cluster', `${name}=${peerUrl}`, '--initial-cluster-token', 'restored-token', '--initial-advertise-peer-urls', peerUrl,
  ], { env: { ETCDCTL_API: '3' }, timeoutMs: 60_000 });
  assert.equal(r.exitCode, 0, `etcdctl snapshot restore: ${r.stderr}`);
  assert.match(r.stderr, /added member/);
  const proc = await startProcess(t, ETCD_BIN, etcdArgs(name, dataDir, clientPort, peerPort));
  const endpoint = `127.0.0.1:${clientPort}`;
  // Maintenance.Status needs no user, also with auth enabled.
  await pollUntil('the restored etcd to answer', async () => ((await etcdctl(endpoint, ['endpoint', 'status'])).exitCode === 0 ? true : undefined), 30_000);
  return { endpoint, proc, dataDir, name, peerUrl };
}

const ALL = { key: Buffer.from([0]), range_end: Buffer.from([0]) };

function plainKvs(kvs: { key: Buffer; value: Buffer; create_revision: string; mod_revision: string; version: string; lease: string }[]) {
  return kvs.map((kv) => ({ key: kv.key.toString('latin1'), value: kv.value.toString('latin1'), create: kv.create_revision, mod: kv.mod_revision, version: kv.version, lease: kv.lease }));
}

async function errorOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (err) {
    return (err as Error).message;
  }
}

type HashKV = (revision: number) => Promise<string>;

/** Maintenance.HashKV over raw gRPC (the etcd3 client has none), as `creds` when given: its hash, or the error's text. */
async function hashKVClient(t: Ctx, endpoint: string, creds?: Creds): Promise<HashKV> {
  const Ctor = grpc.makeGenericClientConstructor(service(MAINTENANCE), MAINTENANCE);
  const c = new Ctor(endpoint, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<string, (m: unknown, md: grpc.Metadata, o: grpc.CallOptions, cb: (err: grpc.ServiceError | null, out: { hash: number }) => void) => void>;
  onCleanup(t, () => c.close());
  const md = new grpc.Metadata();
  if (creds) md.set('token', (await authedClient(t, endpoint).auth.authenticate({ name: creds.user, password: creds.password })).token);
  return (revision) =>
    new Promise((resolve) => {
      c.HashKV!(encodeRequest('HashKV', { revision }, MAINTENANCE), md, { deadline: Date.now() + 30_000 }, (err, out) => resolve(err ? `${err.code} ${err.details}` : String(out.hash)));
    });
}

/** Range and HashKV at every revision from `compact` to `head` are the same on both; below `compact` both refuse. */
async function assertSameHistory(a: Etcd3, b: Etcd3, hashA: HashKV, hashB: HashKV, compact: number, head: number): Promise<void> {
  if (compact > 1) {
    const [ea, eb] = await Promise.all([errorOf(a.kv.range({ ...ALL, revision: compact - 1 })), errorOf(b.kv.range({ ...ALL, revision: compact - 1 }))]);
    assert.match(ea, /compacted/, 'kvs below its compact revision');
    assert.match(eb, /compacted/, 'the restored etcd has the same compact revision');
  }
  for (let rev = Math.max(1, compact); rev <= head; rev++) {
    const [ra, rb] = await Promise.all([a.kv.range({ ...ALL, revision: rev }), b.kv.range({ ...ALL, revision: rev })]);
    assert.deepEqual(plainKvs(rb.kvs as never), plainKvs(ra.kvs as never), `Range at revision ${rev}`);
    assert.equal(rb.count, ra.count, `count at revision ${rev}`);
    const [ha, hb] = await Promise.all([hashA(rev), hashB(rev)]);
    assert.equal(hb, ha, `HashKV at revision ${rev}`);
    if (rev > compact) assert.match(ha, /^\d+$/, `HashKV at revision ${rev} is a hash`);
  }
  const [ta, tb] = await Promise.all([a.kv.range({ ...ALL }), b.kv.range({ ...ALL })]);
  assert.equal(tb.header.revision, ta.header.revision, 'the head revision');
  assert.equal(Number(ta.header.revision), head);
}

/** Every lease with its granted TTL and keys. */
async function leases(c: Etcd3): Promise<{ id: string; granted: string; keys: string[] }[]> {
  const { leases: ls } = await c.leaseClient.leaseLeases({});
  const out = [];
  for (const { ID } of ls) {
    const ttl = await c.leaseClient.leaseTimeToLive({ ID, keys: true });
    out.push({ id: String(ID), granted: String(ttl.grantedTTL), keys: ttl.keys.map((k) => Buffer.from(k).toString('latin1')).sort() });
  }
  return out.sort((x, y) => (x.id < y.id ? -1 : 1));
}

/** Entries of the `key` bucket a snapshot at `head` holds: the keys live at `compact`, and every change after it. */
async function keyBucketEntries(c: Etcd3, compact: number, head: number): Promise<number> {
  const live = compact > 0 ? Number((await c.kv.range({ ...ALL, revision: compact, count_only: true })).count) : 0;
  if (head <= compact) return live;
  const w = await c.watch().prefix('').startRevision(String(compact + 1)).create();
  let events = 0;
  await new Promise<void>((resolve) => {
    w.on('data', (res) => {
      events += res.events.length;
      if (res.events.length && Number(res.events[res.events.length - 1]!.kv!.mod_revision) >= head) resolve();
    });
  });
  await w.cancel();
  return live + events;
}

interface Expect { compact: number; head: number; creds?: Creds }

/** Snapshot of `endpoint`, status, restore, etcd on it: everything kvs serves, etcd serves. */
async function exportAndCompare(t: Ctx, endpoint: string, e: Expect): Promise<{ status: SnapshotStatus; etcd: RestoredEtcd }> {
  const kvs = authedClient(t, endpoint, e.creds);
  const dir = await tempDir(t, 'kvs-export-');
  const file = path.join(dir, 'snap.db');
  await saveSnapshot(endpoint, file, e.creds);
  const bytes = readFileSync(file);
  assert.equal(bytes.length % 512, 32, 'the database is whole pages and the SHA-256 follows (etcd tells them apart by size)');
  assert.deepEqual(createHash('sha256').update(bytes.subarray(0, -32)).digest(), bytes.subarray(-32));

  const status = await snapshotStatus(file);
  assert.equal(status.revision, e.head, 'snapshot status: the revision');
  const roles = e.creds ? (await kvs.getRoles()).length : 0;
  const users = e.creds ? (await kvs.getUsers()).length : 0;
  const leaseCount = (await kvs.leaseClient.leaseLeases({})).leases.length;
  // key + auth (enabled flag, revision) + roles + users + cluster version + leases + meta
  // (consistent index, and the finished and scheduled compaction once compacted)
  const expected = (await keyBucketEntries(kvs, e.compact, e.head)) + 2 + roles + users + 1 + leaseCount + 1 + (e.compact > 0 ? 2 : 0);
  assert.equal(status.totalKey, expected, 'snapshot status: entries in all buckets');
  assert.equal(status.totalSize, bytes.length - 32);

  const etcd = await restoreIntoEtcd(t, file);
  const restored = authedClient(t, etcd.endpoint, e.creds);
  await assertSameHistory(kvs, restored, await hashKVClient(t, endpoint, e.creds), await hashKVClient(t, etcd.endpoint, e.creds), e.compact, e.head);
  assert.deepEqual(await leases(restored), await leases(kvs), 'leases, their TTLs and keys');
  return { status, etcd };
}

test('etcd restored from a kvs snapshot serves its history, compaction, leases and users with auth on', async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  // Enough history for a key bucket of three levels (many leaves, more than one branch page),
  // a value larger than a page (overflow pages), overwrites, deletions, Txns.
  for (let i = 0; i < 400; i++) await c.put(`key/${String(i).padStart(3, '0')}`).value(`${i}:`.padEnd(1000, 'v'));
  await c.put('big').value(Buffer.alloc(100_000, 'b'));
  for (let i = 0; i < 400; i += 4) await c.put(`key/${String(i).padStart(3, '0')}`).value(`again ${i}`);
  await c.delete().key('key/007');
  await c.kv.deleteRange({ key: Buffer.from('key/100'), range_end: Buffer.from('key/120') });
  await c.if('key/000', 'Value', '==', 'again 0').then(c.put('txn/a').value('A'), c.put('txn/b').value('B'), c.delete().key('key/004')).else(c.put('txn/else').value('no')).commit();
  const lease = await c.lease(600, { autoKeepAlive: false }).grant();
  await c.put('leased/1').value('x').lease(lease);
  await c.put('leased/2').value('y').lease(lease);
  const empty = c.lease(300, { autoKeepAlive: false });
  await empty.grant();
  const revoked = c.lease(60, { autoKeepAlive: false });
  await c.put('leased/gone').value('z').lease(await revoked.grant());
  await revoked.revoke();
  let head = Number((await c.get('key/000').exec()).header.revision);
  const compact = head - 40;
  await c.kv.compact({ revision: compact, physical: true });
  for (let i = 0; i < 30; i++) await c.put(`late/${i % 7}`).value(`late ${i}`);
  await c.delete().key('late/3');

  // Users and roles, then auth on.
  const ctl = (args: string[], input?: string) => etcdctl(node.endpoint, args, input === undefined ? {} : { input });
  for (const args of [['user', 'add', 'root', '--interactive=false'], ['user', 'add', 'alice', '--interactive=false']]) {
    assert.equal((await ctl(args, 'pw-' + args[2] + '\n')).exitCode, 0);
  }
  assert.equal((await ctl(['role', 'add', 'reader'])).exitCode, 0);
  assert.equal((await ctl(['role', 'grant-permission', 'reader', '--prefix=true', 'read', 'key/'])).exitCode, 0);
  assert.equal((await ctl(['user', 'grant-role', 'alice', 'reader'])).exitCode, 0);
  assert.equal((await ctl(['user', 'grant-role', 'root', 'root'])).exitCode, 0);
  assert.equal((await ctl(['auth', 'enable'])).stdout, 'Authentication Enabled\n');
  const root = { user: 'root', password: 'pw-root' };
  head = Number((await authedClient(t, node.endpoint, root).get('key/000').exec()).header.revision);

  const { etcd } = await exportAndCompare(t, node.endpoint, { compact, head, creds: root });

  // Auth on the restored etcd: enabled, the same users, roles and passwords.
  const anon = await etcdctl(etcd.endpoint, ['get', 'key/001']);
  assert.match(anon.stderr, /user name is empty/);
  const alice = await etcdctl(etcd.endpoint, ['--user', 'alice:pw-alice', 'get', 'key/001', '--print-value-only']);
  assert.equal(alice.stdout, `${'1:'.padEnd(1000, 'v')}\n`);
  assert.match((await etcdctl(etcd.endpoint, ['--user', 'alice:pw-alice', 'put', 'key/001', 'no'])).stderr, /permission denied/);
  assert.match((await etcdctl(etcd.endpoint, ['--user', 'alice:wrong', 'get', 'key/001'])).stderr, /authentication failed/);
  for (const args of [['user', 'list'], ['role', 'list'], ['role', 'get', 'reader'], ['user', 'get', 'alice']]) {
    const [a, b] = await Promise.all([etcdctl(node.endpoint, [...userArgs(root), ...args]), etcdctl(etcd.endpoint, [...userArgs(root), ...args])]);
    assert.equal(b.stdout, a.stdout, args.join(' '));
  }
  // The restored etcd goes on from there: writes continue the revisions.
  const put = await etcdctl(etcd.endpoint, [...userArgs(root), 'put', 'after', 'restore', '-w', 'json']);
  assert.equal(JSON.parse(put.stdout).header.revision, head + 1);
});

test('random histories: etcd restored from kvs snapshots serves the same revisions (property, 3 seeds)', async (t) => {
  for (const seed of [1, 2, 3]) {
    await t.test(`seed ${seed}`, async (st) => {
      const node = await startKvs(st);
      const c = client(st, node.endpoint);
      const rnd = prng(seed);
      const pick = (n: number) => Math.floor(rnd() * n);
      const key = () => `k/${pick(30).toString().padStart(2, '0')}`;
      const value = () => Buffer.alloc([0, 1, 10, 300, 2000, 5000][pick(6)]!, 97 + pick(26));
      const leaseIds: string[] = [];
      let compact = 0;
      for (let i = 0; i < 160; i++) {
        const op = pick(100);
        if (op < 50) await c.put(key()).value(value());
        else if (op < 60) await c.delete().key(key());
        else if (op < 65) await c.kv.deleteRange({ key: Buffer.from('k/1'), range_end: Buffer.from('k/2') });
        else if (op < 75) await c.if(key(), 'Version', '>', 0).then(c.put(key()).value(value()), c.put(key() + '/t').value(value())).else(c.delete().key(key())).commit();
        else if (op < 85) {
          const l = c.lease(100 + pick(1000), { autoKeepAlive: false });
          const id = await l.grant();
          leaseIds.push(id);
          await c.put(`lease/${id}/${pick(3)}`).value('l').lease(id);
        } else if (op < 90 && leaseIds.length) {
          await c.leaseClient.leaseRevoke({ ID: leaseIds.splice(pick(leaseIds.length), 1)[0]! });
        } else if (op < 93) {
          const headNow = Number((await c.get('x').exec()).header.revision);
          if (headNow > compact + 2) {
            compact = compact + 1 + pick(headNow - compact - 1);
            await c.kv.compact({ revision: compact, physical: true });
          }
        } else await c.put(key()).value(value()).lease(leaseIds.length ? leaseIds[pick(leaseIds.length)]! : '0');
      }
      const head = Number((await c.get('x').exec()).header.revision);
      await exportAndCompare(st, node.endpoint, { compact, head });
    });
  }
});

test('a snapshot taken under write load is one revision: etcd restored from it serves kvs at that revision', async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  for (let i = 0; i < 300; i++) await c.put(`k/${i % 100}`).value(Buffer.alloc(2000, 97 + (i % 26)));
  let writing = true;
  let started!: () => void;
  const someWritten = new Promise<void>((resolve) => (started = resolve));
  const writer = (async () => {
    for (let i = 0; writing; i++) {
      if (i % 5 === 4) await c.delete().key(`busy/${(i * 7) % 40}`);
      else await c.put(`busy/${i % 40}`).value(`busy ${i}`);
      if (i === 10) started();
    }
  })();
  const file = path.join(await tempDir(t, 'kvs-export-'), 'busy.db');
  await someWritten;
  await saveSnapshot(node.endpoint, file);
  writing = false;
  await writer;
  const { revision } = await snapshotStatus(file);
  assert.ok(revision > 301, `writes landed before the snapshot (${revision})`);
  const etcd = await restoreIntoEtcd(t, file);
  const restored = client(t, etcd.endpoint);
  const [a, b] = await Promise.all([c.kv.range({ ...ALL, revision }), restored.kv.range({ ...ALL })]);
  assert.deepEqual(plainKvs(b.kvs as never), plainKvs(a.kvs as never), 'etcd serves what kvs served at the snapshot revision');
  assert.equal(Number(b.header.revision), revision);
  const [ha, hb] = await Promise.all([(await hashKVClient(t, node.endpoint))(revision), (await hashKVClient(t, etcd.endpoint))(revision)]);
  assert.equal(hb, ha);
});

// ---- etcd's e2e snapshot tests, step by step against kvs ---------------------------------

async function e2eStatus(file: string): Promise<SnapshotStatus> {
  const s = await snapshotStatus(file);
  assert.ok(typeof s.hash === 'number' && s.hash > 0, 'status prints a hash');
  return s;
}

test('etcd e2e TestCtlV3Snapshot against kvs', async (t) => {
  const node = await startKvs(t);
  for (const v of ['val1', 'val2', 'val3']) assert.equal((await etcdctl(node.endpoint, ['put', 'key', v])).stdout, 'OK\n');
  const grant = await etcdctl(node.endpoint, ['lease', 'grant', '100']);
  const leaseId = /lease ([0-9a-f]+) granted/.exec(grant.stdout)?.[1];
  assert.ok(leaseId, grant.stdout);
  assert.equal((await etcdctl(node.endpoint, ['put', 'withlease', 'withlease', '--lease', leaseId])).stdout, 'OK\n');
  const file = path.join(await tempDir(t, 'kvs-e2e-'), 'test1.snapshot');
  await saveSnapshot(node.endpoint, file);
  const st = await e2eStatus(file);
  assert.equal(st.revision, 5);
  assert.ok(st.totalKey >= 4, `at least 4 keys, got ${st.totalKey}`);
});

test('etcd e2e TestCtlV3SnapshotStatusBeforeRestore against kvs', async (t) => {
  const node = await startKvs(t);
  const dir = await tempDir(t, 'kvs-e2e-');
  const file = path.join(dir, 'test3.snapshot');
  await saveSnapshot(node.endpoint, file);
  await e2eStatus(file);
  const r = await runCommand(ETCDCTL_BIN, ['snapshot', 'restore', '--data-dir', path.join(dir, 'snap.etcd'), file], { env: { ETCDCTL_API: '3' } });
  assert.equal(r.exitCode, 0, r.stderr);
  assert.match(r.stderr, /added member/);
});

test('etcd e2e TestCtlV3AuthSnapshot against kvs', async (t) => {
  const node = await startKvs(t);
  const ctl = (args: string[], creds?: Creds, input?: string) => etcdctl(node.endpoint, [...userArgs(creds), ...args], input === undefined ? {} : { input });
  for (const v of ['val1', 'val2', 'val3']) assert.equal((await ctl(['put', 'key', v])).stdout, 'OK\n');
  // authEnable
  assert.match((await ctl(['user', 'add', 'root', '--interactive=false'], undefined, 'root\n')).stdout, /User root created/);
  assert.match((await ctl(['user', 'grant-role', 'root', 'root'])).stdout, /Role root is granted to user root/);
  assert.match((await ctl(['auth', 'enable'])).stdout, /Authentication Enabled/);
  // authSetupTestUser
  const root = { user: 'root', password: 'root' };
  assert.match((await ctl(['user', 'add', 'test-user', '--interactive=false'], root, 'pass\n')).stdout, /User test-user created/);
  assert.match((await ctl(['role', 'add', 'test-role'], root)).stdout, /Role test-role created/);
  assert.match((await ctl(['user', 'grant-role', 'test-user', 'test-role'], root)).stdout, /Role test-role is granted to user test-user/);
  assert.match((await ctl(['role', 'grant-permission', 'test-role', 'readwrite', 'foo'], root)).stdout, /Role test-role updated/);
  const file = path.join(await tempDir(t, 'kvs-e2e-'), 'test-auth.snapshot');
  // An ordinary user cannot save a snapshot.
  const denied = await ctl(['snapshot', 'save', file], { user: 'test-user', password: 'pass' });
  assert.notEqual(denied.exitCode, 0);
  assert.doesNotMatch(denied.stdout, /Snapshot saved/);
  await saveSnapshot(node.endpoint, file, root);
  const st = await e2eStatus(file);
  assert.equal(st.revision, 4);
  assert.ok(st.totalKey >= 3, `at least 3 keys, got ${st.totalKey}`);
});

test('etcd e2e TestIssue6361 against kvs: restore, then a second member joins', async (t) => {
  const node = await startKvs(t);
  const kvs = [['foo1', 'val1'], ['foo2', 'val2'], ['foo3', 'val3']] as const;
  for (const [k, v] of kvs) assert.equal((await etcdctl(node.endpoint, ['put', k, v])).stdout, 'OK\n');
  const file = path.join(await tempDir(t, 'kvs-e2e-'), 'test.snapshot');
  await saveSnapshot(node.endpoint, file);
  await node.stop();
  const etcd = await restoreIntoEtcd(t, file);
  for (const [k, v] of kvs) assert.equal((await etcdctl(etcd.endpoint, ['get', k, '--print-value-only'])).stdout, `${v}\n`);

  const [clientPort, peerPort] = (await freePorts(2)) as [number, number];
  const peerUrl = `http://127.0.0.1:${peerPort}`;
  const added = await etcdctl(etcd.endpoint, ['member', 'add', 'newmember', `--peer-urls=${peerUrl}`]);
  assert.match(added.stdout, / added to cluster /, added.stderr);
  const dir2 = path.join(await tempDir(t, 'kvs-e2e-second-'), 'data');
  const clientUrl = `http://127.0.0.1:${clientPort}`;
  const second = await startProcess(t, ETCD_BIN, [
    '--name', 'newmember', '--listen-client-urls', clientUrl, '--advertise-client-urls', clientUrl,
    '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
    '--initial-cluster', `${etcd.name}=${etcd.peerUrl},newmember=${peerUrl}`, '--initial-cluster-state', 'existing', '--data-dir', dir2,
  ]);
  await pollUntil('the second member to announce its capabilities', async () => (/enabled capabilities for version/.test(second.output()) ? true : undefined), 30_000);
  for (const [k, v] of kvs) {
    const got = await pollUntil(`${k} on the new member`, async () => {
      const r = await etcdctl(`127.0.0.1:${clientPort}`, ['get', k, '--print-value-only']);
      return r.exitCode === 0 ? r.stdout : undefined;
    }, 30_000);
    assert.equal(got, `${v}\n`);
  }
});

// ---- Maintenance.Snapshot under a client that goes away ------------------------------------

test('a client that cancels a snapshot mid-stream leaves the node serving and no file behind', async (t) => {
  const node = await startKvs(t);
  const c = client(t, node.endpoint);
  for (let i = 0; i < 200; i++) await c.put(`k/${i}`).value(Buffer.alloc(4000, 'x'));
  const stream = (await c.maintenance.snapshot()) as unknown as import('node:events').EventEmitter & { cancel(): void };
  await new Promise<void>((resolve, reject) => {
    stream.once('data', () => resolve());
    stream.once('error', reject);
  });
  stream.on('error', () => {}); // the cancellation's own CANCELLED
  stream.cancel();
  // The stream's end on the server side is not an event this client sees; the temp dir empties once it is handled.
  await pollUntil('the snapshot copy to be removed', async () => {
    const tmp = path.join(node.dataDir, 'tmp');
    return !existsSync(tmp) || readdirSync(tmp).length === 0 ? true : undefined;
  }, 20_000);
  assert.equal((await etcdctl(node.endpoint, ['put', 'still', 'up'])).stdout, 'OK\n');
  const file = path.join(await tempDir(t, 'kvs-export-'), 'after.db');
  await saveSnapshot(node.endpoint, file);
  assert.equal((await snapshotStatus(file)).revision, 202);
  // The thread that wrote it writes the next one, from a fresh read snapshot.
  assert.equal((await etcdctl(node.endpoint, ['put', 'later', 'too'])).stdout, 'OK\n');
  await saveSnapshot(node.endpoint, file);
  assert.equal((await snapshotStatus(file)).revision, 203);
});

// ---- the bbolt writer alone, judged by etcdctl ----------------------------------------------

test('bbolt files of random buckets pass etcdctl snapshot status with the expected hash and count (property)', async (t) => {
  const dir = await tempDir(t, 'kvs-bbolt-');
  for (const seed of [11, 12, 13, 14, 15]) {
    const rnd = prng(seed);
    const pick = (n: number) => Math.floor(rnd() * n);
    const names = new Set<string>(['key']);
    while (names.size < 1 + pick(8)) names.add(`b${pick(1000)}`);
    const buckets = [...names].sort().map((name) => {
      // Empty, inline, one leaf, many leaves (a branch level or two), and values from nothing to several pages.
      const n = [0, 1, 5, 60, 3000, 20_000][pick(6)]!;
      const keys = new Map<string, Buffer>();
      if (name === 'key') {
        for (let i = 0; i < n; i++) keys.set(etcdRevisionKey(i + 1, pick(3), pick(5) === 0).toString('latin1'), Buffer.alloc(pick(3) === 0 ? pick(9000) : pick(200), 65 + (i % 26)));
      } else {
        for (let i = 0; i < n; i++) keys.set(Buffer.from(`${pick(1e9)}`.repeat(1 + pick(20))).toString('latin1'), Buffer.alloc([0, 3, 100, 1500, 4090, 12_000][pick(6)]!, i & 0xff));
      }
      const entries = [...keys].map(([k, v]) => [Buffer.from(k, 'latin1'), v] as const).sort((a, b) => Buffer.compare(a[0], b[0]));
      return { name: Buffer.from(name), entries };
    });
    const file = path.join(dir, `seed-${seed}.db`);
    writeFileSync(file, writeBoltFile(buckets));
    const h = new Crc32c();
    let total = 0;
    let revision = 0;
    for (const b of buckets) {
      h.update(b.name);
      for (const [k, v] of b.entries) {
        h.update(k);
        h.update(v);
        total++;
        if (b.name.toString() === 'key') revision = Number(k.readBigInt64BE(0));
      }
    }
    const st = await snapshotStatus(file);
    assert.deepEqual({ hash: st.hash, totalKey: st.totalKey, revision: st.revision }, { hash: h.digest(), totalKey: total, revision }, `seed ${seed}`);
  }
});
