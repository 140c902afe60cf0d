import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { createLogger } from '../../shared/log.js';
import { LocalObjectStore } from '../../shared/objectstore/local.js';
import { FailpointStore } from '../../shared/objectstore/failpoint.js';
import { LeaderLock, newEpoch, nowNano } from './lock.js';
import { StateBoard, type Member } from './state.js';
import { StorageSide } from './storage-side.js';
import { Leadership, type LeaderEnd } from './leader.js';
import { storageEnd, type AgentMessage } from '../../testkit/peer-attach.js';

const log = createLogger('test', 'silent');
const TTL_MS = 1500;

test('a batch uploaded first, whose lock can then no longer be proven, fails and ends the term: its indices are not reused in it', async (t) => {
  // The object store (a local directory) behind a failpoint: `refuse` fails every lock touch.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-leader-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const failpoint = path.join(dir, 'failpoint');
  const store = new FailpointStore(new LocalObjectStore({ root: path.join(dir, 'objects'), bucket: 'b', prefix: '' }), failpoint);
  const lock = new LeaderLock(store);
  const self: Member = { nodeId: 'n1', memberId: '1', peerUrl: 'http://127.0.0.1:1', clientUrl: 'http://127.0.0.1:2' };
  const held = await lock.create({ ...self, term: 1, lastSeenNano: nowNano(), epoch: newEpoch() });
  assert.ok(held);

  // The agent's side of storage's Attach stream, and storage's end of it.
  const side = new StorageSide(log);
  const storage = await storageEnd(t, side);
  const answers: NonNullable<AgentMessage['replicated']>[] = [];
  let answered: (() => void) | undefined;
  storage.on('data', (m: AgentMessage) => {
    if (m.role) storage.write({ progress: { durableThrough: 0, appliedThrough: 0, revision: 1 } });
    if (m.replicated) {
      answers.push(m.replicated);
      answered?.();
    }
  });
  const nextAnswer = () => new Promise<void>((resolve) => (answered = resolve));
  storage.write({ hello: { appliedIndex: 0, lastIndex: 0, revision: 1 } });
  await side.whenAttached();

  // A leader with no follower: degraded, every batch goes to the object store first.
  const leadership = new Leadership({ self, lock, held, storage: side, board: new StateBoard(), log, bufferSize: 100, ttlMs: TTL_MS, watchIntervalMs: 1000, termStart: 1 });
  let ended: LeaderEnd | undefined;
  const run = leadership.run().then((why) => (ended = why));
  t.after(() => leadership.end('stopped'));

  // Storage sends batch 1 and reports its own fsync: the agent asks for the upload.
  let next = nextAnswer();
  storage.write({ replicate: { first: 1, last: 1, frames: Buffer.alloc(0), revision: 2 } });
  storage.write({ durable: { through: 1 } });
  await next;
  assert.equal(answers[0].uploadFirst, true);

  // The store now refuses the lock's touches (tried every third of the TTL). The upload lands
  // once the lock is no longer provably this node's (its last touch older than two thirds of
  // the TTL) but before twice the TTL has passed: the batch waits for a touch, and at twice the
  // TTL it fails. (Were the upload still out then, the term would end for that reason instead.)
  fs.writeFileSync(failpoint, 'refuse');
  await new Promise((resolve) => setTimeout(resolve, (4 / 3) * TTL_MS));
  next = nextAnswer();
  storage.write({ uploaded: { through: 1 } });
  await next;
  assert.equal(answers[1].code, status.UNAVAILABLE);
  assert.equal(Number(answers[1].through), 1);

  // It may be in the object store: the term ends, so that the next one starts after what the
  // store holds, where a batch resent at index 1 in this term would pass for uploaded.
  await run;
  assert.equal(ended, 'store-unreachable');
});

test('a leader that has just taken over answers a ReadIndex only once storage told it what is committed', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-leader-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const lock = new LeaderLock(new LocalObjectStore({ root: dir, bucket: 'b', prefix: '' }));
  const self: Member = { nodeId: 'n1', memberId: '1', peerUrl: 'http://127.0.0.1:1', clientUrl: 'http://127.0.0.1:2' };
  const held = await lock.create({ ...self, term: 3, lastSeenNano: nowNano(), epoch: newEpoch() });
  assert.ok(held);

  // Storage applies what it staged under the previous leader (through 7) before it answers the
  // role change; the test holds that answer.
  const side = new StorageSide(log);
  const storage = await storageEnd(t, side);
  let roleAsked: (() => void) | undefined;
  storage.on('data', (m: AgentMessage) => m.role && roleAsked?.());
  storage.write({ hello: { appliedIndex: 5, lastIndex: 7, revision: 6 } });
  await side.whenAttached();

  const board = new StateBoard();
  const leadership = new Leadership({ self, lock, held, storage: side, board, log, bufferSize: 100, ttlMs: TTL_MS, watchIntervalMs: 1000, termStart: 8 });
  const asked = new Promise<void>((resolve) => (roleAsked = resolve));
  void leadership.run();
  t.after(() => leadership.end('stopped'));
  await asked;

  // The lock is this node's, but what is committed is not known yet: a read waiting for what
  // this answered would miss what the previous leader acknowledged (5 < 7).
  assert.throws(() => leadership.readIndex(true), /etcdserver: no leader/);

  // Storage answers; the leadership then publishes itself as leading.
  assert.equal(board.hasLeader, false);
  storage.write({ progress: { durableThrough: 7, appliedThrough: 7, revision: 8 } });
  await board.whenLeader(10_000);
  assert.equal(board.hasLeader, true);
  assert.deepEqual(leadership.readIndex(true), { index: 7, revision: 8, term: 3 });
});
