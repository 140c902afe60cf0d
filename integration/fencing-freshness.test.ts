// Fencing rule "A leader proves it still leads before it acknowledges what a new leader could
// miss" (docs/cluster.md; the design's "Liveness and fencing"): once a follower is disconnected,
// the leader touches its lock every 1.5 s (a third of the TTL) and acknowledges writes and answers linearizable reads
// only while its last successful touch is younger than the liveness TTL minus a margin. Shown
// on a leader cut off from both followers (peer proxies) and from the object store (its own
// local-store failpoint, KVS_FAILPOINT_OBJECTSTORE): the followers take over a TTL after its
// last touch, so anything it answered later could miss what the new leader acknowledged.
//
// Checked to fail without the rule: with Leadership.fresh() returning true (dist/services/peer/
// leader.js patched, source untouched), the cut-off leader kept answering linearizable reads
// from its own state after the new leader had taken over, and the test failed at "answered a
// linearizable read ... after the cut".
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startCluster } from '../testkit/node-cluster.js';
import { LockWatch, NO_LEADER, onceClient, within } from './fencing-helpers.js';
import { pollUntil, tempDir } from '../testkit/harness.js';
import { FAILPOINT_ENV } from '../shared/objectstore/failpoint.js';

// The leader's margin is a third of it, and so is the time between its touches.
const TTL_MS = 4500;

interface Outcome {
  op: string;
  startedAt: number;
  endedAt: number;
  ok: boolean;
  error?: string;
  value?: string;
}

/** Three nodes behind peer proxies; n1 leads, with its own object-store failpoint (`pass`). */
async function leaderWithFailpoint(t: TestContext) {
  const failpoint = path.join(await tempDir(t, 'kvs-fencing-'), 'n1.objectstore-fault');
  await writeFile(failpoint, 'pass\n');
  const cluster = await startCluster(t, 3, {
    peerProxies: true,
    args: ['--leader-liveness-ttl', `${TTL_MS}ms`],
    nodeEnv: (id): Record<string, string> => (id === 'n1' ? { [FAILPOINT_ENV]: failpoint } : {}),
  });
  const [n1] = cluster.nodes;
  const watch = await LockWatch.start(t, cluster.objectStore!);
  assert.equal(watch.current.nodeId, 'n1', 'n1 started first and leads');
  return { cluster, n1, watch, failpoint };
}

test('a leader cut off from its followers and the object store stops acknowledging writes and answering linearizable reads within the TTL of its last lock touch; a follower takes over with every write it acknowledged', async (t) => {
  const { cluster, n1, watch, failpoint } = await leaderWithFailpoint(t);

  // One follower disconnected: the leader is degraded and touches its lock every 1.5 s.
  n1.peerProxy!.setFor('n3', 'refuse');
  const before = watch.versions.length;
  await watch.next((v) => v.nodeId === 'n1', 10_000, before + 2);

  // A writer and a linearizable reader on the leader, each one call at a time, for the whole test.
  const writer = onceClient(t, n1.endpoint);
  const reader = onceClient(t, n1.endpoint);
  const outcomes: Outcome[] = [];
  /** Calls out, and when each was issued. */
  const inFlight = new Map<string, number>();
  // Writes the old leader took while it could still think it led (issued before the TTL after
  // the cut); later ones wait for a leader like any write on a node without one, and may be
  // forwarded to the new leader after the heal.
  let cutAt = Infinity;
  const pendingWrites = () => [...inFlight].filter(([op, at]) => op.startsWith('put') && at < cutAt + TTL_MS).length;
  let running = true;
  const loop = async (op: string, call: (i: number) => Promise<string | undefined>) => {
    for (let i = 0; running; i++) {
      const startedAt = performance.now();
      inFlight.set(`${op} ${i}`, startedAt);
      try {
        const value = await call(i);
        outcomes.push({ op: `${op} ${i}`, startedAt, endedAt: performance.now(), ok: true, value });
      } catch (err) {
        outcomes.push({ op: `${op} ${i}`, startedAt, endedAt: performance.now(), ok: false, error: (err as Error).message });
      }
      inFlight.delete(`${op} ${i}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const loops = [
    loop('put', (i) => writer.put(`fresh/${i}`).value('v').options(within(30_000)).exec().then(() => undefined)),
    loop('get', () => reader.get('fresh/new-leader').options(within(30_000)).string().then((v) => v ?? '')),
  ];
  await pollUntil('writes and reads acknowledged by the degraded leader', async () => (outcomes.filter((o) => o.ok).length >= 6 ? true : undefined), 20_000);

  // The cut: no follower, no object store. Its last successful touch is at most 1.5 s old.
  await writeFile(failpoint, 'refuse\n');
  n1.peerProxy!.set('refuse');
  cutAt = performance.now();
  // Writes issued on the old leader once the TTL is over (each on its own, not behind the writer's).
  const lateWrites = (async () => {
    await new Promise((r) => setTimeout(r, TTL_MS));
    const late = onceClient(t, n1.endpoint);
    await Promise.all([0, 1].map(async (i) => {
      const startedAt = performance.now();
      inFlight.set(`put late-${i}`, startedAt);
      const r = await late.put(`fresh/late-${i}`).value('v').options(within(30_000)).exec().then(() => undefined, (err: Error) => err.message);
      outcomes.push({ op: `put late-${i}`, startedAt, endedAt: performance.now(), ok: r === undefined, error: r });
      inFlight.delete(`put late-${i}`);
    }));
  })();

  // A follower takes over (it saw the lock still for the TTL); it acknowledges a write.
  const taken = await watch.next((v) => v.nodeId !== 'n1', 30_000);
  const lastTouch = watch.versions.filter((v) => v.nodeId === 'n1' && v.seenAt < taken.seenAt).pop()!;
  const fresh = cluster.nodes.find((n) => n.id === taken.nodeId)!;
  const next = onceClient(t, fresh.endpoint);
  await pollUntil('the new leader acknowledging a write', () => next.put('fresh/new-leader').value('yes').options(within(5000)).exec().then(() => true, () => undefined), 30_000);
  // Reads issued after the TTL get their answer (the old leader's ReadIndex retries 3 s).
  await pollUntil('reads issued on the old leader after the TTL, answered', async () => (outcomes.some((o) => o.op.startsWith('get') && o.startedAt > cutAt + TTL_MS + 1000) ? true : undefined), 20_000);
  // By twice the TTL after the cut every write on the old leader should have had its answer.
  const writesSettled = await pollUntil('every write on the old leader answered', async () => (pendingWrites() === 0 ? true : undefined), Math.max(0, cutAt + 2 * TTL_MS + 1000 - performance.now())).then(() => true, () => false);
  const pendingAtTwoTtl = pendingWrites();
  running = false;
  await loops[1];

  // Heal: the old leader finds its lock taken and follows; what it had in flight fails.
  await writeFile(failpoint, 'pass\n');
  n1.peerProxy!.heal();
  const healedAt = performance.now();
  await Promise.all([loops[0], lateWrites]);
  const rel = (ms: number) => Math.round(ms - cutAt);
  const log = outcomes.map((o) => `${o.op} [${rel(o.startedAt)}, ${rel(o.endedAt)}] ${o.ok ? `ok ${o.value ?? ''}` : o.error}`).join('\n');
  t.diagnostic(`last lock touch seen ${rel(lastTouch.seenAt)} ms after the cut; takeover by ${taken.nodeId} seen ${rel(taken.seenAt)} ms after the cut; healed at ${rel(healedAt)} ms`);

  const answeredBeforeHeal = outcomes.filter((o) => o.endedAt < healedAt);
  for (const o of answeredBeforeHeal) {
    // Nothing answered successfully once its last lock touch was TTL minus a third old (a
    // touch is seen here at most a watch period after it was written; 250 ms of slack for the
    // answer to travel), and so nothing after the takeover, which came a TTL after that touch.
    if (o.ok) assert.ok(o.endedAt < lastTouch.seenAt + (TTL_MS * 2) / 3 + 250, `the old leader answered ${o.op} ${rel(o.endedAt)} ms after the cut, ${Math.round(o.endedAt - lastTouch.seenAt)} ms after its last lock touch (TTL ${TTL_MS} ms less a third):\n${log}`);
    if (o.ok) assert.ok(o.endedAt < taken.seenAt, `the old leader answered ${o.op} after the takeover:\n${log}`);
    if (o.ok && o.op.startsWith('get')) assert.equal(o.value, '', `a linearizable read on the old leader saw the new leader's write:\n${log}`);
    // What failed, failed with etcd's retryable no-leader family (not a deadline, not a crash).
    if (!o.ok) assert.match(o.error!, NO_LEADER, `${o.op} failed otherwise:\n${log}`);
  }
  // Linearizable reads issued once the TTL was over are refused, promptly (the ReadIndex retry
  // of 3 s, plus slack).
  const lateReads = outcomes.filter((o) => o.op.startsWith('get') && o.startedAt > cutAt + TTL_MS && o.endedAt < healedAt);
  assert.ok(lateReads.length > 0);
  for (const o of lateReads) assert.ok(!o.ok && o.endedAt - o.startedAt < 5000, `${o.op} on the old leader:\n${log}`);
  assert.ok(outcomes.some((o) => o.op.startsWith('put') && o.startedAt < cutAt && o.ok), 'writes were acknowledged before the cut');
  // No write issued on the old leader after the TTL succeeded, whenever it was answered.
  for (const o of outcomes) if (o.op.startsWith('put late')) assert.ok(!o.ok, `${o.op} was acknowledged by the old leader:\n${log}`);

  // Found by this test: a batch asked to go to the object store first while the lock was fresh
  // waited for the store forever, and every later write queued behind it (leader.ts evaluate()
  // now fails it after twice the TTL and ends the term).
  await t.test('writes on the cut-off leader fail with a retryable error within twice the TTL of the cut', () => {
    assert.ok(writesSettled, `${pendingAtTwoTtl} writes still unanswered ${2 * TTL_MS + 1000} ms after the cut:\n${log}`);
  });

  // Every write the old leader acknowledged is on the new leader.
  const keys = new Set(await next.getAll().prefix('fresh/').options(within(10_000)).keys());
  for (const o of outcomes) if (o.ok && o.op.startsWith('put')) assert.ok(keys.has(`fresh/${o.op.split(' ')[1]}`), `${o.op}, acknowledged by the old leader, is missing on the new leader`);
  // And the old leader, back, follows it.
  await pollUntil('the old leader following the new one', async () => ((await onceClient(t, n1.endpoint).get('fresh/new-leader').options(within(5000)).string().catch(() => undefined)) === 'yes' ? true : undefined), 30_000);
});

// The same rule for a Txn whose outcome writes nothing (a failed compare, then a read): storage
// executes it like a write, but with nothing to replicate it used to answer at once from its own
// state, so a cut-off leader with no write in flight answered such Txns after a follower had
// taken over. Now it waits for its peer agent's ReadIndex check (Confirm). Checked to fail
// without it: with the Confirm skipped (storage's engine/leader-pipeline.ts answering a batch that wrote
// nothing at once), the cut-off leader answered read-only Txns after the takeover.
test('a leader cut off from its followers and the object store answers read-only Txns only while its lock is surely its own', async (t) => {
  const { cluster, n1, watch, failpoint } = await leaderWithFailpoint(t);
  await n1.client.put('txn/k').value('old').exec();
  n1.peerProxy!.setFor('n3', 'refuse');
  await watch.next((v) => v.nodeId === 'n1', 10_000, watch.versions.length + 2);

  // Read-only Txns on the leader, one at a time; no write is in flight when the cut comes.
  const c = onceClient(t, n1.endpoint);
  const outcomes: Outcome[] = [];
  let running = true;
  const loop = (async () => {
    for (let i = 0; running; i++) {
      const startedAt = performance.now();
      try {
        const r = await c.if('txn/k', 'Value', '==', 'never').then(c.put('txn/k').value('never')).else(c.get('txn/k')).options(within(30_000)).commit();
        const value = r.responses[0]?.response_range?.kvs[0]?.value.toString() ?? '';
        outcomes.push({ op: `txn ${i}`, startedAt, endedAt: performance.now(), ok: true, value });
      } catch (err) {
        outcomes.push({ op: `txn ${i}`, startedAt, endedAt: performance.now(), ok: false, error: (err as Error).message });
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  await pollUntil('read-only Txns answered by the leader', async () => (outcomes.filter((o) => o.ok).length >= 5 ? true : undefined), 20_000);

  await writeFile(failpoint, 'refuse\n');
  n1.peerProxy!.set('refuse');
  const cutAt = performance.now();
  const taken = await watch.next((v) => v.nodeId !== 'n1', 30_000);
  const lastTouch = watch.versions.filter((v) => v.nodeId === 'n1' && v.seenAt < taken.seenAt).pop()!;
  const next = onceClient(t, cluster.nodes.find((n) => n.id === taken.nodeId)!.endpoint);
  await pollUntil('the new leader acknowledging a write', () => next.put('txn/k').value('new').options(within(5000)).exec().then(() => true, () => undefined), 30_000);
  // Txns issued well after the takeover have had their answer.
  const afterTakeover = taken.seenAt + 1000;
  await pollUntil('Txns issued after the takeover, answered', async () => (outcomes.some((o) => o.startedAt > afterTakeover) ? true : undefined), 20_000);
  running = false;
  await loop;
  await writeFile(failpoint, 'pass\n');
  n1.peerProxy!.heal();

  const rel = (ms: number) => Math.round(ms - cutAt);
  const log = outcomes.map((o) => `${o.op} [${rel(o.startedAt)}, ${rel(o.endedAt)}] ${o.ok ? `ok ${o.value}` : o.error}`).join('\n');
  t.diagnostic(`last lock touch seen ${rel(lastTouch.seenAt)} ms after the cut; takeover by ${taken.nodeId} seen ${rel(taken.seenAt)} ms after the cut`);
  for (const o of outcomes) {
    if (o.ok) {
      assert.ok(o.endedAt < lastTouch.seenAt + (TTL_MS * 2) / 3 + 250, `the old leader answered ${o.op} ${rel(o.endedAt)} ms after the cut, ${Math.round(o.endedAt - lastTouch.seenAt)} ms after its last lock touch:\n${log}`);
      assert.equal(o.value, 'old', `${o.op}:\n${log}`);
    } else assert.match(o.error!, NO_LEADER, `${o.op} failed otherwise:\n${log}`);
  }
  assert.ok(outcomes.some((o) => !o.ok && o.startedAt > afterTakeover), `no Txn issued after the takeover was refused:\n${log}`);
});

// A short TTL (the tests' 1.5 s, shorter than the spec's 2 s between touches): the leader
// touches its lock every third of the TTL once a follower is cut off. With touches every 2 s
// (before), the leader acknowledged writes only in the first second after each touch: checked
// by patching dist/, writes then waited up to 1.5 s and half as many were acknowledged. The
// cut-off follower could also see the lock unchanged for longer than the TTL and take over from
// a live leader (not seen in that run).
test('with a liveness TTL under the 2 s touch interval, a follower cut off from a live leader never takes over, and the leader keeps acknowledging writes', async (t) => {
  const cluster = await startCluster(t, 3, { peerProxies: true }); // FAST_FAILOVER: TTL 1.5 s
  const [n1] = cluster.nodes;
  const watch = await LockWatch.start(t, cluster.objectStore!);
  assert.equal(watch.current.nodeId, 'n1');
  n1.peerProxy!.setFor('n3', 'refuse');
  const writer = onceClient(t, n1.endpoint);
  const until = performance.now() + 12_000;
  let last = performance.now();
  let longest = 0;
  let acked = 0;
  const failures: string[] = [];
  while (performance.now() < until) {
    try {
      await writer.put(`short/${acked}`).value('v').options(within(10_000)).exec();
      acked++;
      longest = Math.max(longest, performance.now() - last);
      last = performance.now();
    } catch (err) {
      failures.push((err as Error).message);
    }
  }
  const holders = [...new Set(watch.versions.map((v) => v.nodeId))];
  assert.deepEqual(holders, ['n1'], `the lock changed hands: ${JSON.stringify(watch.versions.slice(-5))}`);
  assert.deepEqual(failures, []);
  t.diagnostic(`${acked} writes acknowledged, longest wait ${Math.round(longest)} ms, ${watch.versions.length - 1} touches`);
  assert.ok(longest < 1000, `a write waited ${Math.round(longest)} ms (${watch.versions.length - 1} lock touches in 12 s)`);
});
