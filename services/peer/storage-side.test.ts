import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createLogger } from '../../shared/log.js';
import { UnixStreamChannel } from '../../shared/grpc/stream-channel.js';
import { Role, StorageSide } from './storage-side.js';
import { ATTACH, agentSocket } from '../../testkit/peer-attach.js';

const log = createLogger('test', 'silent');

test('a storage that detaches before answering a role change fails the call waiting for its answer; a restarted one attaches afresh', async (t) => {
  const side = new StorageSide(log);
  const socket = await agentSocket(t, side);
  const hello = { hello: { appliedIndex: 3, lastIndex: 4, revision: 5 } };

  // Storage attaches, then goes away (its process died) with a role change unanswered: the
  // step-down of a term that ended (services/peer/main.ts) must not wait for it forever.
  const first = new UnixStreamChannel(socket);
  const call = first.stream(ATTACH);
  call.on('error', () => {});
  call.write(hello);
  await once(side, 'attached');
  const roles: number[] = [];
  call.on('data', (m) => m.role && roles.push(m.role.role));
  const stepDown = side.setRole(Role.UNKNOWN, 1);
  await new Promise<void>((resolve) => call.on('data', () => resolve()));
  assert.deepEqual(roles, [Role.UNKNOWN], 'storage was told its role');
  first.close();
  await assert.rejects(stepDown, /storage detached/);
  assert.equal(side.attached, false);
  await assert.rejects(side.setRole(Role.UNKNOWN, 1), /storage is not attached/);

  // The restarted storage attaches; a role change is answered by its progress.
  const second = new UnixStreamChannel(socket);
  t.after(() => second.close());
  const again = second.stream(ATTACH);
  again.on('error', () => {});
  again.on('data', (m) => {
    if (m.role) again.write({ progress: { durableThrough: 4, appliedThrough: 4, revision: 6 } });
  });
  again.write(hello);
  const [progress] = await once(side, 'attached');
  assert.deepEqual(progress, { durableThrough: 4, appliedThrough: 3, revision: 5 });
  assert.deepEqual(await side.setRole(Role.FOLLOWER, 2), { durableThrough: 4, appliedThrough: 4, revision: 6 });
});

