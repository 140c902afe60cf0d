// Operating a cluster: its metrics and readiness, a follower that fell out of the leader's
// buffer of recent entries, and restarting one component of a node (docs/cluster.md).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { freePort, objectStoreArgs, pollUntil } from '../testkit/harness.js';
import { checkpoint } from './archiver-scenarios.js';
import { kvs, ok } from './objectstore-fixtures.js';
import { leaderEpoch, startCluster, waitForLeader, type ClusterNode } from '../testkit/node-cluster.js';
import { status } from '@grpc/grpc-js';
import { get, scrape, value } from '../testkit/metrics-scrape.js';
import { PeerChannel, peerCredentials } from '../services/peer/transport.js';
import { createLogger } from '../shared/log.js';

async function withMetrics() {
  const addrs = new Map<string, string>();
  const nodeArgs = async (id: string) => {
    const addr = `127.0.0.1:${await freePort()}`;
    addrs.set(id, addr);
    return ['--metrics-addr', addr];
  };
  return { addrs, nodeArgs };
}

/**
 * `count` nodes keeping a buffer of 5 entries, one follower paused (SIGSTOP: not restarted,
 * which would fetch the uploaded WAL at boot) until the leader has dropped it.
 */
async function clusterWithPausedFollower(t: TestContext, count: number) {
  const { addrs, nodeArgs } = await withMetrics();
  const cluster = await startCluster(t, count, { nodeArgs, args: ['--peer-buffer-size', '5'] });
  const leader = await waitForLeader(cluster.nodes);
  const paused = cluster.nodes.find((n) => n !== leader)!;
  process.kill(-paused.kvs.pid, 'SIGSTOP');
  let resumed = false;
  t.after(() => {
    if (!resumed) process.kill(-paused.kvs.pid, 'SIGCONT');
  });
  await pollUntil('the leader drops the paused follower', async () => (value(await scrape(addrs.get(leader.id)!), 'kvs_replication_degraded') === 1 ? true : undefined), 20_000);
  const resume = () => {
    process.kill(-paused.kvs.pid, 'SIGCONT');
    resumed = true;
  };
  return { ...cluster, addrs, leader, paused, resume };
}

test('cluster metrics and /readyz: role, elections, forwarded writes, degraded replication', async (t) => {
  const { addrs, nodeArgs } = await withMetrics();
  const { nodes } = await startCluster(t, 3, { nodeArgs });
  const leader = await waitForLeader(nodes);
  const followers = nodes.filter((n) => n !== leader);
  const addr = (n: ClusterNode) => addrs.get(n.id)!;

  for (const n of nodes) {
    await pollUntil(`/readyz on ${n.id}`, async () => ((await get(addr(n), '/readyz')).status === 200 ? true : undefined), 30_000);
    const m = await scrape(addr(n));
    const role = n === leader ? 'leader' : 'follower';
    assert.equal(value(m, 'kvs_role', { role }), 1, `${n.id} is ${role}`);
    assert.equal(value(m, 'kvs_role', { role: 'single' }), 0);
  }
  assert.ok((value(await scrape(addr(leader)), 'kvs_elections_total', { outcome: 'won' }) ?? 0) >= 1);

  await followers[0].client.put('via-follower').value('1').exec();
  const fm = await scrape(addr(followers[0]));
  assert.equal(value(fm, 'kvs_forwarded_writes_total', { op: 'put' }), 1);
  assert.equal(value(fm, 'kvs_forward_duration_seconds_count', { op: 'put' }), 1);

  // Every follower ACKs: not degraded. One gone: the leader uploads each batch first.
  await pollUntil('not degraded', async () => (value(await scrape(addr(leader)), 'kvs_replication_degraded') === 0 ? true : undefined), 20_000);
  await followers[1].kvs.kill9();
  await pollUntil('degraded', async () => (value(await scrape(addr(leader)), 'kvs_replication_degraded') === 1 ? true : undefined), 20_000);
  await leader.client.put('while-degraded').value('1').exec();
  assert.equal(await followers[0].client.get('while-degraded').string(), '1');
});

test('a follower that fell out of the leader\'s buffer catches up from the object store (ring_buffer_miss)', async (t) => {
  const { addrs, leader, paused: follower, resume } = await clusterWithPausedFollower(t, 2);
  // The leader writes on, and trims its buffer of 5 entries far past the paused follower.
  for (let i = 0; i < 50; i++) await leader.client.put(`away/${i}`).value(String(i)).exec();
  resume();
  await pollUntil('the follower has every key', async () => ((await follower.client.getAll().prefix('away/').keys()).length === 50 ? true : undefined), 60_000);
  const m = await scrape(addrs.get(follower.id)!);
  assert.ok((value(m, 'kvs_follower_resyncs_total', { reason: 'ring_buffer_miss' }) ?? 0) >= 1, `the resync is counted by reason\n${follower.kvs.output().split('\n').filter((l) => l.includes('"peer"') || l.includes('archiver')).slice(-30).join('\n')}`);
});

test('a follower behind what a new leader held at its election catches up from the object store (behind_leader_start)', async (t) => {
  const { nodes, addrs, leader, paused, resume } = await clusterWithPausedFollower(t, 3);
  const other = nodes.find((n) => n !== leader && n !== paused)!;
  for (let i = 0; i < 30; i++) await leader.client.put(`away/${i}`).value(String(i)).exec();
  // The other follower leads next, its buffer seeded with its last 5 entries and nothing
  // written since: the paused one is behind where that buffer starts, which never moved.
  await leader.kvs.kill9();
  // (A degraded leader touched its lock meanwhile: the in-sync follower still takes over after
  // the TTL, not watch-interval + TTL, which is 300 s here.)
  assert.equal(await waitForLeader([other], 30_000), other);
  resume();
  await pollUntil('the resumed follower has every key', async () => ((await paused.client.getAll().prefix('away/').keys()).length === 30 ? true : undefined), 60_000);
  const m = await scrape(addrs.get(paused.id)!);
  assert.ok((value(m, 'kvs_follower_resyncs_total', { reason: 'behind_leader_start' }) ?? 0) >= 1, `the resync is counted by reason\n${paused.kvs.output().split('\n').filter((l) => l.includes('"peer"')).slice(-30).join('\n')}`);
});

test('a follower too far behind for the uploaded WAL (gc removed it) restores the latest checkpoint by itself and catches up', async (t) => {
  const { objectStore, leader, paused: follower, resume } = await clusterWithPausedFollower(t, 2);
  for (let i = 0; i < 40; i++) await leader.client.put(`gone/${i}`).value(String(i)).exec();
  // A checkpoint covers all of it, and gc removes the WAL the follower would need.
  await checkpoint(leader.kvs);
  const gc = ok(await kvs(['gc', ...objectStoreArgs(objectStore!), '--keep', '1']));
  assert.match(gc, /deleted WAL segments: [1-9]/);
  await leader.client.put('after-gc').value('1').exec();
  resume();
  await pollUntil('the follower has every key', async () => ((await follower.client.getAll().prefix('gone/').keys().catch(() => [])).length === 40 ? true : undefined), 90_000);
  assert.equal(await follower.client.get('after-gc').string(), '1');
  assert.match(follower.kvs.output(), /too far behind to catch up: restoring this node from the latest checkpoint/);
  // It follows on: a later write reaches it.
  await leader.client.put('later').value('2').exec();
  assert.equal(await follower.client.get('later').string(), '2');
});

test('a follower ahead of the leader (stream_gap) is told to catch up from the object store, and the leader serves on', async (t) => {
  const cluster = await startCluster(t, 1);
  const [leader] = cluster.nodes as [ClusterNode];
  await leader.client.put('k').value('v').exec();
  const creds = peerCredentials({}, createLogger('test'));
  // A caller that did not find this leadership in the lock (another cluster's node on a reused
  // address, a stale view) is refused before anything else.
  const stranger = new PeerChannel(`127.0.0.1:${leader.peerPort}`, creds, 'another-epoch');
  t.after(() => stranger.close());
  const refused = await new Promise<{ code?: number; details?: string }>((resolve) => {
    const s = stranger.follow();
    s.on('error', resolve);
    s.on('data', () => {});
    s.write({ hello: { member: { nodeId: 'stranger', memberId: 8, peerUrl: '127.0.0.1:1', clientUrl: 'http://127.0.0.1:1' }, fromIndex: 1 } });
  });
  assert.equal(refused.code, status.FAILED_PRECONDITION, String(refused.details));
  const forward: { code?: number } = await stranger.getRevision(5000).then(() => ({}), (err: { code?: number }) => err);
  assert.equal(forward.code, status.UNAVAILABLE, 'GetRevision for another leadership is refused');

  const client = new PeerChannel(`127.0.0.1:${leader.peerPort}`, creds, await leaderEpoch(cluster));
  t.after(() => client.close());
  const call = client.follow<unknown, { resync: string; term: unknown }>();
  const first = new Promise<{ resync: string; term: unknown }>((resolve, reject) => {
    call.on('data', resolve);
    call.on('error', reject);
  });
  call.write({ hello: { member: { nodeId: 'intruder', memberId: 7, peerUrl: '127.0.0.1:1', clientUrl: 'http://127.0.0.1:1' }, fromIndex: 1_000_000 } });
  const msg = await first;
  assert.equal(msg.resync, 'stream_gap');
  call.cancel();
  assert.equal(await leader.client.get('k').string(), 'v');
  await leader.client.put('k').value('w').exec();
  assert.equal((await leader.client.maintenance.status()).leader, (await leader.client.maintenance.status()).header.member_id, 'still the leader');
});

test('kvs ctl restart peer (and storage) on the leader and a follower loses no acknowledged write', async (t) => {
  const { nodes } = await startCluster(t, 3);
  const leader = await waitForLeader(nodes);
  const follower = nodes.find((n) => n !== leader)!;
  const written: string[] = [];
  for (const [n, component] of [[follower, 'peer'], [follower, 'storage'], [leader, 'peer'], [leader, 'storage']] as const) {
    await n.client.put(`before-${n.id}-${component}`).value('1').exec();
    written.push(`before-${n.id}-${component}`);
    const r = await n.kvs.ctl(['restart', component]);
    assert.equal(r.exitCode, 0, r.stderr);
    const now = await waitForLeader(nodes);
    await pollUntil('writes taken again', async () => {
      try {
        await now.client.put(`after-${n.id}-${component}`).value('1').exec();
        return true;
      } catch {
        return undefined;
      }
    }, 30_000);
    written.push(`after-${n.id}-${component}`);
  }
  for (const n of nodes) for (const k of written) assert.equal(await n.client.get(k).string(), '1', `${k} on ${n.id}`);
});
