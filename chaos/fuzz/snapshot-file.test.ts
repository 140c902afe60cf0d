// A short seeded run of the snapshot-file fuzzer (snapshot-file.ts): damaged etcd snapshots
// are refused with the reader's messages, never another exception, and a refused restore
// leaves no data directory. The seed changes daily (printed; replay with `npm run fuzz --
// --target snapshot --seed N --case I`).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Rand, daySeed } from './random.js';
import { damagedFile, fuzzSnapshots, snapshotSummaryLine } from './snapshot-file.js';

const SEED = daySeed();

test('damaged etcd snapshots are refused with a message, and leave nothing behind', async (t) => {
  const s = await fuzzSnapshots({ seed: SEED, durationMs: 4000 });
  t.diagnostic(snapshotSummaryLine(s));
  assert.deepEqual(s.failures, [], snapshotSummaryLine(s));
  assert.ok(s.cases >= 200, snapshotSummaryLine(s));
  // The mutations reach past the first checks: some files still read through, most are refused.
  assert.ok(s.read > 0 && s.refused > s.cases / 4, snapshotSummaryLine(s));
  assert.ok(s.restored > 0 && s.restoreRefused > 0, snapshotSummaryLine(s));
});

test('a case replays exactly from its seed and index', () => {
  const bases = [Buffer.alloc(8 * 4096, 1), Buffer.alloc(16 * 4096, 2)];
  const a = damagedFile(Rand.forCase(5, 17), bases);
  const b = damagedFile(Rand.forCase(5, 17), bases);
  assert.deepEqual(a.what, b.what);
  assert.ok(a.file.equals(b.file));
});
