// Activity: writes/s by op, write latency percentiles, WAL fsync latency and watches over the
// last minutes, from the node's own metrics (sampled by the supervisor every 2 s).
import { el, refreshing, fmtMs } from './util.js';
import { lineChart } from './charts.js';

export function render(root, { get }) {
  return refreshing(root, 'Activity', () => get('activity'), view);
}

function view(a) {
  const pts = a.points;
  const ops = [...new Set(pts.flatMap((p) => Object.keys(p.writes)))].filter((op) => pts.some((p) => p.writes[op] > 0));
  const total = pts.at(-1) ? Object.values(pts.at(-1).writes).reduce((x, y) => x + y, 0) : 0;
  const series = (name, f) => ({ name, points: pts.map((p) => [p.t, f(p)]) });
  return el(
    'div',
    {},
    el(
      'div',
      { class: 'cards' },
      card('writes/s now', total.toFixed(1)),
      card('revision', a.revision ?? '–'),
      card('compact revision', a.compactRevision ?? '–'),
      card('watches', a.watches ?? '–'),
      card('WAL uploads', a.walUploads ?? 0),
    ),
    el(
      'div',
      { class: 'charts' },
      lineChart({ title: 'writes/s by op', series: (ops.length ? ops : ['put']).map((op) => series(op, (p) => p.writes[op] ?? 0)) }),
      lineChart({ title: 'write latency (storage)', fmt: fmtMs, series: [series('p50', (p) => p.writeP50), series('p90', (p) => p.writeP90), series('p99', (p) => p.writeP99)] }),
      lineChart({ title: 'WAL fsync latency', fmt: fmtMs, series: [series('p50', (p) => p.fsyncP50), series('p99', (p) => p.fsyncP99)] }),
      lineChart({ title: 'watches', fmt: (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1)), series: [series('active', (p) => p.watches)] }),
    ),
    el('p', { class: 'muted' }, `${pts.length} intervals${a.intervalMs ? ` of ${(a.intervalMs / 1000).toFixed(0)} s` : ''}; percentiles are interpolated within the histograms' buckets.`),
  );
}

function card(label, value) {
  return el('div', { class: 'card', 'data-card': label }, el('div', { class: 'muted' }, label), el('div', { class: 'v' }, String(value)));
}
