import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { resolveConfig, configArgs, RUN_FLAGS } from './config.js';

test('a flag wins over its KVS_* variable, which wins over the default', () => {
  const env = { KVS_LISTEN: '127.0.0.1:4000', KVS_NODE_ID: 'from-env' };
  const cfg = resolveConfig({ 'node-id': 'from-flag' }, env);
  assert.equal(cfg.nodeId, 'from-flag');
  assert.equal(cfg.listen, '127.0.0.1:4000');
  assert.equal(cfg.dataDir, path.resolve('./kvs-data'));
  assert.equal(cfg.logLevel, 'info');
});

test('every flag has a KVS_* variable and survives the round trip to a component', () => {
  for (const f of RUN_FLAGS) assert.match(f.env, /^KVS_[A-Z0-9_]+$/);
  const cfg = resolveConfig({ 'data-dir': '/tmp/x', listen: '[::1]:3379', 'read-consistency': 'serializable' }, {});
  const back = resolveConfig(Object.fromEntries(configArgs(cfg).map((a) => a.slice(2).split(/=(.*)/s, 2))), {});
  assert.deepEqual(back, cfg);
});

test('string flags stay strings: a number-like value, an empty one passed on to a component', () => {
  // What the argument parser (mri, under sade) yields for `--s3-prefix 2024 --s3-bucket 7`.
  const cfg = resolveConfig({ 's3-prefix': 2024, 's3-bucket': 7 }, {});
  assert.equal(cfg.s3Prefix, '2024');
  assert.equal(cfg.s3Bucket, '7');
  // An empty prefix (the default) is not sent as `--s3-prefix=`, which parses as true.
  const empty = resolveConfig({ 's3-bucket': 'b' }, {});
  assert.equal(empty.s3Prefix, '');
  assert.ok(!configArgs(empty).some((a) => a.startsWith('--s3-prefix')), configArgs(empty).join(' '));
  assert.throws(() => resolveConfig({ 's3-bucket': true }, {}), /--s3-bucket needs a value/);
});

test('bad values are refused with the flag named', () => {
  assert.throws(() => resolveConfig({ listen: 'nonsense' }, {}), /--listen must be host:port/);
  assert.throws(() => resolveConfig({ 'read-consistency': 'eventual' }, {}), /--read-consistency/);
});
