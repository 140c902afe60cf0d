// docs/grafana/kvs-dashboard.json plots the metrics shared/metrics.ts defines: a renamed or
// removed metric fails here rather than leaving an empty panel.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { SPEC_METRIC_NAMES } from './metrics.js';

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  targets?: { expr: string; datasource?: { uid: string } }[];
}

const dashboard = JSON.parse(fs.readFileSync(new URL('../../docs/grafana/kvs-dashboard.json', import.meta.url), 'utf8')) as {
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown }[] };
};
const queried = dashboard.panels.filter((p) => p.type !== 'row');
const exprs = [...queried.flatMap((p) => (p.targets ?? []).map((t) => t.expr)), ...dashboard.templating.list.map((v) => JSON.stringify(v.query))];

test('every kvs_* metric the dashboard queries is one shared/metrics.ts defines', () => {
  const known = new Set(SPEC_METRIC_NAMES);
  // A histogram is queried through its series: _bucket, _sum, _count.
  const base = (name: string) => (known.has(name) ? name : name.replace(/_(bucket|sum|count)$/, ''));
  const used = new Set(exprs.flatMap((e) => e.match(/\bkvs_[a-z0-9_]+/g) ?? []));
  assert.ok(used.size >= 20, `only ${used.size} kvs metrics found in the dashboard`);
  for (const name of used) assert.ok(known.has(base(name)), `the dashboard queries ${name}, which shared/metrics.ts does not define`);
});

test('a Grafana dashboard on the ${DS_PROMETHEUS} datasource variable, with unique panel ids', () => {
  assert.ok(dashboard.templating.list.some((v) => v.name === 'DS_PROMETHEUS' && v.type === 'datasource' && v.query === 'prometheus'));
  const ids = dashboard.panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length);
  for (const p of queried) {
    assert.ok(p.targets?.length, `panel "${p.title}" has no query`);
    assert.equal(p.datasource?.uid, '${DS_PROMETHEUS}', `panel "${p.title}"`);
    for (const t of p.targets!) assert.equal(t.datasource?.uid, '${DS_PROMETHEUS}', `a query of panel "${p.title}"`);
  }
  // Node's process metrics carry the component label (processRegistry).
  assert.ok(exprs.some((e) => /process_cpu_seconds_total\{[^}]*component/.test(e)));
  assert.ok(exprs.some((e) => /process_resident_memory_bytes\{[^}]*component/.test(e)));
});
