// Stopping a node, whoever sends the signal: the supervisor alone orders the stop (the peer
// agent hands over first, storage last). A service manager signals every process of the
// node at once (systemd's default KillMode=control-group, `kill -TERM -- -PGID`, a container
// init forwarding to the group); the components ignore that and wait for their supervisor, so a
// cluster leader stopped that way hands over as when its supervisor alone gets the SIGTERM. A
// component whose supervisor is gone (SIGKILL) still stops by itself.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { localObjectStore, objectStoreArgs, startKvs, status, type Ctx } from '../testkit/harness.js';
import { startCluster, waitForLeader, type ClusterNode } from '../testkit/node-cluster.js';
import { rawClient, type RawCall } from '../testkit/raw-client.js';

const ROUNDS = 10;
const HAND_OFF_LIMIT_MS = 2000;
/**
 * Failure detection far slower than a hand-off: without one the followers take over after the
 * 10 s TTL (and 5 failed attempts 1 s apart), so a round under 2 s is a hand-off.
 */
const SLOW_TAKEOVER = ['--leader-liveness-ttl', '10s', '--follower-retry-interval', '1s', '--follower-max-retries', '5'];

/**
 * Puts through each of `nodes` until one is acknowledged; the time from `since` to that answer.
 * Nothing announces that a node takes writes again but its answer to one, so each node is asked
 * again 10 ms after a refusal (`etcdserver: no leader` while the lock changes hands).
 */
async function firstAcknowledgedWrite(nodes: ClusterNode[], kv: Map<string, RawCall>, key: string, since: number): Promise<{ ms: number; via: string }> {
  let done: { ms: number; via: string } | undefined;
  const errors: string[] = [];
  await Promise.any(
    nodes.map(async (n) => {
      while (!done) {
        const { err } = await kv.get(n.id)!('Put', 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from(n.id) });
        if (!err) {
          done ??= { ms: performance.now() - since, via: n.id };
          return;
        }
        errors.push(`${n.id}: ${err.details || err.message}`);
        if (performance.now() - since > 30_000) throw new Error(`no write acknowledged within 30 s: ${errors.slice(-6).join('; ')}`);
        await delay(10);
      }
    }),
  );
  return done!;
}

/**
 * Ten rounds on a three-node cluster: stop the leader with SIGTERM (`signal` sends it), time the
 * survivors' first acknowledged write, check the stopped node's exit and log, start it again.
 */
async function stopLeaderRounds(t: Ctx & { diagnostic(m: string): void }, what: string, signal: (leader: ClusterNode) => void): Promise<void> {
  const { nodes } = await startCluster(t, 3, { args: SLOW_TAKEOVER });
  const kv = new Map(nodes.map((n) => [n.id, rawClient(t, n.endpoint, 'etcdserverpb.KV')]));
  const rounds: { ms: number; from: string; via: string; logs?: string }[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const leader = await waitForLeader(nodes);
    const survivors = nodes.filter((n) => n !== leader);
    await leader.client.put(`round/${round}/before`).value(leader.id).exec();
    const logged = new Map(nodes.map((n) => [n, n.kvs.output().length]));
    const exited = once(leader.kvs.process, 'exit');
    const since = performance.now();
    signal(leader);
    const { ms, via } = await firstAcknowledgedWrite(survivors, kv, `round/${round}/after`, since);
    // A slow round brings every node's log since the signal along.
    const since_ = (n: ClusterNode) => n.kvs.output().slice(logged.get(n));
    rounds.push({ ms, from: leader.id, via, ...(ms >= HAND_OFF_LIMIT_MS ? { logs: nodes.map((n) => `--- ${n.id}\n${since_(n).slice(-6000)}`).join('\n') } : {}) });
    t.diagnostic(`${what}, round ${round}: leader ${leader.id} stopped, first acknowledged write through ${via} after ${Math.round(ms)} ms`);
    const [code, sig] = (await exited) as [number | null, NodeJS.Signals | null];
    assert.deepEqual({ code, sig }, { code: 0, sig: null }, `${leader.id} exit\n${leader.kvs.output().slice(-4000)}`);
    const log = since_(leader);
    assert.match(log, /released the leader lock/, `${leader.id} did not hand over\n${log.slice(-4000)}`);
    // Every component stopped on its supervisor's word, none on the signal nor restarted.
    assert.doesNotMatch(log, /"why":"SIG(TERM|INT)","msg":"stopping"}/);
    assert.doesNotMatch(log, /exited unexpectedly/);
    for (const n of survivors) assert.equal(await n.client.get(`round/${round}/before`).string(), leader.id);
    await leader.kvs.restart();
  }
  const slow = rounds.filter((r) => r.ms >= HAND_OFF_LIMIT_MS);
  assert.equal(slow.length, 0, `hand-offs of ${HAND_OFF_LIMIT_MS} ms or more (all rounds, ms: ${rounds.map((r) => Math.round(r.ms)).join(', ')})\n${slow.map((r) => r.logs).join('\n')}`);
}

test('SIGTERM to a cluster leader\'s whole process group hands over within 2 s, ten rounds in a row', async (t) => {
  // startKvs runs each node detached, in a process group of its own: this process is not in it.
  await stopLeaderRounds(t, 'SIGTERM to the process group', (leader) => process.kill(-leader.kvs.pid, 'SIGTERM'));
});

test('SIGTERM to a cluster leader\'s supervisor alone hands over within 2 s, ten rounds in a row', async (t) => {
  await stopLeaderRounds(t, 'SIGTERM to the supervisor', (leader) => process.kill(leader.kvs.pid, 'SIGTERM'));
});

/** The `stopping` lines of the components in `log`, in order: component and why. */
function stops(log: string): { component: string; why: string }[] {
  return log
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"msg":"stopping"'))
    .map((l) => JSON.parse(l) as { component: string; why: string })
    .filter((l) => l.component !== 'supervisor')
    .map(({ component, why }) => ({ component, why }));
}

test('SIGINT to the whole process group (a terminal\'s Ctrl-C): the supervisor stops the components in order', async (t) => {
  const store = await localObjectStore(t);
  const node = await startKvs(t, { args: objectStoreArgs(store) });
  const exited = once(node.process, 'exit');
  process.kill(-node.pid, 'SIGINT');
  assert.deepEqual(await exited, [0, null]);
  assert.deepEqual(stops(node.output()), [
    { component: 'gateway', why: 'the supervisor stops it' },
    { component: 'storage', why: 'the supervisor stops it' },
    { component: 'archiver', why: 'the supervisor stops it' },
  ]);
  assert.match(node.output(), /"why":"SIGINT","msg":"stopping kvs"/);
  assert.doesNotMatch(node.output(), /exited unexpectedly/);
});

test('a SIGKILLed supervisor: every component stops by itself', async (t) => {
  const store = await localObjectStore(t);
  const node = await startKvs(t, { args: objectStoreArgs(store) });
  const pids = (await status(node)).components.map((c) => c.pid);
  assert.equal(pids.length, 3);
  // The components write to the supervisor's stdout and stderr: the pipes close once the last
  // process of the node has exited.
  const closed = once(node.process, 'close');
  process.kill(node.pid, 'SIGKILL');
  await closed;
  assert.deepEqual(
    stops(node.output()).sort((a, b) => a.component.localeCompare(b.component)),
    ['archiver', 'gateway', 'storage'].map((component) => ({ component, why: 'supervisor gone' })),
  );
  // A stopped component logs that it stopped cleanly; none was killed on the way.
  assert.doesNotMatch(node.output(), /graceful stop took longer/);
});
