import test from 'node:test';
import assert from 'node:assert/strict';
import { activity, changes, flatten, quantile, rate, roleOf, seriesKey, type Sample } from './series.js';

const sample = (t: number, m: Record<string, number>): Sample => ({ t, m });

test('flatten keys series by name and sorted labels, histogram parts by their own names', () => {
  const flat = flatten([
    { name: 'kvs_writes_total', type: 'counter', help: '', aggregator: 'sum', values: [{ labels: { op: 'put' }, value: 3 }] },
    { name: 'h', type: 'histogram', help: '', aggregator: 'sum', values: [{ labels: { le: 0.1, op: 'put' }, value: 2, metricName: 'h_bucket' }] },
  ] as never);
  assert.deepEqual(flat, { 'kvs_writes_total{op="put"}': 3, 'h_bucket{le="0.1",op="put"}': 2 });
  assert.equal(seriesKey('x', { b: '2', a: '1' }), 'x{a="1",b="2"}');
});

test('rate is per second and 0 across a counter reset', () => {
  const a = sample(0, { 'kvs_writes_total{op="put"}': 10 });
  assert.equal(rate(a, sample(2000, { 'kvs_writes_total{op="put"}': 30 }), 'kvs_writes_total', { op: 'put' }), 10);
  assert.equal(rate(a, sample(2000, { 'kvs_writes_total{op="put"}': 4 }), 'kvs_writes_total', { op: 'put' }), 0);
});

test('quantile interpolates within a bucket of the delta, summed over labels, as histogram_quantile', () => {
  const b = (le: string, op: string) => `h_bucket{le="${le}",op="${op}"}`;
  const a = sample(0, { [b('0.001', 'put')]: 0, [b('0.01', 'put')]: 0, [b('+Inf', 'put')]: 0 });
  const z = sample(1000, { [b('0.001', 'put')]: 50, [b('0.01', 'put')]: 100, [b('+Inf', 'put')]: 100, [b('0.001', 'txn')]: 0, [b('0.01', 'txn')]: 100, [b('+Inf', 'txn')]: 100 });
  // 200 observations: 50 below 1 ms, 150 in (1 ms, 10 ms].
  assert.equal(quantile(a, z, 'h', 0.25), 0.001);
  assert.ok(Math.abs(quantile(a, z, 'h', 0.625)! - 0.0055) < 1e-9);
  assert.equal(quantile(a, a, 'h', 0.5), undefined, 'no observation: no quantile');
  // Everything in +Inf: the highest finite bound.
  assert.equal(quantile(sample(0, {}), sample(1, { [b('0.01', 'put')]: 0, [b('+Inf', 'put')]: 5 }), 'h', 0.5), 0.01);
});

test('changes: a role change, elections by outcome, resyncs by reason; activity has a point per interval', () => {
  const a = sample(0, { 'kvs_role{role="follower"}': 1, 'kvs_role{role="leader"}': 0, 'kvs_elections_total{outcome="won"}': 0, 'kvs_follower_resyncs_total{reason="stream_gap"}': 1 });
  const z = sample(2000, { 'kvs_role{role="follower"}': 0, 'kvs_role{role="leader"}': 1, 'kvs_elections_total{outcome="won"}': 1, 'kvs_follower_resyncs_total{reason="stream_gap"}': 3 });
  assert.equal(roleOf(z.m), 'leader');
  assert.deepEqual(changes(a, z).map((e) => e.text), ['follower -> leader', '1 election won', '2 follower resyncs (stream_gap)']);
  assert.deepEqual(changes(z, z), []);
  const pts = activity([sample(0, { 'kvs_writes_total{op="put"}': 0, kvs_watch_active: 2 }), sample(1000, { 'kvs_writes_total{op="put"}': 5, kvs_watch_active: 3 })]);
  assert.deepEqual(pts.map((p) => [p.writes, p.watches]), [[{ put: 5 }, 3]]);
});
