// bench/layout-size.ts on a small data set: the tables hold at least the records' bytes, and
// LZ4 shrinks history records whose keys are mostly zero padding (the bench's keys).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { measureLayout } from './layout-size.js';

test('layout-size: every record is counted; compression shrinks history, not keyrevs', async () => {
  const base = { keys: 5000, values: 'random', order: 'slices', pageSize: 4096, compress: 0 } as const;
  const plain = await measureLayout(base);
  assert.equal(plain.keyBytes, 64);
  assert.equal(plain.valueBytes, 256);
  // A KeyValue of a 64-byte key and a 256-byte value is over 320 bytes; a keyrevs entry holds the key.
  assert.ok(plain.history > 320, `history ${plain.history} B/key`);
  assert.ok(plain.keyrevs > 64, `keyrevs ${plain.keyrevs} B/key`);
  const lz4 = await measureLayout({ ...base, compress: 64 });
  assert.ok(lz4.history < plain.history, `compressed history ${lz4.history} < ${plain.history} B/key`);
  // Keys in ascending order fill keyrevs' pages; 16 writers' slices leave them about half full.
  const sequential = await measureLayout({ ...base, order: 'sequential' });
  assert.ok(sequential.keyrevs < 0.7 * plain.keyrevs, `keyrevs ${sequential.keyrevs} B/key in order, ${plain.keyrevs} in slices`);
  const json = await measureLayout({ ...base, values: 'json' });
  assert.ok(json.valueBytes > 200 && json.keyBytes < 64, JSON.stringify(json));
});
