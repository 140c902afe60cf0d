// Snapshots and hashes between kvs nodes: `etcdctl snapshot save` from a node under write
// load, `kvs snapshot restore` into a new data directory, and a node started there serves
// every key at the snapshot's revision. Two nodes given the same history have the same
// HashKV and Hash, also after one of them was killed and replayed its WAL.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { execa } from 'execa';
import { KVS_BIN, REPO_ROOT, client, etcdctl, startKvs, tempDir, type CmdResult } from '../testkit/harness.js';
import { Differ, Endpoint, encodeRequest, type Outcome } from './differential.js';
import { prng } from '../testkit/prng.js';

const MAINTENANCE = 'etcdserverpb.Maintenance';

async function kvsCli(args: string[]): Promise<CmdResult> {
  const r = await execa(process.execPath, [KVS_BIN, ...args], { reject: false, cwd: REPO_ROOT, timeout: 60_000 });
  return { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode ?? 1, timedOut: r.timedOut };
}

function ok(o: Outcome) {
  if ('error' in o) assert.fail(`${o.error.code} ${o.error.details}`);
  return o.ok;
}

/** Every key of the node at `endpoint` at `rev` (0: current), as etcdctl's JSON prints them. */
async function allKeys(endpoint: string, rev = 0): Promise<{ header: { revision: number }; kvs?: unknown[] }> {
  const r = await etcdctl(endpoint, ['get', '', '--from-key', '-w', 'json', ...(rev ? ['--rev', String(rev)] : [])]);
  assert.equal(r.exitCode, 0, r.stderr);
  return JSON.parse(r.stdout.replace(/("(?:cluster|member)_id":)(\d+)/g, '$1"$2"'));
}

test('a snapshot saved by etcdctl restores into a new node with every key at its revision', async (t) => {
  const source = await startKvs(t);
  const c = client(t, source.endpoint);
  // History: 300 keys of 1 KiB (the snapshot spans many 32 KiB messages), overwrites,
  // deletions, a compaction, leaving some history above it.
  for (let i = 0; i < 300; i++) await c.put(`key/${String(i).padStart(3, '0')}`).value(`${i}:`.padEnd(1024, 'x'));
  for (let i = 0; i < 300; i += 3) await c.put(`key/${String(i).padStart(3, '0')}`).value(`second ${i}`);
  assert.equal((await etcdctl(source.endpoint, ['del', 'key/100', 'key/150'])).stdout, '50\n');
  const compactAt = Number((await c.get('key/000').exec()).header.revision) - 10;
  await c.put('key/000').value('third');
  await etcdctl(source.endpoint, ['compact', String(compactAt)]);
  for (let i = 0; i < 20; i++) await c.put(`late/${i}`).value(`late ${i}`);

  // Keep writing while the snapshot is taken: it must still be one consistent revision.
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing; i++) await c.put(`busy/${i % 50}`).value(`busy ${i}`);
  })();
  const dir = await tempDir(t, 'kvs-snapshot-');
  const file = path.join(dir, 'backup.db');
  const saved = await etcdctl(source.endpoint, ['snapshot', 'save', file], { timeoutMs: 60_000 });
  writing = false;
  await writer;
  assert.equal(saved.exitCode, 0, saved.stderr);
  assert.equal(saved.stdout, `Snapshot saved at ${file}\n`);

  const restoredDir = path.join(dir, 'restored');
  const restored = await kvsCli(['snapshot', 'restore', file, '--data-dir', restoredDir]);
  assert.equal(restored.exitCode, 0, restored.stderr);
  const revision = Number(/revision (\d+)/.exec(restored.stdout)?.[1]);
  assert.ok(revision > compactAt + 20, restored.stdout);

  const node = await startKvs(t, { dataDir: restoredDir });
  const want = await allKeys(source.endpoint, revision);
  const got = await allKeys(node.endpoint);
  assert.equal(got.header.revision, revision, 'the restored node starts at the snapshot revision');
  assert.deepEqual(got.kvs, want.kvs, 'every key with its value, create/mod revision and version');
  assert.ok((got.kvs?.length ?? 0) > 250);
  // History above the compaction came along, and the compaction itself.
  assert.deepEqual((await allKeys(node.endpoint, compactAt + 5)).kvs, (await allKeys(source.endpoint, compactAt + 5)).kvs);
  const below = await etcdctl(node.endpoint, ['get', 'key/000', '--rev', String(compactAt - 1)]);
  assert.match(below.stderr, /required revision has been compacted/);

  // The same data hashes the same, and the node is a new member that carries on from there.
  const src = new Endpoint(t, 'source', source.endpoint);
  const dst = new Endpoint(t, 'restored', node.endpoint);
  const [a, b] = await Promise.all([
    src.call('HashKV', encodeRequest('HashKV', { revision }, MAINTENANCE), MAINTENANCE),
    dst.call('HashKV', encodeRequest('HashKV', { revision: 0 }, MAINTENANCE), MAINTENANCE),
  ]);
  assert.equal(ok(b).hash, ok(a).hash);
  assert.equal(ok(b).compactRevision, String(compactAt));
  const nc = client(t, node.endpoint);
  const put = await nc.put('after/restore').value('yes');
  assert.equal(Number(put.header.revision), revision + 1);
  assert.notEqual(put.header.member_id, (await c.get('key/001').exec()).header.member_id);
});

test('snapshot restore refuses a damaged file, a foreign file and a used data directory', async (t) => {
  const source = await startKvs(t);
  await client(t, source.endpoint).put('k').value('v');
  const dir = await tempDir(t, 'kvs-snapshot-bad-');
  const file = path.join(dir, 'good.db');
  assert.equal((await etcdctl(source.endpoint, ['snapshot', 'save', file])).exitCode, 0);
  const bytes = readFileSync(file);

  const corrupt = path.join(dir, 'corrupt.db');
  const flipped = Buffer.from(bytes);
  flipped[5000] = flipped[5000]! ^ 0xff;
  writeFileSync(corrupt, flipped);
  let r = await kvsCli(['snapshot', 'restore', corrupt, '--data-dir', path.join(dir, 'a')]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /^kvs: snapshot .*corrupt\.db is corrupt: expected sha256 [0-9a-f]{64}, got [0-9a-f]{64}$/);

  const bare = path.join(dir, 'bare.db');
  writeFileSync(bare, bytes.subarray(0, bytes.length - 32));
  r = await kvsCli(['snapshot', 'restore', bare, '--data-dir', path.join(dir, 'b')]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /snapshot missing hash but --skip-hash-check=false/);
  r = await kvsCli(['snapshot', 'restore', bare, '--skip-hash-check', '--data-dir', path.join(dir, 'b')]);
  assert.equal(r.exitCode, 0, r.stderr);

  const foreign = path.join(dir, 'foreign.db');
  writeFileSync(foreign, Buffer.alloc(8192, 7));
  r = await kvsCli(['snapshot', 'restore', foreign, '--skip-hash-check', '--data-dir', path.join(dir, 'c')]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /is not a snapshot kvs reads: neither a kvs snapshot \(an LMDB database\) nor an etcd snapshot \(a bbolt database\)/);

  r = await kvsCli(['snapshot', 'restore', file, '--data-dir', source.dataDir]);
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /already holds a database; restore into a new data directory/);
  assert.equal((await etcdctl(source.endpoint, ['get', 'k', '--print-value-only'])).stdout, 'v\n');
});

test('HashKV and Hash are equal on two kvs nodes given the same history', async (t) => {
  const [a, b] = await Promise.all([startKvs(t), startKvs(t)]);
  // Differ checks that both answer every request the same; here both sides are kvs.
  const d = new Differ(new Endpoint(t, 'a', a.endpoint), new Endpoint(t, 'b', b.endpoint));
  const rnd = prng(7);
  for (let i = 0; i < 120; i++) {
    const key = `k${Math.floor(rnd() * 12)}`;
    const p = rnd();
    if (p < 0.6) await d.put({ key, value: `v${i}` });
    else if (p < 0.8) await d.del({ key, rangeEnd: `k${Math.floor(rnd() * 12)}` });
    else await d.txn({ success: [{ requestPut: { key: `t${i % 5}`, value: 'x' } }, { requestDeleteRange: { key } }] });
    if (i === 60) await d.compact({ revision: d.revision - 20 });
  }
  const hashes = async (context: string) => {
    for (let rev = 0; rev <= d.revision; rev++) {
      const { etcd: x, kvs: y } = await d.both(MAINTENANCE, 'HashKV', { revision: rev });
      assert.deepStrictEqual(y, x, `HashKV ${rev} (${context})`);
    }
    const { etcd: x, kvs: y } = await d.both(MAINTENANCE, 'Hash', {});
    assert.equal(ok(y).hash, ok(x).hash, `Hash (${context})`);
  };
  await hashes('same requests');
  // One node crashes and rebuilds from its WAL: still the same data, so the same hashes.
  await b.kill9();
  await b.restart();
  await hashes('after a crash and WAL replay');
});
