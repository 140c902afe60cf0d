// The way in from etcd: `kvs snapshot restore` of a snapshot a real etcd 3.4 wrote (`etcdctl
// snapshot save`, and a stopped etcd's member/snap/db), and a kvs node started on the result
// answering as that etcd does: every revision from the compaction to the head, ErrCompacted
// below it, a watch from below it cancelled, HashKV, leases and their keys, users, roles and
// auth on, and the next write's revision.
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Etcd3 } from 'etcd3';
import { execa } from 'execa';
import { KVS_BIN, REPO_ROOT, TEST_CALL_OPTIONS, TEST_FAULT_HANDLING, etcdctl, onCleanup, startEtcd, startKvs, tempDir, type Ctx, type CmdResult } from '../testkit/harness.js';
import { READER, ROOT_PASSWORD, writeEtcdHistory, type EtcdHistory } from './etcd-history-fixture.js';
import { fileSink, writeEtcdFixture, type EtcdFixture } from '../testkit/etcd-fixture.js';
import { openSync, closeSync } from 'node:fs';

const ROOT = ['--user', `root:${ROOT_PASSWORD}`];

async function kvsCli(args: string[]): Promise<CmdResult> {
  const r = await execa(process.execPath, [KVS_BIN, ...args], { reject: false, cwd: REPO_ROOT, timeout: 120_000 });
  return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode ?? 1, timedOut: r.timedOut };
}

function rootClient(t: Ctx, endpoint: string): Etcd3 {
  const c = new Etcd3({
    hosts: `http://${endpoint}`,
    auth: { username: 'root', password: ROOT_PASSWORD },
    defaultCallOptions: TEST_CALL_OPTIONS,
    faultHandling: TEST_FAULT_HANDLING,
  });
  onCleanup(t, () => c.close());
  return c;
}

/** A call's answer without the header (ids and raft term differ), or its error's message. */
async function answer(p: Promise<{ header?: unknown }>): Promise<unknown> {
  try {
    const { header: _, ...rest } = await p;
    return rest;
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** Range over every key, and HashKV, at each revision from `from` to `to`. */
async function revisions(c: Etcd3, from: number, to: number): Promise<Map<number, unknown>> {
  const out = new Map<number, unknown>();
  for (let rev = from; rev <= to; rev++) {
    const range = await answer(c.kv.range({ key: Buffer.from([0]), range_end: Buffer.from([0]), revision: rev }));
    const hash = await answer(c.maintenance.hashKV({ revision: rev }));
    out.set(rev, { range, hash });
  }
  return out;
}

function assertSameRevisions(got: Map<number, unknown>, want: Map<number, unknown>, what: string): void {
  assert.deepEqual([...got.keys()], [...want.keys()]);
  for (const [rev, w] of want) assert.deepEqual(got.get(rev), w, `${what}: Range and HashKV at revision ${rev}`);
}

/** What etcdctl prints for `args` on both servers; stderr lines without their timestamps. */
async function both(a: string, b: string, args: string[], sortLines = false): Promise<[string, string]> {
  const norm = (r: CmdResult) => {
    const text = `${r.exitCode}\n${r.stdout}\n${r.stderr.replace(/^\{"level".*$/gm, '').replace(/^.*(Error|error)/m, '$1')}`;
    return sortLines ? text.split('\n').sort().join('\n') : text;
  };
  const [x, y] = await Promise.all([etcdctl(a, args), etcdctl(b, args)]);
  return [norm(x), norm(y)];
}

async function assertLeasesMatch(kvs: string, etcd: string, history: EtcdHistory): Promise<void> {
  const [x, y] = await both(kvs, etcd, [...ROOT, 'lease', 'list'], true);
  assert.equal(x, y, 'lease list');
  for (const [id, ttl] of history.leases) {
    const hex = BigInt(id).toString(16);
    const read = async (ep: string) => {
      const r = await etcdctl(ep, [...ROOT, 'lease', 'timetolive', hex, '--keys', '-w', 'json']);
      assert.equal(r.exitCode, 0, r.stderr);
      return JSON.parse(r.stdout) as { 'granted-ttl': number; ttl: number; keys?: string[] };
    };
    const [k, e] = await Promise.all([read(kvs), read(etcd)]);
    assert.equal(k['granted-ttl'], ttl, `lease ${hex}'s granted TTL`);
    assert.equal(k['granted-ttl'], e['granted-ttl']);
    // etcd's restore gives every lease its full TTL again; so does kvs's.
    assert.ok(k.ttl > 0 && k.ttl <= ttl, `lease ${hex}: remaining TTL ${k.ttl}`);
    assert.deepEqual((k.keys ?? []).map((b) => Buffer.from(b, 'base64').toString()).sort(), (e.keys ?? []).map((b) => Buffer.from(b, 'base64').toString()).sort(), `lease ${hex}'s keys`);
  }
}

async function assertAuthMatches(kvs: string, etcd: string): Promise<void> {
  for (const args of [
    ['get', 'k/005'],
    ['--user', `${READER.name}:${READER.password}`, 'get', 'k/005'],
    ['--user', `${READER.name}:${READER.password}`, 'get', 'lease/a1'],
    ['--user', `${READER.name}:wrong`, 'get', 'k/005'],
    [...ROOT, 'user', 'list'],
    [...ROOT, 'role', 'list'],
    [...ROOT, 'user', 'get', READER.name],
    [...ROOT, 'role', 'get', 'readers'],
    [...ROOT, 'role', 'get', 'root'],
  ]) {
    const [x, y] = await both(kvs, etcd, args);
    assert.equal(x, y, `etcdctl ${args.join(' ')}`);
  }
  const denied = await etcdctl(kvs, ['--user', `${READER.name}:${READER.password}`, 'put', 'k/005', 'x']);
  assert.match(denied.stderr, /permission denied/);
}

test('an etcd 3.4 snapshot restores into kvs with its history, leases and auth', async (t) => {
  const etcd = await startEtcd(t);
  const history = await writeEtcdHistory(t, etcd.endpoint);
  const dir = await tempDir(t, 'kvs-etcd-import-');
  const file = path.join(dir, 'etcd.db');
  const saved = await etcdctl(etcd.endpoint, [...ROOT, 'snapshot', 'save', file], { timeoutMs: 60_000 });
  assert.equal(saved.exitCode, 0, saved.stderr);

  const dataDir = path.join(dir, 'restored');
  const restored = await kvsCli(['snapshot', 'restore', file, '--data-dir', dataDir]);
  assert.equal(restored.exitCode, 0, restored.stderr);
  assert.match(restored.stdout, new RegExp(`^restored etcd snapshot .* revision ${history.head}, compacted at ${history.compact}, \\d+ keys, 3 leases, 2 users, 2 roles, auth enabled\\n`));
  assert.match(restored.stdout, /--auth-enabled/);

  const node = await startKvs(t, { dataDir, args: ['--auth-enabled'] });
  const k = rootClient(t, node.endpoint);
  const e = rootClient(t, etcd.endpoint);
  // Every revision etcd still serves, and the one below, which both refuse as compacted.
  const want = await revisions(e, history.compact - 1, history.head);
  assertSameRevisions(await revisions(k, history.compact - 1, history.head), want, 'snapshot save');
  assert.match(JSON.stringify(want.get(history.compact - 1)), /required revision has been compacted/);
  assert.equal((await k.kv.range({ key: Buffer.from('k/003') })).kvs[0]!.value.toString(), 'at the compaction');

  // A watch from below the compaction is cancelled, as on etcd.
  const watch = [...ROOT, 'watch', '--rev', String(history.compact - 1), 'k/003'];
  const [wk, we] = await both(node.endpoint, etcd.endpoint, watch);
  assert.equal(wk, we, 'watch from below the compaction');
  assert.match(wk, /compacted/);

  await assertLeasesMatch(node.endpoint, etcd.endpoint, history);
  await assertAuthMatches(node.endpoint, etcd.endpoint);

  // The next write gets etcd's next revision, on both.
  const [pk, pe] = await Promise.all([k.put('after/restore').value('yes'), e.put('after/restore').value('yes')]);
  assert.equal(Number(pk.header.revision), history.head + 1);
  assert.equal(Number(pe.header.revision), history.head + 1);

  // A stopped etcd's member/snap/db (no SHA-256 trailer): etcd's state after that put.
  const wantAfter = await revisions(e, history.compact, history.head + 1);
  await etcd.stop();
  const copied = path.join(dir, 'member-db');
  copyFileSync(path.join(etcd.dataDir, 'member', 'snap', 'db'), copied);
  const refused = await kvsCli(['snapshot', 'restore', copied, '--data-dir', path.join(dir, 'copied')]);
  assert.equal(refused.exitCode, 2);
  assert.match(refused.stderr, /snapshot missing hash but --skip-hash-check=false/);
  assert.equal(existsSync(path.join(dir, 'copied')), false, 'a refused restore leaves no data directory');
  const fromCopy = await kvsCli(['snapshot', 'restore', copied, '--skip-hash-check', '--data-dir', path.join(dir, 'copied')]);
  assert.equal(fromCopy.exitCode, 0, fromCopy.stderr);
  const node2 = await startKvs(t, { dataDir: path.join(dir, 'copied'), args: ['--auth-enabled'] });
  assertSameRevisions(await revisions(rootClient(t, node2.endpoint), history.compact, history.head + 1), wantAfter, 'member/snap/db');
});

test('snapshot restore refuses a damaged etcd snapshot and writes nothing', async (t) => {
  const etcd = await startEtcd(t);
  const c = new Etcd3({ hosts: `http://${etcd.endpoint}`, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING });
  onCleanup(t, () => c.close());
  for (let i = 0; i < 400; i++) await c.put(`key/${String(i).padStart(4, '0')}`).value('v'.repeat(100));
  const dir = await tempDir(t, 'kvs-etcd-bad-');
  const file = path.join(dir, 'good.db');
  assert.equal((await etcdctl(etcd.endpoint, ['snapshot', 'save', file])).exitCode, 0);
  const bytes = readFileSync(file);
  const db = bytes.subarray(0, bytes.length - 32);
  const pageSize = db.readUInt32LE(24);

  const cases: [string, Buffer, RegExp][] = [];
  const mutate = (name: string, re: RegExp, f: (b: Buffer) => void) => {
    const b = Buffer.from(db);
    f(b);
    cases.push([name, b, re]);
  };
  cases.push(['truncated', db.subarray(0, db.length - 3 * pageSize), /the file is truncated: its meta page says the database has \d+ pages/]);
  mutate('wrong magic', /neither a kvs snapshot \(an LMDB database\) nor an etcd snapshot \(a bbolt database\)/, (b) => {
    b.writeUInt32LE(0x12345678, 16);
  });
  mutate('both meta pages damaged', /not a bbolt database: meta page 0 fails its checksum .*meta page 1 fails its checksum/, (b) => {
    b[16 + 44] ^= 0x01;
    b[pageSize + 16 + 44] ^= 0x01;
  });
  // The root page of the `key` bucket (a branch: 400 keys fill several leaves), found by hand:
  // the newer meta page's root bucket is a leaf page listing the buckets.
  const metaAt = db.readBigUInt64LE(16 + 48) >= db.readBigUInt64LE(pageSize + 16 + 48) ? 16 : pageSize + 16;
  const rootPage = Number(db.readBigUInt64LE(metaAt + 16));
  let branch = -1;
  const root = rootPage * pageSize;
  for (let i = 0; i < db.readUInt16LE(root + 10); i++) {
    const el = root + 16 + i * 16;
    const kAt = el + db.readUInt32LE(el + 4);
    if (db.subarray(kAt, kAt + db.readUInt32LE(el + 8)).toString() === 'key') branch = Number(db.readBigUInt64LE(kAt + 3));
  }
  assert.equal(db.readUInt16LE(branch * pageSize + 8), 0x01, 'the key bucket has a branch page at its root');
  mutate('a page pointing outside the file', /points to page \d+, outside the database/, (b) => {
    b.writeBigUInt64LE(10_000_000n, branch * pageSize + 16 + 8);
  });
  mutate('a cycle in the tree', /reaches page \d+ twice|loop/, (b) => {
    b.writeBigUInt64LE(BigInt(branch), branch * pageSize + 16 + 8);
  });
  mutate('a page of another kind in the tree', /points to page 1, a meta page/, (b) => {
    b.writeBigUInt64LE(1n, branch * pageSize + 16 + 16 + 8);
  });

  // With its SHA-256 trailer: a flipped byte deep in the file is reported as the hash mismatch,
  // also when the reader would have read the file through.
  const flipped = Buffer.from(bytes);
  flipped[bytes.length - 32 - 5000] ^= 0x01;
  const corrupt = path.join(dir, 'corrupt.db');
  writeFileSync(corrupt, flipped);
  const rc = await kvsCli(['snapshot', 'restore', corrupt, '--data-dir', path.join(dir, 'corrupt-restored')]);
  assert.equal(rc.exitCode, 2, rc.stdout);
  assert.match(rc.stderr, /^kvs: snapshot .*corrupt\.db is corrupt: expected sha256 [0-9a-f]{64}, got [0-9a-f]{64}$/);
  assert.equal(existsSync(path.join(dir, 'corrupt-restored')), false);

  for (const [name, b, re] of cases) {
    const f = path.join(dir, name.replace(/ /g, '-'));
    writeFileSync(f, b);
    const target = path.join(dir, `${name.replace(/ /g, '-')}-restored`);
    const r = await kvsCli(['snapshot', 'restore', f, '--skip-hash-check', '--data-dir', target]);
    assert.equal(r.exitCode, 2, `${name}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, re, name);
    assert.doesNotMatch(r.stderr, /at .*\.js:\d+/, `${name}: a message, not a stack`);
    assert.ok(!existsSync(target) || readdirSync(target).length === 0, `${name}: nothing written`);
  }
});

test('an interrupted etcd compaction is finished by kvs: the same answers as after a finished one', async (t) => {
  const dir = await tempDir(t, 'kvs-etcd-interrupted-');
  const base: EtcdFixture = { keys: 200, revisions: 3, valueBytes: 40, compact: 450 };
  const restoreFixture = async (name: string, f: EtcdFixture) => {
    const file = path.join(dir, `${name}.db`);
    const fd = openSync(file, 'w');
    try {
      writeEtcdFixture(fileSink(fd), f);
    } finally {
      closeSync(fd);
    }
    const r = await kvsCli(['snapshot', 'restore', file, '--skip-hash-check', '--data-dir', path.join(dir, name)]);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /revision 601, compacted at 450, 200 keys/);
    return startKvs(t, { dataDir: path.join(dir, name) });
  };
  // The same history; in one, etcd's compaction to 450 stopped at 250 (versions superseded in
  // (250, 450] still stored), which kvs finishes as it starts.
  const [done, interrupted] = await Promise.all([restoreFixture('done', base), restoreFixture('interrupted', { ...base, compactFinished: 250 })]);
  const plain = (endpoint: string) => {
    const c = new Etcd3({ hosts: `http://${endpoint}`, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING });
    onCleanup(t, () => c.close());
    return c;
  };
  const want = await revisions(plain(done.endpoint), 449, 601);
  assertSameRevisions(await revisions(plain(interrupted.endpoint), 449, 601), want, 'interrupted compaction');
  assert.match(JSON.stringify(want.get(449)), /required revision has been compacted/);
});
