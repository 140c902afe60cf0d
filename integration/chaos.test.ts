// Short chaos runs (chaos/, docs/reliability.md): every nemesis once against a three-node
// cluster on the local store, then a single node on Ceph RGW behind a proxy (an object-store
// outage through the proxy, a component killed). 140 s in all on a 2-core VM under load (load
// average 5-9): the holds are sized to failure detection (chaos/nemesis.ts). The seed changes every
// hour and is printed, so a failure can be replayed: `npm run chaos -- --seed N ...`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tempDir } from './harness.js';
import { NEMESES, applicable } from '../chaos/nemesis.js';
import { runChaos, type ChaosOptions } from '../chaos/run.js';

const seed = Number(process.env.KVS_CHAOS_SEED ?? Math.floor(Date.now() / 3_600_000) % 100_000);

async function run(t: Parameters<typeof tempDir>[0], opts: Omit<ChaosOptions, 'seed' | 'outDir' | 'log'>): Promise<void> {
  const outDir = await tempDir(t, 'kvs-chaos-out-');
  const lines: string[] = [];
  const r = await runChaos(t, { ...opts, seed, outDir, log: (l) => lines.push(l) });
  const replay = `npm run chaos -- --seed ${seed} --nodes ${opts.nodes} --store ${opts.store} --nemesis ${opts.nemeses.join(',')}`;
  console.log(`${r.summary}\n  replay: ${replay}`);
  const why = `${r.summary}\n${lines.join('\n')}\n${r.details}\nreplay: ${replay}`;
  assert.equal(r.appendSet.lost, 0, `acknowledged writes lost\n${why}`);
  assert.ok(r.appendSet.ok, `append-set errors\n${why}`);
  assert.equal(r.linearizability.verdict, 'ok', `linearizability\n${why}`);
  assert.equal(r.faults.length, applicable(opts.nemeses, opts.nodes).length, `every nemesis ran\n${why}`);
}

test(`chaos: three nodes, local store, every nemesis once (seed ${seed})`, async (t) => {
  await run(t, { nodes: 3, store: 'local', nemeses: [...NEMESES], maxFaults: NEMESES.length, durationMs: Infinity });
});

test(`chaos: one node on Ceph RGW behind a proxy (seed ${seed})`, async (t) => {
  const nemeses = ['store-outage', 'kill-component'] as const;
  await run(t, { nodes: 1, store: 's3', nemeses: [...nemeses], maxFaults: nemeses.length, durationMs: Infinity });
});
