import { test } from 'node:test';
import assert from 'node:assert/strict';
import { root } from '../proto/index.js';
import { Op, isAuthOp } from './ops.js';

test('the Op table is enum Op of proto/kvs/storage.proto, name for name and value for value', () => {
  const { OP_UNSPECIFIED, ...fromProto } = root.lookupEnum('kvs.storage.Op').values;
  assert.equal(OP_UNSPECIFIED, 0);
  assert.deepEqual({ ...Op }, fromProto);
});

test('isAuthOp covers the AUTH_* and AUTHENTICATE ops and nothing else', () => {
  const auth = Object.entries(Op).filter(([, v]) => isAuthOp(v)).map(([k]) => k).sort();
  const named = Object.keys(Op).filter((k) => k.startsWith('AUTH')).sort();
  assert.deepEqual(auth, named);
});
