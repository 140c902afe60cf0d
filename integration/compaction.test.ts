// Automatic compaction on a real node (both modes), and compaction in bounded steps: reads,
// HashKV and Hash are the same while the removal of compacted history is in progress, after it,
// and after storage was killed in the middle of it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GRPCOutOfRangeError, type Etcd3 } from 'etcd3';
import { client, component, etcdctl, freePort, pollUntil, startKvs, tempDir, waitComponent, type KvsNode } from '../testkit/harness.js';
import { fixtureKey, writeHistory } from '../testkit/history-fixture.js';
import { Endpoint, encodeRequest, type Outcome } from './differential.js';

const MAINTENANCE = 'etcdserverpb.Maintenance';

const COMPACTED = /etcdserver: mvcc: required revision has been compacted/;

/** Whether a read at `rev` fails with etcd's compacted error (OutOfRange); false if it succeeds. */
async function compactedAt(c: Etcd3, rev: number): Promise<boolean> {
  try {
    await c.get('k').revision(rev).string();
    return false;
  } catch (err) {
    assert.ok(err instanceof GRPCOutOfRangeError, `${(err as Error).constructor.name}: ${(err as Error).message}`);
    assert.match((err as Error).message, COMPACTED);
    return true;
  }
}

async function put(c: Etcd3, key: string, value: string): Promise<number> {
  return Number((await c.put(key).value(value)).header.revision);
}

function logged(node: KvsNode, text: string): boolean {
  return node.output().includes(text);
}

test('revision mode: every interval to current - retain; reads below fail with the compacted error, above work', async (t) => {
  const metricsAddr = `127.0.0.1:${await freePort()}`;
  const node = await startKvs(t, { args: ['--auto-compact-mode', 'revision', '--auto-compact-retain-revisions', '5', '--auto-compact-interval', '200ms', '--metrics-addr', metricsAddr] });
  const c = client(t, node.endpoint);
  let rev = 0;
  for (let i = 1; i <= 20; i++) rev = await put(c, 'k', `v${i}`); // revisions 2..21
  assert.equal(rev, 21);
  const target = rev - 5;
  await pollUntil(`compaction to ${target}`, async () => ((await compactedAt(c, target - 1)) ? true : undefined), 20_000);
  assert.equal(await compactedAt(c, target), false, 'the compact revision itself is readable');
  assert.equal(await c.get('k').revision(target).string(), `v${target - 1}`);
  assert.equal(await c.get('k').string(), 'v20');
  await pollUntil('the log line', async () => (logged(node, `auto compaction: compacted to revision ${target}`) ? true : undefined), 5_000);
  // Counted in the metrics as a write of op compact; the watermark is the compact revision.
  const metrics = await (await fetch(`http://${metricsAddr}/metrics`)).text();
  assert.match(metrics, /^kvs_writes_total\{op="compact"\} [1-9]/m);
  assert.match(metrics, new RegExp(`^kvs_compact_revision ${target}$`, 'm'));

  // etcdctl sees the same error.
  const r = await etcdctl(node.endpoint, ['get', 'k', `--rev=${target - 1}`]);
  assert.notEqual(r.exitCode, 0);
  assert.match(r.stderr, COMPACTED);

  // Idle: nothing more is compacted (current - 5 is at the compact revision).
  const more = await put(c, 'k', 'v21'); // 22
  await pollUntil(`compaction to ${more - 5}`, async () => ((await compactedAt(c, more - 6)) ? true : undefined), 20_000);
  assert.equal(await compactedAt(c, more - 5), false);
});

test('time mode: compacts to the newest sample at or before now - retention', async (t) => {
  const node = await startKvs(t, { args: ['--auto-compact-mode', 'time', '--auto-compact-retention', '2s', '--auto-compact-sample-interval', '200ms'] });
  const c = client(t, node.endpoint);
  const first = await put(c, 'k', 'a'); // 2
  const writtenAt = Date.now();
  const second = await put(c, 'k', 'b'); // 3
  // Revision 3 becomes the compact revision once a sample that saw it is 2 s old; a read at 2
  // (below it) then fails.
  await pollUntil(`compaction to ${second}`, async () => ((await compactedAt(c, first)) ? true : undefined), 20_000);
  const waited = Date.now() - writtenAt;
  assert.ok(waited >= 1900, `not before the retention: compacted after ${waited} ms`);
  assert.equal(await compactedAt(c, second), false);
  assert.equal(await c.get('k').revision(second).string(), 'b');
  assert.equal(await c.get('k').string(), 'b');
  assert.ok(logged(node, `auto compaction: compacted to revision ${second}`) || (await pollUntil('the log line', async () => (logged(node, `auto compaction: compacted to revision ${second}`) ? true : undefined), 5_000)));
  const r = await etcdctl(node.endpoint, ['get', 'k', `--rev=${first}`]);
  assert.notEqual(r.exitCode, 0);
  assert.match(r.stderr, COMPACTED);
});

/** Ranges at and above the compact revision (cheap enough to read while the removal runs). */
async function ranges(c: Etcd3, at: number, head: number) {
  const range = async (rev: number) => {
    const res = await c.getAll().prefix('/registry/').revision(rev).exec();
    return { count: Number(res.count), kvs: res.kvs.map((kv) => `${kv.key}@${kv.mod_revision}/${kv.version}/${kv.create_revision}`) };
  };
  return {
    atCompact: await range(at),
    above: await range(at + 500),
    head: await range(head),
    someKey: (await c.get(fixtureKey(7)).revision(at).exec()).kvs.map((kv) => kv.mod_revision),
  };
}

/** HashKV at and above the compact revision, and Hash. */
async function hashes(e: Endpoint, at: number, head: number) {
  const call = async (method: string, req: object) => {
    const o: Outcome = await e.call(method, encodeRequest(method, req, MAINTENANCE), MAINTENANCE);
    if ('error' in o) assert.fail(`${method}: ${o.error.code} ${o.error.details}`);
    return (o.ok as { hash: number }).hash;
  };
  return {
    hashKV: await Promise.all([at + 1, at + 500, head].map((revision) => call('HashKV', { revision }))),
    hash: await call('Hash', {}),
  };
}

const REMOVED = 'compaction: history removed through revision';

test('compaction of 600,000 revisions in bounded steps: same reads and hashes while it runs, after it, and after a kill -9 in the middle', async (t) => {
  const dataDir = await tempDir(t, 'kvs-compact-');
  const head = await writeHistory(dataDir, 600_000, 3_000);
  const node = await startKvs(t, { dataDir });
  const c = client(t, node.endpoint);
  const e = new Endpoint(t, 'kvs', node.endpoint);
  const target = head - 1_000;

  const started = Date.now();
  await c.kv.compact({ revision: target });
  // Answered at once: reads below fail already, while the removal runs.
  assert.equal(await compactedAt(c, target - 1), true);
  const during = await ranges(c, target, head);
  assert.equal(during.atCompact.count, 3_000);
  assert.ok(!logged(node, REMOVED), `the removal is still running ${Date.now() - started} ms after the Compact`);

  const storage = await component(node, 'storage');
  process.kill(storage.pid, 'SIGKILL');
  assert.ok(!logged(node, REMOVED), 'killed in the middle of the removal');
  await waitComponent(node, 'storage', (s) => s.state === 'ready' && s.pid !== storage.pid);
  // The new storage resumes where the removal had got to (its cursor), not from the start.
  // (Its log line reaches the test through the supervisor's output, maybe after the ready report.)
  const resumed = await pollUntil('the removal resumed', async () => /compaction: resuming the removal of history compacted to revision (\d+), at revision (\d+)/.exec(node.output()) ?? undefined, 10_000);
  assert.equal(Number(resumed[1]), target);
  assert.ok(Number(resumed[2]) > 2, `resumed at revision ${resumed[2]}`);
  const hashesDuring = await hashes(e, target, head);
  assert.deepEqual(await ranges(c, target, head), during);
  t.diagnostic(`resumed at revision ${resumed[2]} of ${target}; hashes read ${logged(node, REMOVED) ? 'after' : 'during'} the resumed removal`);

  await pollUntil('the resumed removal to finish', async () => (logged(node, `${REMOVED} ${target}`) ? true : undefined), 120_000);
  assert.deepEqual(await ranges(c, target, head), during, 'the same reads after the removal, resumed after a crash');
  assert.deepEqual(await hashes(e, target, head), hashesDuring, 'the same HashKV and Hash');
  assert.equal(await compactedAt(c, target - 1), true);

  // A physical Compact is answered once the removal is done.
  const next = target + 400;
  await c.kv.compact({ revision: next, physical: true });
  await pollUntil('the removal logged', async () => (logged(node, `${REMOVED} ${next}`) ? true : undefined), 10_000);
  assert.deepEqual((await ranges(c, next, head)).head, during.head);
});
