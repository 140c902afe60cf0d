import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLogger } from '../../shared/log.js';
import { service } from '../../shared/proto/index.js';
import { GrpcServer, type ServerCall } from '../../shared/grpc/server.js';
import { LocalObjectStore } from '../../shared/objectstore/local.js';
import { LeaderLock, newEpoch, nowNano } from './lock.js';
import { StateBoard, type Member } from './state.js';
import { StorageSide } from './storage-side.js';
import { Following } from './follower.js';
import { listenPeer, peerCredentials } from './transport.js';
import { storageEnd, type AgentMessage } from '../../testkit/peer-attach.js';

const log = createLogger('test', 'silent');

test('a follower that reconnects with staged entries ACKs only once storage dropped them: never a position it is about to lose', async (t) => {
  // A leader's peer port whose Follow stream this test writes, and the follower's ACKs on it.
  const acks: number[] = [];
  let leaderCall: ServerCall<any, unknown> | undefined;
  let hello: (() => void) | undefined;
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  server.addService(service('kvs.peer.Peer'), {
    Follow: (call: ServerCall<any, unknown>) => {
      leaderCall = call;
      call.on('data', (m: { hello?: unknown; ack?: { durableThrough: unknown } }) => {
        if (m.hello) hello?.();
        if (m.ack) acks.push(Number(m.ack.durableThrough));
      });
      call.on('error', () => {});
    },
  });
  const creds = peerCredentials({}, log);
  const listener = await listenPeer(server, '127.0.0.1:0', creds, 'n1', log);
  t.after(() => {
    listener.close();
    void server.shutdown(0);
  });

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-follower-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const store = new LocalObjectStore({ root: dir, bucket: 'b', prefix: '' });
  const lock = new LeaderLock(store);
  const leader: Member = { nodeId: 'n1', memberId: '1', peerUrl: `127.0.0.1:${listener.port}`, clientUrl: 'http://127.0.0.1:1' };
  const held = await lock.create({ ...leader, term: 2, lastSeenNano: nowNano(), epoch: newEpoch() });
  assert.ok(held);

  // The follower's storage: applied through 3, and 4..6 staged (fsynced under an earlier
  // leader, never seen committed). It answers a role change at once, but holds its answer to
  // the drop of the staged entries until the test lets it go.
  const side = new StorageSide(log);
  const storage = await storageEnd(t, side);
  let dropAsked: (() => void) | undefined;
  storage.on('data', (m: AgentMessage) => {
    if (!m.role) return;
    if (m.role.dropStaged) dropAsked?.();
    else storage.write({ progress: { durableThrough: 6, appliedThrough: 3, revision: 10 } });
  });
  storage.write({ hello: { appliedIndex: 3, lastIndex: 6, revision: 10 } });
  await side.whenAttached();

  const abort = new AbortController();
  t.after(() => abort.abort());
  const self: Member = { nodeId: 'n2', memberId: '2', peerUrl: '127.0.0.1:9', clientUrl: 'http://127.0.0.1:2' };
  const following = new Following({
    self, lock, held, store, storage: side, board: new StateBoard(), creds, log, maxRetries: 5, retryMs: 2000,
    ttlMs: 6000, watchIntervalMs: 10_000, contact: { term: 2, at: 0 }, signal: abort.signal, tooFarBehind: () => assert.fail('not too far behind'),
  });
  const helloSeen = new Promise<void>((resolve) => (hello = resolve));
  void following.run();
  await helloSeen;

  // The leader's first message (what it has committed: 3). The follower asks storage to drop
  // its staged entries; until storage answers, its durable position still says 6.
  const firstAck = new Promise<void>((resolve) => leaderCall!.on('data', (m: { ack?: unknown }) => m.ack && resolve()));
  const dropSeen = new Promise<void>((resolve) => (dropAsked = resolve));
  leaderCall!.write({ term: 2, commitThrough: 3, members: [leader, self], membersChanged: true });
  await dropSeen;
  assert.equal(side.progress.durableThrough, 6);
  // Storage answers the drop: durable through 3. The first ACK is what is durable after it.
  storage.write({ progress: { durableThrough: 3, appliedThrough: 3, revision: 10 } });
  await firstAck;
  assert.deepEqual(acks, [3], 'no ACK may count the dropped entries 4..6');
  abort.abort();
});
