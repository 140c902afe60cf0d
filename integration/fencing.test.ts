// The fencing rules of the cluster (docs/cluster.md#failover-and-the-safety-rules), each shown
// on real nodes in the way that would break without it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { etcdctl } from '../testkit/harness.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';

test('a follower that lost its leader serves serializable reads and refuses linearizable ones (and writes) until it has a leader again', async (t) => {
  // A liveness TTL long enough that no follower takes over during the test.
  const { nodes } = await startCluster(t, 2, { args: ['--leader-liveness-ttl', '60s'] });
  const leader = await waitForLeader(nodes);
  const follower = nodes.find((n) => n !== leader)!;
  await leader.client.put('fenced').value('before').exec();
  assert.equal(await follower.client.get('fenced').string(), 'before');

  await leader.kvs.kill9();
  const serializable = await etcdctl(follower.endpoint, ['get', 'fenced', '--consistency=s', '--print-value-only']);
  assert.equal(serializable.exitCode, 0, serializable.stderr);
  assert.equal(serializable.stdout.trim(), 'before', 'a serializable read is served from the follower\'s own state');
  // Linearizable: the follower cannot know the leader's revision; it waits for a leader (a few
  // seconds), then answers etcd's retryable "no leader", never its own possibly stale state.
  const linearizable = await etcdctl(follower.endpoint, ['get', 'fenced', '--command-timeout=20s']);
  assert.notEqual(linearizable.exitCode, 0, `a linearizable read without a leader was answered: ${linearizable.stdout}`);
  assert.match(linearizable.stderr, /etcdserver: no leader/);
  const write = await etcdctl(follower.endpoint, ['put', 'fenced', 'after', '--command-timeout=20s']);
  assert.notEqual(write.exitCode, 0, 'a write without a leader was acknowledged');
  assert.match(write.stderr, /etcdserver: no leader/);

  // The leader back: both work again, and the refused write is nowhere.
  await leader.kvs.restart();
  await waitForLeader(nodes);
  const back = await etcdctl(follower.endpoint, ['get', 'fenced', '--print-value-only']);
  assert.equal(back.exitCode, 0, back.stderr);
  assert.equal(back.stdout.trim(), 'before');
});
