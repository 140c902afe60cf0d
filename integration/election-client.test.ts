// The etcd3 client's election scenarios (integration/election-scenarios.ts) against kvs and
// against etcd: ELECTION_ROUNDS rounds of all of them on each (default 3, a few seconds per
// server, 10-20 s on a loaded machine); none may fail. Before kvs served the calls a client
// sends with its GOAWAY, every round failed against kvs (14 UNAVAILABLE: Channel closed before
// call started). Hundreds of rounds, run by hand:
// docs/journal/2026-11-23.md#a-clients-goaway-and-the-election-scenarios.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { startEtcd, startKvs } from '../testkit/harness.js';
import { report, runScenarios } from './election-scenarios.js';

const ROUNDS = Number(process.env.ELECTION_ROUNDS ?? 3);

for (const backend of ['kvs', 'etcd'] as const) {
  test(`etcd3 elections against ${backend}: ${ROUNDS} rounds of the client suite's scenarios, no failure`, async (t: TestContext) => {
    const node = backend === 'kvs' ? await startKvs(t) : await startEtcd(t);
    const tally = await runScenarios(node.endpoint, ROUNDS);
    t.diagnostic(report(tally));
    assert.equal(tally.failures.size, 0, report(tally));
  });
}
