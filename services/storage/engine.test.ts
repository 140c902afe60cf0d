import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openMvcc, META } from '../../shared/mvcc/schema.js';
import { decodeKeyValue } from '../../shared/mvcc/keyvalue.js';
import { liveVersion } from '../../shared/mvcc/keyindex.js';
import { createLogger } from '../../shared/log.js';
import { encode, decode, num } from '../../shared/proto/index.js';
import type { Engine, WriteResult } from './engine.js';
import { openEngine } from './engine/open.js';
import { Op } from '../../shared/storage/ops.js';
import { DiskSpace, FreeSpaceError } from './disk-space.js';
import { dump } from './mvcc/dump.js';
import { EtcdError } from '../../shared/errors.js';
import type { WritePipeline } from '../../shared/config.js';

const log = createLogger('test', 'silent');

function tempDir(t: { after(fn: () => unknown): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-engine-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function submit(engine: Engine, op: number, type: string, req: object): Promise<WriteResult> {
  return new Promise((resolve) => engine.submit(op, encode(type, req), resolve));
}

const put = (engine: Engine, key: string, value: string) =>
  submit(engine, Op.PUT, 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from(value) });

test('concurrent writes share one batch, get distinct revisions, and are rebuilt from the WAL alone', async (t) => {
  const dir = tempDir(t);
  // As the storage process opens it: LMDB writes through a writable memory map.
  let engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log);
  const results = await Promise.all(Array.from({ length: 50 }, (_, i) => put(engine, `k${i % 10}`, `v${i}`)));
  const revs = results.map((r) => num(decode<any>('etcdserverpb.PutResponse', r.body!).header.revision));
  assert.deepEqual(revs, Array.from({ length: 50 }, (_, i) => i + 2), 'one revision per put, in submission order');
  assert.equal(engine.wal.lastIndex, 50n);
  const del = await submit(engine, Op.DELETE_RANGE, 'etcdserverpb.DeleteRangeRequest', { key: Buffer.from('k0') });
  assert.equal(del.code, 0);
  await engine.close();

  // Lose the database, keep the WAL: replay must rebuild the same state.
  fs.rmSync(path.join(dir, 'db'), { recursive: true });
  const db = openMvcc(dir, { readOnly: false, writemap: true });
  engine = openEngine(db, dir, log);
  t.after(() => engine.close());
  assert.equal(engine.executor.revision, 52);
  assert.equal(db.meta.get(META.appliedIndex), 51);
  assert.equal(liveVersion(db, Buffer.from('k0')), undefined);
  const k3 = decodeKeyValue(liveVersion(db, Buffer.from('k3'))!);
  assert.equal(Buffer.from(k3.value).toString(), 'v43');
  assert.equal(k3.version, 5);
  assert.equal(k3.createRevision, 5);
  // And it keeps going from there.
  const next = await put(engine, 'after', 'x');
  assert.equal(num(decode<any>('etcdserverpb.PutResponse', next.body!).header.revision), 53);
  assert.equal(engine.wal.lastIndex, 52n);
});

test('an undecodable request fails alone; the other writes of its batch succeed', async (t) => {
  const dir = tempDir(t);
  const engine = openEngine(openMvcc(dir, { readOnly: false }), dir, log);
  t.after(() => engine.close());
  const good = put(engine, 'a', '1');
  const bad = new Promise<WriteResult>((resolve) => engine.submit(Op.PUT, Buffer.from([0x0a, 0xff, 0xff]), resolve));
  const good2 = put(engine, 'b', '2');
  const [r1, r2, r3] = await Promise.all([good, bad, good2]);
  assert.equal(r1.code, 0);
  assert.equal(r2.code, 13); // INTERNAL, as etcd's unmarshalling error
  assert.match(r2.message, /error unmarshalling request/);
  assert.equal(r3.code, 0);
  assert.equal(engine.executor.revision, 3);
});

test('leases: grants, attached keys, expiry and revokes go through the WAL; keep-alives do not; replay rebuilds the tables', async (t) => {
  const dir = tempDir(t);
  let clock = 1_000_000;
  const now = () => clock;
  let engine = openEngine(openMvcc(dir, { readOnly: false }), dir, log, { now });
  const lease = (op: number, type: string, req: object) =>
    new Promise<WriteResult>((resolve) => engine.lessor.call(op, encode(type, req), resolve));
  const keepAlive = async (id: bigint | number) =>
    num(decode<any>('etcdserverpb.LeaseKeepAliveResponse', (await lease(Op.LEASE_KEEPALIVE, 'etcdserverpb.LeaseKeepAliveRequest', { ID: id.toString() })).body!).TTL);
  const timeToLive = async (id: bigint | number) =>
    decode<any>('etcdserverpb.LeaseTimeToLiveResponse', (await lease(Op.LEASE_TIME_TO_LIVE, 'etcdserverpb.LeaseTimeToLiveRequest', { ID: id.toString(), keys: true })).body!);
  const grant = async (ID: number, TTL: number) => {
    const r = await submit(engine, Op.LEASE_GRANT, 'etcdserverpb.LeaseGrantRequest', { ID, TTL });
    assert.equal(r.code, 0, r.message);
    const res = decode<any>('etcdserverpb.LeaseGrantResponse', r.body!);
    return { id: BigInt(res.ID.toString()), ttl: num(res.TTL) };
  };
  const putWith = (key: string, id: bigint) =>
    submit(engine, Op.PUT, 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from('v'), lease: id.toString() });

  const a = await grant(100, 5);
  const b = await grant(0, 0);
  assert.equal(b.ttl, 2, 'a TTL of 0 is raised to the minimum');
  assert.ok(b.id > 0n);
  assert.equal((await submit(engine, Op.LEASE_GRANT, 'etcdserverpb.LeaseGrantRequest', { ID: 100, TTL: 5 })).message, 'etcdserver: lease already exists');
  for (const k of ['a1', 'a2']) assert.equal((await putWith(k, a.id)).code, 0);
  assert.equal((await putWith('b1', b.id)).code, 0);
  assert.equal((await putWith('x', 999n)).message, 'etcdserver: requested lease not found');

  const index = engine.wal.lastIndex;
  clock += 4000;
  assert.equal(await keepAlive(a.id), 5);
  assert.equal(await keepAlive(12345), 0, 'an unknown lease answers TTL 0');
  assert.equal(engine.wal.lastIndex, index, 'keep-alives write nothing');
  assert.equal(num((await timeToLive(a.id)).TTL), 5);
  assert.equal(num((await timeToLive(12345)).TTL), -1);

  // b (TTL 2) expired 2 s ago; a was renewed. Expiry revokes b alone, in one revision.
  const rev = engine.executor.revision;
  assert.equal(engine.lessor.revokeExpired(), 1);
  assert.equal(await keepAlive(b.id), 0, 'a keep-alive of an expired lease waits for its revocation');
  assert.equal(engine.executor.revision, rev + 1);
  assert.equal(liveVersion(engine.db, Buffer.from('b1')), undefined);
  assert.deepEqual((await timeToLive(a.id)).keys.map(String), ['a1', 'a2']);

  const c = await grant(300, 10);
  await putWith('c1', c.id);
  const revoked = await submit(engine, Op.LEASE_REVOKE, 'etcdserverpb.LeaseRevokeRequest', { ID: 300 });
  assert.equal(revoked.code, 0);
  assert.equal(num(decode<any>('etcdserverpb.LeaseRevokeResponse', revoked.body!).header.revision), engine.executor.revision);
  assert.equal((await submit(engine, Op.LEASE_REVOKE, 'etcdserverpb.LeaseRevokeRequest', { ID: 300 })).message, 'etcdserver: requested lease not found');

  const before = dump(engine.db);
  await engine.close();
  fs.rmSync(path.join(dir, 'db'), { recursive: true });
  clock += 60_000;
  engine = openEngine(openMvcc(dir, { readOnly: false }), dir, log, { now });
  t.after(() => engine.close());
  assert.deepEqual(dump(engine.db), before, 'replaying the WAL rebuilds every table, the lease tables too');
  // After a restart every lease runs its full TTL from now (etcd's bound on a new leader).
  assert.equal(num((await timeToLive(a.id)).TTL), 5);
  assert.equal(engine.lessor.count, 1);
  clock += 5001;
  assert.equal(engine.lessor.revokeExpired(), 1);
  assert.equal(await keepAlive(a.id), 0);
  assert.equal(liveVersion(engine.db, Buffer.from('a1')), undefined);
});

test('sync upload: a batch is in the WAL but invisible to readers until uploaded; later writes wait and form the next batch', async (t) => {
  const dir = tempDir(t);
  const db = openMvcc(dir, { readOnly: false, writemap: true });
  const uploads: { first: number; last: number; frames: Buffer; release(): void }[] = [];
  const engine = openEngine(db, dir, log, {
    upload: (first, last, frames) => new Promise<void>((release) => uploads.push({ first, last, frames, release })),
  });
  const answered: string[] = [];
  const a = put(engine, 'a', '1').then((r) => (answered.push('a'), r));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(uploads.length, 1);
  assert.deepEqual([uploads[0]!.first, uploads[0]!.last], [1, 1]);
  assert.equal(engine.wal.lastIndex, 1n, 'in the WAL before the upload');
  assert.equal(liveVersion(db, Buffer.from('a')), undefined, 'not in LMDB before the upload');
  assert.equal(engine.revision, 1, 'the revision readers see');

  const bc = Promise.all([put(engine, 'b', '2'), put(engine, 'c', '3')]);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(uploads.length, 1, 'one upload in flight');
  assert.deepEqual(answered, []);

  uploads[0]!.release();
  const ra = await a;
  assert.equal(num(decode<any>('etcdserverpb.PutResponse', ra.body!).header.revision), 2);
  assert.equal(decodeKeyValue(liveVersion(db, Buffer.from('a'))!).value.toString(), '1');
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(uploads.length, 2);
  assert.deepEqual([uploads[1]!.first, uploads[1]!.last], [2, 3], 'the writes that waited form one batch');
  uploads[1]!.release();
  const revs = (await bc).map((r) => num(decode<any>('etcdserverpb.PutResponse', r.body!).header.revision));
  assert.deepEqual(revs, [3, 4]);
  assert.equal(db.meta.get(META.appliedIndex), 3);
  await engine.close();
});

/** The free-space floor of the tests below, and a disk whose free bytes and clock a test sets. */
const FLOOR = 64 * 1024 * 1024;
class FakeDisk {
  clock = 0;
  constructor(public free: number) {}
  space(dir: string): DiskSpace {
    return new DiskSpace(dir, FLOOR, () => this.free, () => this.clock);
  }
}

/** The WAL records a single node writes for these puts. */
async function walRecordsOf(t: { after(fn: () => unknown): void }, puts: [string, string][]): Promise<{ index: bigint; payload: Buffer }[]> {
  const dir = tempDir(t);
  const leader = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log);
  for (const [k, v] of puts) assert.equal((await put(leader, k, v)).code, 0);
  const records = [...leader.wal.readFrom(1n)].map((r) => ({ index: r.index, payload: Buffer.from(r.payload) }));
  await leader.close();
  return records;
}

/** A cluster engine on `disk`, a follower of term 1. */
async function followerOn(t: { after(fn: () => unknown): void }, disk: FakeDisk): Promise<{ follower: Engine; dir: string }> {
  const dir = tempDir(t);
  const follower = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log, { space: disk.space(dir), cluster: { memberId: '2', clusterId: '1' } });
  t.after(() => follower.close());
  await follower.becomeFollower('follower', 1);
  return { follower, dir };
}

test('writes are refused while the disk is below the free-space floor, and go through once space is back', async (t) => {
  const dir = tempDir(t);
  const disk = new FakeDisk(10 * 1024 * 1024);
  const engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log, { space: disk.space(dir) });
  t.after(() => engine.close());
  const [r1, r2] = await Promise.all([put(engine, 'a', '1'), put(engine, 'b', '2')]);
  for (const r of [r1, r2]) {
    assert.equal(r.code, 8); // RESOURCE_EXHAUSTED
    assert.match(r.message, /refuses writes: 10\.0 MiB free .* at least 64\.0 MiB must stay free/);
  }
  assert.equal(engine.wal.lastIndex, 0n, 'nothing reached the WAL');
  assert.equal(engine.executor.revision, 1);

  disk.free = 1024 * 1024 * 1024;
  assert.equal((await put(engine, 'a', '1')).code, 8, 'a reading is kept for a moment');
  disk.clock += 1000;
  const ok = await put(engine, 'a', '1');
  assert.equal(ok.code, 0, ok.message);
  assert.equal(num(decode<any>('etcdserverpb.PutResponse', ok.body!).header.revision), 2);
  assert.equal(engine.wal.lastIndex, 1n);
});

test('a follower below the free-space floor takes no replicated entries (nothing appended, nothing applied), and takes them once space is back', async (t) => {
  // The leader's entries: a single node's WAL records.
  const records = await walRecordsOf(t, [['a', '1'], ['b', '2'], ['c', '3']]);
  assert.equal(records.length, 3);

  const disk = new FakeDisk(10 * 1024 * 1024);
  const { follower, dir } = await followerOn(t, disk);
  assert.throws(() => follower.appendReplicated(records.slice(0, 2), 1), (err: unknown) => {
    assert.ok(err instanceof FreeSpaceError);
    assert.equal(err.code, 8); // RESOURCE_EXHAUSTED
    assert.deepEqual([err.dir, err.freeBytes, err.minFreeBytes], [dir, disk.free, FLOOR]);
    assert.match(err.message, /10\.0 MiB free on the filesystem of .* at least 64\.0 MiB must stay free/);
    return true;
  });
  // A commit position alone (a heartbeat) applies nothing either: LMDB is not written below the floor.
  assert.throws(() => follower.appendReplicated([], 1), FreeSpaceError);
  assert.deepEqual([follower.lastIndex, follower.appliedIndex, follower.revision], [0, 0, 1], 'nothing appended or applied');
  assert.equal(liveVersion(follower.db, Buffer.from('a')), undefined);

  disk.free = 1024 * 1024 * 1024;
  disk.clock += 1000;
  follower.appendReplicated(records.slice(0, 2), 1);
  assert.deepEqual([follower.lastIndex, follower.appliedIndex], [2, 1]);
  // As storage takes a batch (peer-attach.ts): appended first (the ACK leaves), applied after.
  follower.appendReplicated(records.slice(2));
  assert.deepEqual([follower.lastIndex, follower.appliedIndex, follower.revision], [3, 1, 2], 'appended, not applied');
  follower.applyReplicated(5); // a commit position past what it holds applies what it holds
  assert.deepEqual([follower.lastIndex, follower.appliedIndex, follower.revision], [3, 3, 4]);
  assert.equal(decodeKeyValue(liveVersion(follower.db, Buffer.from('c'))!).value.toString(), '3');
});

test('a follower with staged entries does not become leader below the free-space floor (applying them could SIGBUS), and does once space is back', async (t) => {
  const records = await walRecordsOf(t, [['a', '1'], ['b', '2']]);

  const disk = new FakeDisk(1024 * 1024 * 1024);
  const { follower } = await followerOn(t, disk);
  follower.appendReplicated(records, 1); // the second is staged: appended, not yet committed
  assert.deepEqual([follower.lastIndex, follower.appliedIndex], [2, 1]);
  await follower.becomeFollower('none', 1);

  disk.free = 10 * 1024 * 1024;
  disk.clock += 1000;
  assert.throws(() => follower.becomeLeader(2), FreeSpaceError);
  assert.equal(follower.role, 'none');
  assert.deepEqual([follower.lastIndex, follower.appliedIndex], [2, 1], 'the staged entry is kept, unapplied');

  disk.free = 1024 * 1024 * 1024;
  disk.clock += 1000;
  follower.becomeLeader(2);
  assert.equal(follower.role, 'leader');
  assert.deepEqual([follower.lastIndex, follower.appliedIndex, follower.revision], [2, 2, 3]);
});

test('a leader whose batch is refused while it waits for its fsync (deposed) answers the batch "outcome unknown" and keeps serving', async (t) => {
  const dir = tempDir(t);
  const engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log, { cluster: { memberId: '1', clusterId: '1' } });
  t.after(() => engine.close());
  // The peer agent's refusal comes before the engine has reached its fsync: the engine yields
  // one event-loop turn after handing the batch over, and the answer may arrive in that turn.
  let sends = 0;
  engine.replicate = {
    send: () => (++sends === 1 ? Promise.reject(new EtcdError(14, 'etcdserver: leader changed')) : Promise.resolve()),
    durable: () => {},
    confirm: () => Promise.resolve(),
  };
  engine.becomeLeader(1);
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => unhandled.push(err);
  process.on('unhandledRejection', onUnhandled);
  t.after(() => process.off('unhandledRejection', onUnhandled));
  const refused = await put(engine, 'a', '1');
  assert.equal(refused.code, 14);
  assert.match(refused.message!, /the write's outcome is unknown: etcdserver: leader changed/);
  assert.equal((await put(engine, 'b', '2')).code, 0, 'the next batch is served');
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(unhandled, [], 'no rejection left unhandled (it would stop the storage process)');
  assert.equal(liveVersion(engine.db, Buffer.from('a')), undefined, 'the refused write is not applied');
});

/** A leader's replicator the test answers by hand: each batch sent waits for ack() or refuse(). */
function handReplicator() {
  const sent: { first: number; last: number; resolve(): void; reject(err: Error): void }[] = [];
  let durableThrough = 0;
  let changed = () => {};
  const until = (ok: () => boolean) => new Promise<void>((resolve) => {
    const check = () => ok() && resolve();
    changed = check;
    check();
  });
  return {
    sent,
    /** Resolves once `count` batches have been sent. */
    sends: (count: number) => until(() => sent.length >= count),
    /** Resolves once the leader's own fsync covers `index`. */
    durable: (index: number) => until(() => durableThrough >= index),
    replicator: {
      send: (first: number, last: number) => new Promise<void>((resolve, reject) => {
        sent.push({ first, last, resolve, reject });
        changed();
      }),
      durable: (through: number) => {
        durableThrough = through;
        changed();
      },
      confirm: () => Promise.resolve(),
    },
  };
}

/** A cluster leader's engine in a temp dir, its batches answered by hand (handReplicator). */
function handLeader(t: { after(fn: () => unknown): void }, writePipeline?: WritePipeline) {
  const dir = tempDir(t);
  const engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log, { cluster: { memberId: '1', clusterId: '1' }, ...(writePipeline ? { writePipeline } : {}) });
  t.after(() => engine.close());
  const hand = handReplicator();
  engine.replicate = hand.replicator;
  return { engine, hand };
}

const putPrev = (engine: Engine, key: string, value: string) =>
  submit(engine, Op.PUT, 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from(value), prevKv: true });

test('a leader executes and writes the next batch while one waits for its ACKs: on top of it, invisible until ACKed, applied in order', async (t) => {
  const { engine, hand } = handLeader(t, 2);
  engine.becomeLeader(1);
  const first = putPrev(engine, 'a', '1');
  await hand.sends(1);
  const second = putPrev(engine, 'a', '2');
  await hand.durable(2); // written while the first waits: two batches in flight
  assert.deepEqual(hand.sent.map((s) => [s.first, s.last]), [[1, 1], [2, 2]]);
  assert.equal(engine.wal.lastIndex, 2n, 'both are in the WAL');
  const third = putPrev(engine, 'b', '3');
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(hand.sent.length, 2, 'no third batch while two are in flight');
  assert.equal(liveVersion(engine.db, Buffer.from('a')), undefined, 'nothing is visible before its ACK');
  assert.deepEqual([engine.appliedIndex, engine.revision], [0, 1]);

  hand.sent[0].resolve();
  const r1 = await first;
  assert.equal(r1.code, 0);
  assert.equal(num(decode<any>('etcdserverpb.PutResponse', r1.body!).header.revision), 2);
  assert.equal(Buffer.from(decodeKeyValue(liveVersion(engine.db, Buffer.from('a'))!).value).toString(), '1');
  assert.deepEqual([engine.appliedIndex, engine.revision], [1, 2], 'readers see the first batch only');

  await hand.sends(3); // the third starts once the first has ended
  hand.sent[1].resolve();
  hand.sent[2].resolve();
  const [r2, r3] = await Promise.all([second, third]);
  const res2 = decode<any>('etcdserverpb.PutResponse', r2.body!);
  assert.equal(num(res2.header.revision), 3);
  assert.equal(Buffer.from(res2.prevKv.value).toString(), '1', 'the second batch executed on top of the first');
  assert.equal(num(res2.prevKv.modRevision), 2);
  assert.equal(r3.code, 0);
  const a = decodeKeyValue(liveVersion(engine.db, Buffer.from('a'))!);
  assert.deepEqual([Buffer.from(a.value).toString(), a.version, a.createRevision], ['2', 2, 2]);
  assert.deepEqual([engine.appliedIndex, engine.revision], [3, 4]);
});

test('a leader batch that is refused fails every batch executed on top of it; they leave the WAL and the next batch takes their place', async (t) => {
  const { engine, hand } = handLeader(t, 2);
  engine.becomeLeader(1);
  const first = put(engine, 'a', '1');
  await hand.sends(1);
  const second = put(engine, 'b', '2');
  await hand.durable(2);
  assert.equal(engine.wal.lastIndex, 2n);
  // As the storage side of the peer agent's link does: a refusal of the oldest refuses all.
  const err = new EtcdError(14, 'etcdserver: leader changed');
  hand.sent[0].reject(err);
  hand.sent[1].reject(err);
  const [r1, r2] = await Promise.all([first, second]);
  for (const r of [r1, r2]) {
    assert.equal(r.code, 14);
    assert.match(r.message!, /outcome is unknown/);
  }
  assert.equal(engine.wal.lastIndex, 0n, 'both were dropped from the WAL');
  assert.deepEqual([engine.appliedIndex, engine.revision, engine.executor.revision], [0, 1, 1]);

  const third = putPrev(engine, 'b', '3');
  await hand.sends(3);
  assert.deepEqual([hand.sent[2].first, hand.sent[2].last], [1, 1], 'the next batch reuses the indices');
  hand.sent[2].resolve();
  const r3 = decode<any>('etcdserverpb.PutResponse', (await third).body!);
  assert.equal(num(r3.header.revision), 2, 'and the revision');
  assert.equal(r3.prevKv, null, 'and does not see the dropped writes');
  assert.equal(liveVersion(engine.db, Buffer.from('a')), undefined);
});

test('a refusal that comes while the next batch waits for its turn before the fsync: that batch is not written', async (t) => {
  const { engine, hand } = handLeader(t, 2);
  const err = new EtcdError(14, 'etcdserver: leader changed');
  engine.replicate = {
    ...hand.replicator,
    send: (first, last) => {
      const acked = hand.replicator.send(first, last);
      // The refusal of the first batch arrives right after the second is handed over, before
      // the second's fsync (the engine yields one event-loop turn there).
      if (hand.sent.length >= 2) for (const s of hand.sent) s.reject(err);
      return acked;
    },
  };
  engine.becomeLeader(1);
  const first = put(engine, 'a', '1');
  await hand.sends(1);
  const second = put(engine, 'b', '2');
  const [r1, r2] = await Promise.all([first, second]);
  assert.deepEqual([r1.code, r2.code], [14, 14]);
  assert.equal(engine.wal.lastIndex, 0n, 'neither is in the WAL');
  assert.equal((await put(engine, 'c', '3')).code, 14, 'the test refuses every later send too');
});

test('--write-pipeline auto: one batch in flight until the peer agent says a follower runs on another machine, then two', async (t) => {
  const { engine, hand } = handLeader(t, 'auto');
  engine.becomeLeader(1);
  const first = put(engine, 'a', '1');
  await hand.durable(1);
  const second = put(engine, 'b', '2');
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(hand.sent.length, 1, 'followers on this machine: one batch in flight');
  hand.sent[0].resolve();
  await first;
  await hand.durable(2);
  engine.followersElsewhere = true;
  const third = put(engine, 'c', '3');
  await hand.durable(3);
  assert.equal(hand.sent.length, 3, 'a follower elsewhere: the next batch goes while one waits');
  hand.sent[1].resolve();
  hand.sent[2].resolve();
  assert.deepEqual((await Promise.all([second, third])).map((r) => r.code), [0, 0]);
});
