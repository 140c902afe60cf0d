// Fencing rule "No decision compares two machines' clocks"
// (docs/cluster.md#failover-and-the-safety-rules; the design's "Liveness and fencing"): a
// follower takes over only after it has
// itself seen the lock unchanged (same ETag) for the liveness TTL on its own monotonic clock,
// after its retries ran out — whatever its wall clock says about the lock's LastSeenNano.
//
// Checked to fail without the rule: with follower.ts's own-observation condition removed from
// the takeover (`now - this.observed.since < need ||` deleted in dist/services/peer/follower.js,
// source untouched), the follower an hour ahead took the lock from the live leader about a
// second after the cut, and the test failed at "the follower took the lock from a live leader".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster } from '../testkit/node-cluster.js';
import { fakeClock } from './fake-clock.js';
import { LockWatch, onceClient, within } from './fencing-helpers.js';
import { pollUntil } from '../testkit/harness.js';

// A leader with a disconnected follower touches its lock every 1.5 s (a third of the TTL).
const TTL_MS = 4500;

test('a follower whose wall clock is an hour ahead never takes over from a live leader it cannot reach, and after the leader dies only once it saw the lock still for the TTL', async (t) => {
  const clock = await fakeClock(t);
  // n2's wall clock (Date.now: the LastSeenNano it compares) an hour ahead; its monotonic clock
  // stays real (fake-clock.ts sets FAKETIME_DONT_FAKE_MONOTONIC=1). To n2, every LastSeenNano
  // the leader writes looks an hour old.
  clock.advance(3600);
  const cluster = await startCluster(t, 2, {
    peerProxies: true,
    args: ['--leader-liveness-ttl', `${TTL_MS}ms`],
    nodeEnv: (id) => (id === 'n2' ? clock.env : {}),
  });
  const [n1, n2] = cluster.nodes;
  const watch = await LockWatch.start(t, cluster.objectStore!);
  assert.equal(watch.current.nodeId, 'n1', 'n1 started first and leads');
  const term = watch.current.term;
  const leader = onceClient(t, n1.endpoint);

  // Cut n2 off from the leader's peer port; the leader keeps touching its lock (every 1.5 s).
  n1.peerProxy!.set('refuse');
  const cutAt = performance.now();
  const versionsAtCut = watch.versions.length;
  await pollUntil('n2 watching the lock of the leader it cannot reach', async () => (/the leader is unreachable; watching its lock/.test(n2.kvs.output()) ? true : undefined), 20_000);

  // Three TTLs (the follower's 3 retries of 300 ms ran out long before): the leader stays the
  // leader and acknowledges writes all along, and n2 never takes the lock.
  let acked = 0;
  while (performance.now() - cutAt < 3 * TTL_MS) {
    await leader.put(`clock/${acked}`).value('v').options(within(10_000)).exec();
    acked++;
    assert.ok(watch.versions.every((v) => v.nodeId === 'n1' && v.term === term), `the follower took the lock from a live leader: ${JSON.stringify(watch.versions.slice(-3))}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(watch.versions.length - versionsAtCut >= 4, `the leader touched its lock while cut off (saw ${watch.versions.length - versionsAtCut} versions)`);
  assert.ok(acked > 10, `the leader acknowledged writes while cut off (${acked})`);
  assert.equal((await leader.maintenance.status(within(5000))).raftTerm, String(term), 'the leader\'s term is unchanged');

  // Now the leader really dies. Its last touch is the lock version n2 saw last; n2 may take over
  // only once it has seen that version unchanged for the TTL on its own monotonic clock.
  await n1.kvs.kill9();
  const killedAt = performance.now();
  const lastOfN1 = watch.current;
  const since = watch.versions.length;
  const taken = await watch.next((v) => v.nodeId === 'n2', 30_000, since);
  assert.equal(watch.versions[since - 1]!.etag, lastOfN1.etag, 'no version between the leader\'s last touch and the takeover');
  const stillFor = taken.seenAt - lastOfN1.seenAt;
  // lastOfN1 was seen at most one watch period (plus a read) after it was written; n2 first saw
  // it no earlier than it was written.
  assert.ok(stillFor >= TTL_MS - 2 * watch.everyMs - 50, `n2 took over ${Math.round(stillFor)} ms after the leader's last touch, before the ${TTL_MS} ms TTL`);
  assert.ok(taken.seenAt - killedAt < TTL_MS + 8000, `n2 took over ${Math.round(taken.seenAt - killedAt)} ms after the leader died`);
  assert.ok(taken.term > term);
  t.diagnostic(`lock still for ${Math.round(stillFor)} ms before n2 took it (TTL ${TTL_MS} ms); ${Math.round(taken.seenAt - killedAt)} ms after the kill`);

  // n2 leads with everything n1 acknowledged.
  const next = onceClient(t, n2.endpoint);
  await pollUntil('n2 answering writes as leader', () => next.put('clock/after').value('v').options(within(5000)).exec().then(() => true, () => undefined), 30_000);
  const keys = await next.getAll().prefix('clock/').options(within(10_000)).keys();
  for (let i = 0; i < acked; i++) assert.ok(keys.includes(`clock/${i}`), `clock/${i}, acknowledged by n1, is missing on n2`);
});

// The same rule, the other way: a follower behind the leader's wall clock must still take over
// from a dead leader after its own observation. Found by this test: follower.ts's checkLock also
// required `lastSeenAgeMs >= ttl`, the follower's Date.now() minus the LastSeenNano the leader
// wrote with its own clock, which for a follower an hour behind stayed negative for an hour (no
// takeover within TTL + 20 s). A stamp in the follower's future no longer holds it back.
test('a follower whose wall clock is an hour behind takes over from a dead leader once it saw the lock still for the TTL', async (t) => {
  const clock = await fakeClock(t);
  // To n2, every LastSeenNano the leader writes lies an hour in the future.
  clock.advance(-3600);
  const cluster = await startCluster(t, 2, { args: ['--leader-liveness-ttl', `${TTL_MS}ms`], nodeEnv: (id) => (id === 'n2' ? clock.env : {}) });
  const [n1, n2] = cluster.nodes;
  const watch = await LockWatch.start(t, cluster.objectStore!);
  assert.equal(watch.current.nodeId, 'n1', 'n1 started first and leads');
  const term = watch.current.term;
  await n1.client.put('behind/0').value('v').exec();

  await n1.kvs.kill9();
  const killedAt = performance.now();
  const lastOfN1 = watch.current;
  const taken = await watch.next((v) => v.nodeId === 'n2', TTL_MS + 20_000, watch.versions.length);
  const stillFor = taken.seenAt - lastOfN1.seenAt;
  t.diagnostic(`n2 took over ${Math.round(taken.seenAt - killedAt)} ms after the kill`);
  assert.ok(stillFor >= TTL_MS - 2 * watch.everyMs - 50, `n2 took over ${Math.round(stillFor)} ms after the leader's last lock write, before the ${TTL_MS} ms TTL`);
  assert.ok(taken.term > term);
  const next = onceClient(t, n2.endpoint);
  await pollUntil('n2 answering as leader', () => next.get('behind/0').options(within(5000)).string().then((v) => (v === 'v' ? true : undefined), () => undefined), 30_000);
});
