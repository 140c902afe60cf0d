// The differential suites again, with kvs as a three-node cluster and every request (and
// every watch stream) sent to a node picked at random: a cluster must answer as one etcd does
// (integration/differential.ts, KVS_DIFFERENTIAL_CLUSTER). Each suite runs in a child test
// runner with that setting; its report is shown when it fails. The leader keeps two write
// batches in flight (KVS_WRITE_PIPELINE=2, as where its followers run on other machines; on
// this one `auto` would keep one): a batch executed on top of one in flight must answer as
// etcd does. The Lock and Election suite runs once more with every follower applying what the
// leader committed 5 ms late (a test failpoint, services/peer/commit-delay.ts): the recipes'
// reads on a follower must still see every write acknowledged before them, as etcd's do.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCommand } from '../testkit/harness.js';
import { COMMIT_DELAY_ENV } from '../services/peer/commit-delay.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const SUITES = ['differential', 'watch-differential', 'lease-differential', 'concurrency-differential'];
const seed = Number(process.env.KVS_DIFFERENTIAL_SEED ?? (Date.now() % 100_000));

function onCluster(suite: string, what: string, env: Record<string, string>): void {
  test(`${suite} with kvs as a three-node cluster, ${what} (seed ${seed})`, { timeout: 600_000 }, async () => {
    const r = await runCommand(process.execPath, ['--test', path.join(here, `${suite}.test.js`)], {
      env: { KVS_DIFFERENTIAL_CLUSTER: '3', KVS_DIFFERENTIAL_SEED: String(seed), ...env },
      timeoutMs: 590_000,
    });
    assert.equal(r.exitCode, 0, `${suite} differs on a cluster (seed ${seed}):\n${r.stdout.slice(-20_000)}\n${r.stderr.slice(-5_000)}`);
  });
}

for (const suite of SUITES) onCluster(suite, 'two write batches in flight', { KVS_WRITE_PIPELINE: '2' });
onCluster('concurrency-differential', 'commit notices reaching the followers 5 ms late', { [COMMIT_DELAY_ENV]: '5' });
