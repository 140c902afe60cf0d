// Line charts as inline SVG: time on x, one polyline per series, a legend with the last values.
const NS = 'http://www.w3.org/2000/svg';
const COLORS = ['#2b6cb0', '#c05621', '#2f855a', '#9b2c2c', '#6b46c1', '#b7791f', '#2c7a7b'];

function svg(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/**
 * series: [{name, points: [[tMs, value|undefined], ...]}]; fmt: value -> label.
 * Returns an <svg> element.
 */
export function lineChart({ title, series, fmt = (v) => v.toFixed(1), width = 560, height = 180 }) {
  const pad = { l: 64, r: 10, t: 22, b: 22 };
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'aria-label': title });
  root.append(svg('text', { x: pad.l, y: 14, class: 'chart-title' }, title));
  const all = series.flatMap((s) => s.points.filter((p) => p[1] !== undefined && p[1] !== null));
  if (all.length === 0) {
    root.append(svg('text', { x: width / 2, y: height / 2, 'text-anchor': 'middle', class: 'muted' }, 'no data yet'));
    return root;
  }
  const t0 = Math.min(...all.map((p) => p[0]));
  const t1 = Math.max(...all.map((p) => p[0]), t0 + 1);
  const vmax = Math.max(...all.map((p) => p[1]), 0) || 1;
  const x = (t) => pad.l + ((t - t0) / (t1 - t0)) * (width - pad.l - pad.r);
  const y = (v) => height - pad.b - (v / vmax) * (height - pad.t - pad.b);
  for (const f of [0, 0.5, 1]) {
    const v = vmax * f;
    root.append(svg('line', { x1: pad.l, x2: width - pad.r, y1: y(v), y2: y(v), class: 'grid' }));
    root.append(svg('text', { x: pad.l - 4, y: y(v) + 4, 'text-anchor': 'end', class: 'axis' }, fmt(v)));
  }
  root.append(svg('text', { x: pad.l, y: height - 6, class: 'axis' }, new Date(t0).toLocaleTimeString()));
  root.append(svg('text', { x: width - pad.r, y: height - 6, 'text-anchor': 'end', class: 'axis' }, new Date(t1).toLocaleTimeString()));
  let lx = pad.l + title.length * 7 + 16;
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const pts = s.points.filter((p) => p[1] !== undefined && p[1] !== null);
    if (pts.length === 1) root.append(svg('circle', { cx: x(pts[0][0]), cy: y(pts[0][1]), r: 2.5, fill: color }));
    if (pts.length > 1) {
      root.append(svg('polyline', { points: pts.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' '), fill: 'none', stroke: color, 'stroke-width': 1.5 }));
    }
    const last = pts.at(-1);
    const label = `${s.name} ${last ? fmt(last[1]) : '–'}`;
    root.append(svg('rect', { x: lx, y: 6, width: 8, height: 8, fill: color }));
    root.append(svg('text', { x: lx + 11, y: 14, class: 'legend', 'data-series': s.name }, label));
    lx += 16 + label.length * 6.2;
  });
  return root;
}
