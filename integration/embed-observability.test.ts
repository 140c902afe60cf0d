// An embedded node's spans and metrics: the spec's span names for its writes and linearizable
// reads, on the caller's tracerProvider, with the engine's kvs.wal.append as the child of the
// write it made durable; the kvs_* metrics in a registry the program can merge.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tracing } from '@opentelemetry/sdk-node';
import { SpanStatusCode } from '@opentelemetry/api';
import { tempDir } from '../testkit/harness.js';
import { open } from '../embed/index.js';

test('spans kvs.put ... kvs.count on the caller\'s tracerProvider; kvs.wal.append under each write', async (t) => {
  const exporter = new tracing.InMemorySpanExporter();
  const provider = new tracing.BasicTracerProvider({ spanProcessors: [new tracing.SimpleSpanProcessor(exporter)] });
  const node = await open({ dataDir: await tempDir(t, 'kvs-embed-spans'), tracerProvider: provider });
  t.after(() => node.close());
  const put = await node.put('/registry/pods/a', '1');
  await node.create('/registry/pods/b', '2');
  await assert.rejects(node.create('/registry/pods/b', '3'));
  await node.update('/registry/pods/a', '4', put.revision);
  const b = (await node.get('/registry/pods/b'))!;
  await node.deleteIfRevision('/registry/pods/b', b.modRevision);
  await node.delete('/registry/pods/a');
  await node.txn({ if: [], then: [{ put: 'x', value: 'y' }, { put: 'z', value: 'w' }] });
  await node.compact(node.currentRevision());
  await node.linearizableExists('x');
  await node.linearizableList('');
  await node.linearizableCount('');
  await provider.forceFlush();
  const spans = exporter.getFinishedSpans();
  const names = spans.map((s) => s.name).filter((n) => n !== 'kvs.wal.append');
  assert.deepEqual(names, [
    'kvs.put', 'kvs.create', 'kvs.create', 'kvs.update', 'kvs.get', 'kvs.delete_if_revision', 'kvs.delete', 'kvs.txn', 'kvs.compact', 'kvs.exists', 'kvs.list', 'kvs.count',
  ]);
  const first = spans.find((s) => s.name === 'kvs.put')!;
  assert.equal(first.attributes['kvs.key_scope'], '/registry/pods');
  const refused = spans.filter((s) => s.name === 'kvs.create')[1]!;
  assert.equal(refused.status.code, SpanStatusCode.ERROR);
  // Every write that wrote something has its WAL append as a child span.
  const appends = spans.filter((s) => s.name === 'kvs.wal.append');
  const parents = new Set(appends.map((s) => s.parentSpanContext?.spanId));
  for (const w of spans.filter((s) => ['kvs.put', 'kvs.update', 'kvs.delete', 'kvs.txn'].includes(s.name))) assert.ok(parents.has(w.spanContext().spanId), `${w.name} has no kvs.wal.append child`);
  assert.ok(!parents.has(refused.spanContext().spanId), 'a refused create wrote nothing');
});

test('readConsistency serializable: plain reads have no span, linearizable ones do', async (t) => {
  const exporter = new tracing.InMemorySpanExporter();
  const provider = new tracing.BasicTracerProvider({ spanProcessors: [new tracing.SimpleSpanProcessor(exporter)] });
  const node = await open({ dataDir: await tempDir(t, 'kvs-embed-spans'), tracerProvider: provider, readConsistency: 'serializable' });
  t.after(() => node.close());
  await node.get('a');
  await node.list('');
  await node.linearizableGet('a');
  await provider.forceFlush();
  assert.deepEqual(exporter.getFinishedSpans().map((s) => s.name), ['kvs.get']);
});

test('node.metrics(): the kvs_* metrics, mergeable, following the node\'s writes', async (t) => {
  const node = await open({ dataDir: await tempDir(t, 'kvs-embed-metrics') });
  t.after(() => node.close());
  const value = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await node.metrics().getMetricsAsJSON()).find((x) => x.name === name);
    assert.ok(m, `no ${name}`);
    const v = m.values.find((x) => Object.entries(labels).every(([k, l]) => x.labels[k] === l) && !('le' in x.labels));
    return v?.value ?? 0;
  };
  const before = await value('kvs_writes_total', { op: 'put' });
  for (let i = 0; i < 5; i++) await node.put(`k${i}`, 'v');
  assert.equal((await value('kvs_writes_total', { op: 'put' })) - before, 5);
  assert.equal(await value('kvs_current_revision'), node.currentRevision());
  const text = await node.metrics().metrics();
  assert.match(text, /^# TYPE kvs_wal_fsync_duration_seconds histogram$/m);
  assert.doesNotMatch(text, /process_cpu|nodejs_/, 'no process metrics: the program has its own');
});
