// The embedding API end to end in this process: open a node on a fresh data directory, the
// writes and their errors, reads (plain, linearizable, in the past), txn, watch (live, from the
// past, ending on close, ErrCompacted), compaction, leases, reopening the same directory, and
// the refusals of bad options and of a second node on a held directory.
import { test } from 'node:test';
import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { pollUntil, tempDir } from '../testkit/harness.js';
import {
  open, ErrKeyExists, ErrRevisionMismatch, ErrCompacted, ErrFutureRev, ErrLeaseNotFound, ErrClosed, ErrInvalidArgument, KvsError, type Node, type WatchEvent,
} from '../embed/index.js';

async function fresh(t: Parameters<typeof tempDir>[0]): Promise<{ node: Node; dir: string }> {
  const dir = await tempDir(t, 'kvs-embed');
  const node = await open({ dataDir: dir });
  t.after(() => node.close());
  return { node, dir };
}

const text = (b: Buffer | undefined) => b?.toString('utf8');

test('put, get, create, update, delete and their errors', async (t) => {
  const { node } = await fresh(t);
  assert.equal(node.role(), 'single');
  const r1 = await node.put('a', 'one');
  assert.equal(r1.revision, node.currentRevision());
  const kv = (await node.get('a'))!;
  assert.deepEqual([text(kv.key), text(kv.value), kv.createRevision, kv.modRevision, kv.version, kv.lease], ['a', 'one', r1.revision, r1.revision, 1, 0n]);
  assert.equal(await node.get('missing'), undefined);
  assert.equal(await node.exists('a'), true);
  assert.equal(await node.exists('missing'), false);

  await assert.rejects(node.create('a', 'x'), (err: unknown) => err instanceof ErrKeyExists && err.modRevision === r1.revision && /already exists/.test(err.message));
  const created = await node.create('b', new Uint8Array([0, 1, 2]));
  assert.deepEqual([...(await node.get('b'))!.value], [0, 1, 2]);

  const u = await node.update('a', 'two', kv.modRevision);
  assert.equal(u.revision, created.revision + 1);
  await assert.rejects(node.update('a', 'three', kv.modRevision), (err: unknown) => err instanceof ErrRevisionMismatch && err.actual === u.revision && err.expected === kv.modRevision);
  await assert.rejects(node.update('nope', 'x', 5), (err: unknown) => err instanceof ErrRevisionMismatch && err.actual === 0);
  assert.equal(text((await node.get('a'))!.value), 'two');
  // The old version is still readable at its revision.
  assert.equal(text((await node.get('a', { revision: r1.revision }))!.value), 'one');
  await assert.rejects(node.get('a', { revision: 1000 }), ErrFutureRev);

  await assert.rejects(node.deleteIfRevision('a', r1.revision), ErrRevisionMismatch);
  const d = await node.deleteIfRevision('a', u.revision);
  assert.equal(d.deleted, 1);
  assert.equal(await node.get('a'), undefined);
  assert.equal((await node.delete('b')).deleted, 1);
  assert.equal((await node.delete('b')).deleted, 0);

  await assert.rejects(node.put('', 'v'), (err: unknown) => err instanceof ErrInvalidArgument && /key is not provided/.test(err.message));
  await assert.rejects(node.put('k', 'x'.repeat(2 * 1024 * 1024)), (err: unknown) => err instanceof ErrInvalidArgument && /too large/.test(err.message));
  await assert.rejects(node.put(42 as unknown as string, 'v'), TypeError);
});

test('a compare-and-swap loop of concurrent writers loses no increment', async (t) => {
  const { node } = await fresh(t);
  await node.put('counter', '0');
  const increment = async () => {
    for (;;) {
      const kv = (await node.get('counter'))!;
      try {
        return await node.update('counter', String(Number(text(kv.value)) + 1), kv.modRevision);
      } catch (err) {
        if (!(err instanceof ErrRevisionMismatch)) throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: 16 }, increment));
  assert.equal(text((await node.get('counter'))!.value), '16');
});

test('list and count a prefix, with limit and revision; txn with compares and both branches', async (t) => {
  const { node } = await fresh(t);
  for (const k of ['p/1', 'p/2', 'p/3', 'q/1']) await node.put(k, `v${k}`);
  const at = node.currentRevision();
  const all = await node.list('p/');
  assert.deepEqual(all.kvs.map((kv) => text(kv.key)), ['p/1', 'p/2', 'p/3']);
  assert.equal(all.revision, at);
  const two = await node.list('p/', { limit: 2 });
  assert.deepEqual([two.kvs.length, two.more, two.count], [2, true, 3]);
  assert.equal(await node.count('p/'), 3);
  assert.equal(await node.count(''), 4);
  assert.equal(await node.linearizableCount('q/'), 1);
  await node.delete('p/2');
  assert.equal((await node.linearizableList('p/', { revision: at })).kvs.length, 3);
  assert.equal((await node.list('p/')).kvs.length, 2);
  assert.equal(text((await node.linearizableGet('p/1'))!.value), 'vp/1');
  assert.equal(await node.linearizableExists('p/2'), false);

  const ok = await node.txn({
    if: [{ key: 'p/1', target: 'value', op: '==', value: 'vp/1' }, { key: 'p/2', target: 'version', op: '==', value: 0 }],
    then: [{ put: 'p/2', value: 'again' }, { delete: 'q/', prefix: true }, { get: 'p/', prefix: true }],
    else: [{ get: 'p/1' }],
  });
  assert.equal(ok.succeeded, true);
  assert.deepEqual(ok.results.map((r) => r.type), ['put', 'delete', 'get']);
  assert.equal(ok.results[1]!.type === 'delete' && ok.results[1]!.deleted, 1);
  assert.equal(ok.results[2]!.type === 'get' && ok.results[2]!.kvs.length, 3);
  assert.equal(ok.revision, node.currentRevision());
  const no = await node.txn({ if: [{ key: 'p/1', target: 'modRevision', op: '>', value: 1000 }], then: [{ put: 'x', value: 'y' }], else: [{ get: 'p/1' }] });
  assert.equal(no.succeeded, false);
  assert.equal(no.results[0]!.type === 'get' && text(no.results[0]!.kvs[0]!.value), 'vp/1');
  assert.equal(await node.get('x'), undefined);
});

async function take(w: AsyncIterator<WatchEvent>, n: number): Promise<WatchEvent[]> {
  const out: WatchEvent[] = [];
  while (out.length < n) {
    const r = await w.next();
    if (r.done) break;
    out.push(r.value);
  }
  return out;
}

test('watch: live changes of a key or a prefix, from the past, ends on close, ErrCompacted', async (t) => {
  const dir = await tempDir(t, 'kvs-embed');
  const node = await open({ dataDir: dir });
  const first = await node.put('w/a', '1');
  const live = node.watch('w/', { prefix: true });
  const one = node.watch('w/a');
  await node.put('w/b', '2');
  await node.put('other', 'x');
  await node.delete('w/a');
  const events = await take(live, 2);
  assert.deepEqual(events.map((e) => [e.type, text(e.kv.key), text(e.kv.value)]), [['put', 'w/b', '2'], ['delete', 'w/a', '']]);
  const ofA = await take(one, 1);
  assert.deepEqual(ofA.map((e) => e.type), ['delete']);
  one.close();
  assert.equal((await one.next()).done, true);

  // From the past: history first, then live, without a gap or a repeat.
  const past = node.watch('w/', { prefix: true, startRevision: first.revision });
  const pending = take(past, 4);
  await node.put('w/c', '3');
  const all = await pending;
  assert.deepEqual(all.map((e) => `${e.type} ${text(e.kv.key)}@${e.revision}`), [
    `put w/a@${first.revision}`, `put w/b@${first.revision + 1}`, `delete w/a@${first.revision + 3}`, `put w/c@${first.revision + 4}`,
  ]);

  // A slow consumer falls back on history and still sees every change in order.
  const slow = node.watch('s', {});
  const writes: Promise<unknown>[] = [];
  for (let i = 0; i < 12_000; i++) writes.push(node.put('s', String(i)));
  await Promise.all(writes);
  const got = await take(slow, 12_000);
  assert.deepEqual(got.map((e) => text(e.kv.value)), Array.from({ length: 12_000 }, (_, i) => String(i)));
  slow.close();

  await node.compact(node.currentRevision() - 1);
  await assert.rejects(node.get('w/b', { revision: first.revision }), (err: unknown) => err instanceof ErrCompacted && err.revision === first.revision);
  const old = node.watch('w/', { prefix: true, startRevision: first.revision });
  await assert.rejects(old.next(), ErrCompacted);
  await assert.rejects(node.compact(first.revision), ErrCompacted);

  // close() ends the watches that are waiting, and finishes the writes already queued.
  const waiting = node.watch('quiet').next();
  const queued = node.put('queued', 'before close');
  await node.close();
  assert.equal((await waiting).done, true);
  assert.ok((await queued).revision > 0);
  await node.close(); // idempotent
  await assert.rejects(node.put('k', 'v'), ErrClosed);
  assert.throws(() => node.currentRevision(), ErrClosed);
});

test('leases: grant, put with one, keep alive, time to live, revoke deletes its keys', async (t) => {
  const { node } = await fresh(t);
  const lease = await node.grantLease(30);
  assert.equal(lease.ttl, 30);
  await node.put('l/1', 'x', { lease });
  await node.put('l/2', 'y', { lease: lease.id });
  assert.equal((await node.get('l/1'))!.lease, lease.id);
  assert.equal(await node.keepAlive(lease), 30);
  const st = await node.leaseTimeToLive(lease);
  assert.deepEqual([st.grantedTtl, st.keys.map(text).sort()], [30, ['l/1', 'l/2']]);
  await node.revokeLease(lease);
  assert.equal(await node.count('l/'), 0);
  await assert.rejects(node.keepAlive(lease), (err: unknown) => err instanceof ErrLeaseNotFound && err.lease === lease.id);
  await assert.rejects(node.revokeLease(lease), ErrLeaseNotFound);
  await assert.rejects(node.put('l/3', 'z', { lease }), ErrLeaseNotFound);
});

test('a reopened data directory has every write; a held one is refused; bad options are named', async (t) => {
  const dir = await tempDir(t, 'kvs-embed');
  const node = await open({ dataDir: dir });
  for (let i = 0; i < 100; i++) await node.put(`k${i}`, `v${i}`);
  await assert.rejects(open({ dataDir: dir }), /is open already in this process: close\(\) that node first/);
  const rev = node.currentRevision();
  await node.close();
  const again = await open({ dataDir: dir });
  t.after(() => again.close());
  assert.equal(again.currentRevision(), rev);
  assert.equal(await again.count('k'), 100);

  const file = path.join(dir, 'a-file');
  fs.writeFileSync(file, '');
  await assert.rejects(open({ dataDir: file }), /data directory .*a-file is not a directory/);
  await assert.rejects(open({ dataDir: path.join(file, 'below') }), /data directory .*below cannot be created: /);
  await assert.rejects(open({} as never), /dataDir is required/);
  await assert.rejects(open({ dataDir: dir, readConsistency: 'eventual' as never }), /readConsistency must be 'linearizable' or 'serializable'/);
  await assert.rejects(open({ dataDir: dir, checkpointInterval: '15m' }), /checkpointInterval needs objectStore/);
  await assert.rejects(open({ dataDir: dir, peerBufferSize: 5 }), /peerBufferSize needs peerListen/);
  assert.ok(new ErrKeyExists(Buffer.from('k'), 1) instanceof KvsError);
});

test('readConsistency serializable: the plain reads answer without the linearizable route', async (t) => {
  const dir = await tempDir(t, 'kvs-embed');
  const node = await open({ dataDir: dir, readConsistency: 'serializable' });
  t.after(() => node.close());
  await node.put('a', '1');
  assert.equal(text((await node.get('a'))!.value), '1');
  assert.equal(await node.exists('a'), true);
  assert.equal(await node.count(''), 1);
  assert.equal((await node.list('')).kvs.length, 1);
});

test('housekeeping runs in the embedded node: an expired lease deletes its key, automatic compaction compacts', async (t) => {
  const dir = await tempDir(t, 'kvs-embed');
  const node = await open({ dataDir: dir, autoCompact: { mode: 'revision', retainRevisions: 5, intervalMs: 100 } });
  t.after(() => node.close());
  const lease = await node.grantLease(2);
  const put = await node.put('expiring', 'x', { lease });
  // Nothing but the watch holds the process meanwhile: a waiting watch keeps it alive.
  const watch = node.watch('expiring');
  const [gone] = await take(watch, 1);
  assert.equal(gone!.type, 'delete', 'the key went with its lease');
  assert.ok(gone!.revision > put.revision);
  await assert.rejects(node.keepAlive(lease), ErrLeaseNotFound);

  for (let i = 0; i < 20; i++) await node.put('c', String(i));
  const target = node.currentRevision() - 5;
  await pollUntil('automatic compaction', async () => (node.compactRevision() >= target ? true : undefined), 30_000);
  await assert.rejects(node.get('c', { revision: 2 }), ErrCompacted);
  assert.equal(text((await node.get('c'))!.value), '19');
});
