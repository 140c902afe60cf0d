// A short seeded run of the port fuzzers (chaos/fuzz, docs/reliability.md "Port fuzzing"): the
// client port of one node, the peer port of a one-node cluster (its leader; `npm run fuzz`
// fuzzes a three-node cluster's). The seed changes daily (printed: replay with
// `npm run fuzz -- --seed N --target T`, and `--case I` for one case). No component may
// restart, the data set must be unchanged on every node, and every connection must be answered
// or closed, also those node:http2 leaves open after its own error GOAWAY (both ports close
// those after an unanswered PING).
// The file keeps to about 40 s: a few seconds of cases per port, one cluster for both peer-port
// tests, and per-case deadlines as short as each port allows.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { service } from '../shared/proto/index.js';
import { EPOCH_HEADER } from '../services/peer/transport.js';
import { crashed, processes } from '../chaos/fuzz/oracle.js';
import { fuzz, summaryLine, type RunSummary } from '../chaos/fuzz/run.js';
import { CLOSE_DEADLINE_MS, startTarget, type FuzzTarget } from '../chaos/fuzz/targets.js';

const today = new Date();
const SEED = Number(process.env.KVS_FUZZ_SEED ?? today.getUTCFullYear() * 10000 + (today.getUTCMonth() + 1) * 100 + today.getUTCDate());

/** Seconds of cases per port (each connection's deadline: CLOSE_DEADLINE_MS). */
const SECONDS = { client: 6, peer: 5 } as const;
const MIN_CASES = 41;

async function fuzzRun(t: TestContext, target: FuzzTarget): Promise<RunSummary> {
  // At least MIN_CASES, however slow the cases a seed draws (seed 20261124's peer cases: 29 in 5 s).
  const summary = await fuzz(target, { seed: SEED, durationMs: SECONDS[target.kind] * 1000, minCases: MIN_CASES, answerMs: CLOSE_DEADLINE_MS[target.kind], concurrency: 6, log: (l) => t.diagnostic(l) });
  t.diagnostic(summaryLine(summary));
  assert.deepEqual(summary.crashes, [], summaryLine(summary));
  assert.deepEqual(summary.dataChanged, [], summaryLine(summary));
  assert.equal(summary.outcomes.hung, 0, summaryLine(summary));
  // Not even after node:http2's error GOAWAY: the PING probes close those.
  assert.deepEqual(summary.leftOpen, [], summaryLine(summary));
  assert.ok(summary.cases >= MIN_CASES, `only ${summary.cases} cases ran`);
  return summary;
}

test('port fuzzer, client port: no crash, no data change, every connection answered or closed', async (t) => {
  await fuzzRun(t, await startTarget(t, 'client'));
});

test('peer port (a one-node cluster)', async (t) => {
  const target = await startTarget(t, 'peer', 1);

  await t.test('port fuzzer: no crash, no data change, every connection answered or closed', async (t) => {
    await fuzzRun(t, target);
  });

  await t.test('a Follow Hello without a member is refused, and the peer process stays up', async () => {
    // Found by the port fuzzer: the leader's admit() read the member's node id from a Hello
    // that had none, threw, and the peer process exited.
    const before = await Promise.all(target.nodes.map(processes));
    const Peer = grpc.makeGenericClientConstructor(service('kvs.peer.Peer'), 'Peer');
    for (const endpoint of target.fuzzEndpoints) {
      const c = new Peer(endpoint, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
      const md = new grpc.Metadata();
      md.set(EPOCH_HEADER, target.epoch!);
      const stream = c.Follow(md, { deadline: Date.now() + 5000 });
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
});
