// A short seeded run of the embedding API's fuzzer (embed-api.ts): every answer matches the
// model of etcd's semantics, bad input is refused with the API's errors, and the node's
// contents match the model after every case. The seed changes daily (printed; replay with
// `npm run fuzz -- --target embed --seed N --case I`).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { embedSummaryLine, fuzzEmbedded } from './embed-api.js';
import { daySeed } from './random.js';

const SEED = daySeed();

test('random operations on an embedded node answer as etcd would, and bad input is refused', async (t) => {
  const s = await fuzzEmbedded({ seed: SEED, durationMs: 5000 });
  t.diagnostic(embedSummaryLine(s));
  assert.deepEqual(s.failures, [], embedSummaryLine(s));
  assert.ok(s.cases >= 20, embedSummaryLine(s));
  // The cases reach the refusals: compare-and-swap losers, existing keys, bad input of each kind.
  for (const name of ['ErrRevisionMismatch', 'ErrKeyExists', 'ErrInvalidArgument', 'TypeError']) assert.ok(s.refused[name]! > 0, `${name} never seen: ${embedSummaryLine(s)}`);
});
