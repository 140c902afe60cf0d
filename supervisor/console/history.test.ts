import test from 'node:test';
import assert from 'node:assert/strict';
import { probes } from './history.js';

test('probes: every revision of a gap as dense as its missing versions; spread over a sparse one; none below the compact revision', () => {
  // Versions 1..5 at revisions 10..14, only version 5 known: probe 10..13.
  assert.deepEqual(probes([{ version: 5, mod: 14 }], { version: 0, mod: 9 }, 1, 100), { revisions: [13, 12, 11, 10], unreachable: false });
  // Version 3 known at 100, version 1 at 10 (its create revision): one missing, probed just below 100.
  assert.deepEqual(probes([{ version: 3, mod: 100 }, { version: 1, mod: 10 }], { version: 0, mod: 9 }, 1, 100).revisions, [99]);
  // Four missing over 1000 revisions: four probes, the first just below the known version.
  const spread = probes([{ version: 5, mod: 1010 }], { version: 0, mod: 9 }, 1, 100).revisions;
  assert.equal(spread.length, 4);
  assert.equal(spread[0], 1009);
  assert.ok(spread.every((r) => r >= 10 && r < 1010));
  // A compact revision above the gap's bottom: probes start there; a gap entirely below it is unreachable.
  assert.ok(probes([{ version: 5, mod: 1010 }], { version: 0, mod: 9 }, 500, 100).revisions.every((r) => r >= 500));
  assert.deepEqual(probes([{ version: 5, mod: 400 }], { version: 0, mod: 9 }, 500, 100), { revisions: [], unreachable: true });
  // The budget keeps the newest.
  assert.deepEqual(probes([{ version: 5, mod: 14 }], { version: 0, mod: 9 }, 1, 2).revisions, [13, 12]);
  // Nothing missing: nothing to probe.
  assert.deepEqual(probes([{ version: 2, mod: 11 }, { version: 1, mod: 10 }], { version: 0, mod: 9 }, 1, 100).revisions, []);
});
