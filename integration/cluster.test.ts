// Cluster mode end to end (docs/cluster.md): three real kvs nodes on one local-directory
// object store, etcd clients (the etcd3 package and etcdctl 3.4) on every node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { etcdctl, pollUntil, startEtcdctl } from './harness.js';
import { startCluster, waitForLeader, type ClusterNode } from './cluster.js';

const followersOf = (nodes: ClusterNode[], leader: ClusterNode) => nodes.filter((n) => n !== leader);

test('three nodes: one leader, writes on followers are forwarded, reads on any node see them at once', async (t) => {
  const { nodes } = await startCluster(t, 3);
  const leader = await waitForLeader(nodes);
  const [f1, f2] = followersOf(nodes, leader);

  // A put on a follower returns the leader's answer; a linearizable read on the other follower sees it at once.
  const put = await f1.client.put('k1').value('v1').exec();
  assert.equal(await f2.client.get('k1').string(), 'v1');
  assert.equal(await leader.client.get('k1').string(), 'v1');
  const rev = Number(put.header.revision);
  const got = await f2.client.get('k1').exec();
  assert.equal(Number(got.kvs[0].mod_revision), rev);

  // prev_kv and errors come from the leader as they are.
  const again = await f2.client.put('k1').value('v2').getPrevious();
  assert.equal(again?.value.toString(), 'v1');
  await assert.rejects(f1.client.get('k1').revision(rev + 1000).exec(), /future revision/);

  // A Txn through a follower.
  const txn = await f2.client.if('k1', 'Value', '==', 'v2').then(f2.client.put('k1').value('v3')).else(f2.client.get('k1')).commit();
  assert.equal(txn.succeeded, true);
  assert.equal(await f1.client.get('k1').string(), 'v3');

  // etcdctl: exactly one leader, the same revision on every node once idle, term = the election term.
  const all = nodes.map((n) => n.endpoint).join(',');
  const status = JSON.parse((await etcdctl(all, ['endpoint', 'status', '-w', 'json'])).stdout) as { Endpoint: string; Status: { header: { revision: number; member_id: number; raft_term: number }; leader: number; raftTerm: number } }[];
  assert.equal(status.length, 3);
  assert.equal(status.filter((s) => s.Status.leader === s.Status.header.member_id).length, 1);
  assert.equal(new Set(status.map((s) => s.Status.header.revision)).size, 1);
  assert.equal(new Set(status.map((s) => s.Status.header.raft_term)).size, 1);
  const members = JSON.parse((await etcdctl(f1.endpoint, ['member', 'list', '-w', 'json'])).stdout) as { members: { name: string; peerURLs: string[]; clientURLs: string[] }[] };
  assert.deepEqual(
    members.members.map((m) => m.name).sort(),
    nodes.map((n) => n.id).sort(),
  );
  for (const n of nodes) {
    const m = members.members.find((x) => x.name === n.id)!;
    assert.deepEqual(m.clientURLs, [`http://${n.endpoint}`]);
    assert.deepEqual(m.peerURLs, [`http://127.0.0.1:${n.peerPort}`]);
  }
  // Serializable reads are served locally (etcdctl --consistency=s).
  const s = await etcdctl(f2.endpoint, ['get', 'k1', '--consistency=s', '--print-value-only']);
  assert.equal(s.stdout.trim(), 'v3');
});

test('watches on followers see writes made through other nodes, with the same revisions', async (t) => {
  const { nodes } = await startCluster(t, 3);
  const leader = await waitForLeader(nodes);
  const [f1, f2] = followersOf(nodes, leader);
  const seen: { node: string; key: string; rev: number }[] = [];
  const watchers = await Promise.all(
    nodes.map(async (n) => {
      const w = await n.client.watch().prefix('w/').create();
      w.on('put', (kv) => seen.push({ node: n.id, key: kv.key.toString(), rev: Number(kv.mod_revision) }));
      return w;
    }),
  );
  const revs: number[] = [];
  for (const [i, writer] of [leader, f1, f2, f1].entries()) {
    const r = await writer.client.put(`w/${i}`).value('x').exec();
    revs.push(Number(r.header.revision));
  }
  await pollUntil('every watcher saw every put', async () => (seen.length >= 12 ? true : undefined), 20_000);
  for (const n of nodes) {
    assert.deepEqual(
      seen.filter((e) => e.node === n.id).map((e) => [e.key, e.rev]),
      revs.map((r, i) => [`w/${i}`, r]),
      `the watcher on ${n.id}`,
    );
  }
  await Promise.all(watchers.map((w) => w.cancel()));
});

test('leases across nodes: granted on one, kept alive on another, revoked on a third; Lock across nodes', async (t) => {
  const { nodes } = await startCluster(t, 3);
  const leader = await waitForLeader(nodes);
  const [f1, f2] = followersOf(nodes, leader);
  const lease = f1.client.lease(30, { autoKeepAlive: false });
  const id = BigInt(await lease.grant()).toString(16); // etcdctl takes lease ids in hex
  await lease.put('leased').value('1').exec();
  assert.equal(await f2.client.get('leased').string(), '1');
  const kept = await etcdctl(leader.endpoint, ['lease', 'keep-alive', '--once', id]);
  assert.equal(kept.exitCode, 0, kept.stderr);
  const tl = await etcdctl(f2.endpoint, ['lease', 'timetolive', id, '--keys']);
  assert.match(tl.stdout, /granted with TTL\(30s\), remaining\(\d+s\), attached keys\(\[leased\]\)/);
  const revoked = await etcdctl(f2.endpoint, ['lease', 'revoke', id]);
  assert.equal(revoked.exitCode, 0, revoked.stderr);
  assert.equal(await leader.client.get('leased').string(), null);

  // Lock (etcd's Lock service): held through one follower, a waiter on the other follower gets it
  // once the first lets go.
  const holder = await startEtcdctl(t, f1.endpoint, ['lock', 'the-lock']);
  await holder.until((out: string) => out.includes('the-lock/'));
  const waiter = await startEtcdctl(t, f2.endpoint, ['lock', 'the-lock', 'echo', 'waiter got it']);
  await pollUntil('the waiter queued', async () => ((await leader.client.getAll().prefix('the-lock/').keys()).length === 2 ? true : undefined), 20_000);
  assert.doesNotMatch(waiter.stdout(), /waiter got it/);
  await holder.stop();
  await waiter.until((out: string) => out.includes('waiter got it'));
});
