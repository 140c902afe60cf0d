// A short seeded run of the port fuzzers (chaos/fuzz, docs/reliability.md "Port fuzzing"):
// the client port of one node, the peer ports of a three-node cluster. The seed changes daily
// (printed: replay with `npm run fuzz -- --seed N --target T`, and `--case I` for one case).
// No component may restart, the data set must be unchanged on every node, and every
// connection must be answered or closed. Connections that node:http2 leaves open after its own
// error GOAWAY are a known gap, reported, not failed. The peer port's run is a todo (it runs and
// reports, but does not fail the suite) until the two peer-port findings in docs/reliability.md
// are fixed: grpc-js's server throws on a stream reset in the same read as its HEADERS (the
// peer process exits), and the peer port leaves broken connections open.
const TODO: Partial<Record<TargetKind, string>> = { peer: 'peer port: grpc-js crash on an early-reset stream, connections left open (docs/reliability.md)' };
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { service } from '../shared/proto/index.js';
import { crashed, processes } from '../chaos/fuzz/oracle.js';
import { fuzz, summaryLine } from '../chaos/fuzz/run.js';
import { startTarget, type TargetKind } from '../chaos/fuzz/targets.js';
import { startCluster } from './cluster.js';

const today = new Date();
const SEED = Number(process.env.KVS_FUZZ_SEED ?? today.getUTCFullYear() * 10000 + (today.getUTCMonth() + 1) * 100 + today.getUTCDate());
const SECONDS: Record<TargetKind, number> = { client: 8, peer: 5 };

for (const kind of ['client', 'peer'] as const) {
  test(`port fuzzer, ${kind} port: no crash, no data change, every connection answered or closed`, { todo: TODO[kind] }, async (t) => {
    const target = await startTarget(t, kind);
    const summary = await fuzz(target, { seed: SEED, durationMs: SECONDS[kind] * 1000, concurrency: 6, log: (l) => t.diagnostic(l) });
    t.diagnostic(summaryLine(summary));
    if (summary.leftOpen.length) t.diagnostic(`known node:http2 gap, cases ${summary.leftOpen.join(',')}`);
    assert.deepEqual(summary.crashes, [], summaryLine(summary));
    assert.deepEqual(summary.dataChanged, [], summaryLine(summary));
    assert.equal(summary.outcomes.hung, 0, summaryLine(summary));
    assert.ok(summary.cases > 50, `only ${summary.cases} cases ran`);
  });
}

test('peer port: a Follow Hello without a member is refused, and the peer process stays up', async (t) => {
  // Found by the port fuzzer: the leader's admit() read the member's node id from a Hello that
  // had none, threw, and the peer process exited.
  // One cluster-mode node: it leads.
  const { nodes } = await startCluster(t, 1);
  const target = { nodes: nodes.map((n) => n.kvs), fuzzEndpoints: nodes.map((n) => `127.0.0.1:${n.peerPort}`) };
  const before = await Promise.all(target.nodes.map(processes));
  const Peer = grpc.makeGenericClientConstructor(service('kvs.peer.Peer'), 'Peer');
  for (const endpoint of target.fuzzEndpoints) {
    const c = new Peer(endpoint, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
    const stream = c.Follow({ deadline: Date.now() + 5000 });
    const ended = new Promise<grpc.ServiceError | undefined>((resolve) => {
      stream.on('error', resolve);
      stream.on('end', () => resolve(undefined));
      stream.on('data', () => {});
    });
    stream.write({ hello: { fromIndex: 1, term: 1 } });
    const err = await ended;
    c.close();
    assert.equal(err?.code, grpc.status.INVALID_ARGUMENT, String(err));
  }
  await new Promise((r) => setTimeout(r, 500));
  const after = await Promise.all(target.nodes.map(processes));
  assert.deepEqual(before.map((b, i) => crashed(b, after[i]!)), before.map(() => []));
});
