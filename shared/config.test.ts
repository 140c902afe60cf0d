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

test('--write-pipeline: auto by default, or a whole number of batches from 1 to 4; survives the round trip', () => {
  assert.equal(resolveConfig({}, {}).writePipeline, 'auto');
  assert.equal(resolveConfig({ 'write-pipeline': 'auto' }, {}).writePipeline, 'auto');
  const two = resolveConfig({ 'write-pipeline': 2 }, {});
  assert.equal(two.writePipeline, 2);
  assert.equal(resolveConfig(Object.fromEntries(configArgs(two).map((a) => a.slice(2).split(/=(.*)/s, 2))), {}).writePipeline, 2);
  assert.equal(resolveConfig({}, { KVS_WRITE_PIPELINE: '1' }).writePipeline, 1);
  for (const bad of ['0', '5', '1.5', 'two']) {
    assert.throws(() => resolveConfig({ 'write-pipeline': bad }, {}), /--write-pipeline must be auto or a whole number from 1 to 4, got 'two'|--write-pipeline must be auto/);
  }
});

test('observability flags: --metrics-addr is host:port, --log-format json or pretty', () => {
  assert.equal(resolveConfig({ 'metrics-addr': '127.0.0.1:9090' }, {}).metricsAddr, '127.0.0.1:9090');
  assert.equal(resolveConfig({}, { KVS_METRICS_ADDR: '[::1]:9090' }).metricsAddr, '[::1]:9090');
  assert.equal(resolveConfig({}, {}).metricsAddr, undefined);
  assert.throws(() => resolveConfig({ 'metrics-addr': '9090' }, {}), /^Error: --metrics-addr must be host:port, got "9090"$/);
  assert.throws(() => resolveConfig({ 'metrics-addr': 'localhost:99999' }, {}), /--metrics-addr/);
  assert.equal(resolveConfig({ 'log-format': 'pretty' }, {}).logFormat, 'pretty');
  assert.throws(() => resolveConfig({ 'log-format': 'xml' }, {}), /--log-format must be json or pretty, got "xml"/);
  assert.throws(() => resolveConfig({ 'log-level': 'loud' }, {}), /--log-level/);
});

test('automatic compaction: each mode with its flags and defaults; anything else refused, naming the flag', async () => {
  const { autoCompact } = await import('./config.js');
  const ac = (opts: Record<string, unknown>) => autoCompact(resolveConfig(opts, {}));
  assert.equal(ac({}), undefined);
  assert.deepEqual(ac({ 'auto-compact-mode': 'time', 'auto-compact-retention': '168h' }), { mode: 'time', retentionMs: 168 * 3600_000, sampleIntervalMs: 24 * 3600_000 });
  assert.deepEqual(ac({ 'auto-compact-mode': 'time', 'auto-compact-retention': '1h' }), { mode: 'time', retentionMs: 3600_000, sampleIntervalMs: 3600_000 / 7 });
  assert.deepEqual(ac({ 'auto-compact-mode': 'time', 'auto-compact-retention': '2m' }), { mode: 'time', retentionMs: 120_000, sampleIntervalMs: 60_000 });
  assert.deepEqual(ac({ 'auto-compact-mode': 'time', 'auto-compact-retention': '2s', 'auto-compact-sample-interval': '100ms' }), { mode: 'time', retentionMs: 2000, sampleIntervalMs: 100 });
  assert.deepEqual(ac({ 'auto-compact-mode': 'revision', 'auto-compact-retain-revisions': 1000 }), { mode: 'revision', retainRevisions: 1000, intervalMs: 300_000 });
  assert.deepEqual(ac({ 'auto-compact-mode': 'revision', 'auto-compact-retain-revisions': '10', 'auto-compact-interval': '1s' }), { mode: 'revision', retainRevisions: 10, intervalMs: 1000 });
  const refused: [Record<string, unknown>, RegExp][] = [
    [{ 'auto-compact-mode': 'daily' }, /--auto-compact-mode must be time or revision, got "daily"/],
    [{ 'auto-compact-retention': '1h' }, /--auto-compact-retention needs --auto-compact-mode time/],
    [{ 'auto-compact-retain-revisions': 5 }, /--auto-compact-retain-revisions needs --auto-compact-mode revision/],
    [{ 'auto-compact-mode': 'revision', 'auto-compact-retention': '1h', 'auto-compact-retain-revisions': 5 }, /--auto-compact-retention needs --auto-compact-mode time, got --auto-compact-mode revision/],
    [{ 'auto-compact-mode': 'time' }, /--auto-compact-mode time needs --auto-compact-retention/],
    [{ 'auto-compact-mode': 'revision' }, /needs --auto-compact-retain-revisions/],
    [{ 'auto-compact-mode': 'time', 'auto-compact-retention': 'forever' }, /--auto-compact-retention must be a duration/],
    [{ 'auto-compact-mode': 'revision', 'auto-compact-retain-revisions': 'many' }, /--auto-compact-retain-revisions must be a whole number, got "many"/],
    [{ 'auto-compact-mode': 'revision', 'auto-compact-retain-revisions': 0 }, /at least 1/],
  ];
  for (const [opts, re] of refused) assert.throws(() => ac(opts), re, JSON.stringify(opts));
});

test('--cpu-affinity: CPU numbers and ranges below the machine\'s CPU count, kept in the kernel\'s list form', async () => {
  const { checkCpuList, formatCpuList, cpuCount } = await import('./config.js');
  assert.deepEqual(checkCpuList('0', 2), [0]);
  assert.deepEqual(checkCpuList('0,1', 2), [0, 1]);
  assert.deepEqual(checkCpuList('0-1', 2), [0, 1]);
  assert.deepEqual(checkCpuList('6,0-3, 2', 8), [0, 1, 2, 3, 6]);
  assert.equal(formatCpuList([0, 1, 2, 3, 6]), '0-3,6');
  assert.equal(formatCpuList([1]), '1');
  const refused: [string, number, RegExp][] = [
    ['2', 2, /^Error: --cpu-affinity: "2" names CPU 2, which does not exist \(valid CPUs on this machine: 0-1\)$/],
    ['0,1-4', 4, /"1-4" names CPU 4, which does not exist \(valid CPUs on this machine: 0-3\)/],
    ['1', 1, /valid CPUs on this machine: 0\)/],
    ['1-0', 2, /range "1-0" ends before it starts/],
    ['a', 2, /"a" in "a" is not a CPU number or a range such as 0-1 \(valid CPUs on this machine: 0-1\)/],
    ['0,', 2, /"" in "0," is not a CPU number/],
    ['-1', 2, /"-1" in "-1" is not a CPU number/],
    ['0:2', 2, /"0:2"/],
    ['1.5', 2, /"1.5"/],
  ];
  for (const [list, cpus, re] of refused) assert.throws(() => checkCpuList(list, cpus), re, list);
  // Through resolveConfig: off by default; mri makes `--cpu-affinity 0` the number 0; the list
  // is checked against this machine's CPUs and normalized.
  assert.equal(resolveConfig({}, {}).cpuAffinity, undefined);
  assert.equal(resolveConfig({ 'cpu-affinity': 0 }, {}).cpuAffinity, '0');
  assert.equal(resolveConfig({}, { KVS_CPU_AFFINITY: '0,0' }).cpuAffinity, '0');
  const n = cpuCount();
  assert.equal(resolveConfig({ 'cpu-affinity': `0-${n - 1}` }, {}).cpuAffinity, n === 1 ? '0' : `0-${n - 1}`);
  assert.throws(() => resolveConfig({ 'cpu-affinity': n }, {}), new RegExp(`--cpu-affinity: "${n}" names CPU ${n}, which does not exist`));
  assert.throws(() => resolveConfig({ 'cpu-affinity': true }, {}), /--cpu-affinity needs a value/);
});
