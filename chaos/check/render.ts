// Printing linearizability reports: a text timeline of each counterexample for the terminal
// and CI logs, and the same drawn as SVG in a standalone HTML page.
//
// A timeline has one row per client (a client that abandoned an operation and went on gets
// extra rows), each operation a bar from its call to its return labelled with what it did.
// Columns follow the order of events, not a time scale, so short and long operations stay
// readable; the table under it gives the real times (ms from the history's first call).
//
//   c1  [-A put "1"-]          [-C put "2"-]
//   c2                                       [##D get → "1"##]
//   c3      [~B cas "1"→"3" ?~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~>
//
// `[--…--]` returned; `[~…~>` outcome unknown (may take effect any time after its call, or
// never); `[##…##]` is the operation the search could not get past.

import { sortEntries, type Verdict } from './wgl.js';
import { describeOp, isPending, type Op } from './history.js';
import type { Counterexample, KeyReport, LinearizabilityReport } from './linearizability.js';

interface Bar {
  readonly pos: number; // position in ce.ops
  readonly x1: number;
  readonly x2: number;
  readonly label: string;
}

interface Lane {
  readonly name: string;
  readonly bars: Bar[];
}

export interface TimelineLayout {
  readonly lanes: readonly Lane[];
  readonly width: number;
}

/** Short names for a counterexample's operations: A, B, … (numbers past 26). */
export function opNames(n: number): string[] {
  return Array.from({ length: n }, (_, i) => (n <= 26 ? String.fromCharCode(65 + i) : String(i + 1)));
}

/** Lay the operations out on columns: every bar is wide enough for its label (plus `suffix`, if any). */
export function layoutTimeline(ops: readonly Op[], names: readonly string[] = opNames(ops.length), suffix?: readonly string[]): TimelineLayout {
  const n = ops.length;
  const labels = ops.map((op, i) => `${names[i]} ${describeOp(op, 16)}${suffix?.[i] ?? ''}`);
  const sorted = sortEntries(ops);
  const x = new Array<number>(2 * n).fill(0);
  const callX = new Array<number>(n).fill(0);
  const retX = new Array<number>(n).fill(0);
  let last = -1;
  for (let p = 0; p < sorted.length; p++) {
    const e = sorted[p]!;
    const i = e >> 1;
    if ((e & 1) === 0) {
      x[p] = last + 2;
      callX[i] = x[p]!;
    } else {
      if (ops[i]!.ret === Infinity) continue;
      x[p] = Math.max(last + 2, callX[i]! + labels[i]!.length + 3);
      retX[i] = x[p]!;
    }
    last = x[p]!;
  }
  let width = last + 2;
  for (let i = 0; i < n; i++) if (ops[i]!.ret === Infinity) width = Math.max(width, callX[i]! + labels[i]!.length + 5);
  for (let i = 0; i < n; i++) if (ops[i]!.ret === Infinity) retX[i] = width;

  const byClient = new Map<string, Lane[]>();
  const order = [...ops.keys()].sort((a, b) => callX[a]! - callX[b]!);
  for (const i of order) {
    const c = ops[i]!.client;
    let mine = byClient.get(c);
    if (mine === undefined) byClient.set(c, (mine = []));
    let lane = mine.find((l) => l.bars[l.bars.length - 1]!.x2 < callX[i]!);
    if (lane === undefined) {
      lane = { name: mine.length === 0 ? `c${c}` : `c${c} (${mine.length + 1})`, bars: [] };
      mine.push(lane);
    }
    lane.bars.push({ pos: i, x1: callX[i]!, x2: retX[i]!, label: labels[i]! });
  }
  // Rows grouped by client, in order of each client's first operation.
  return { lanes: [...byClient.values()].flat(), width };
}

/** The text timeline; `blocked` (a position in ops) is drawn with '#'. */
export function textTimeline(ops: readonly Op[], blocked = -1, names?: readonly string[]): string {
  const { lanes, width } = layoutTimeline(ops, names);
  const margin = Math.max(...lanes.map((l) => l.name.length)) + 2;
  const lines: string[] = [];
  for (const lane of lanes) {
    const row = new Array<string>(width + 1).fill(' ');
    for (const b of lane.bars) {
      const pending = ops[b.pos]!.ret === Infinity;
      const fill = b.pos === blocked ? '#' : pending ? '~' : '-';
      for (let c = b.x1; c <= b.x2; c++) row[c] = fill;
      row[b.x1] = '[';
      row[b.x2] = pending ? '>' : ']';
      const inner = b.x2 - b.x1 - 1;
      const start = b.x1 + 1 + Math.max(0, Math.floor((inner - b.label.length) / 2));
      for (let k = 0; k < b.label.length && start + k < b.x2; k++) row[start + k] = b.label[k]!;
    }
    lines.push((lane.name.padEnd(margin) + row.join('')).trimEnd());
  }
  return lines.join('\n');
}

/** A time for the table: ms, or µs when the whole counterexample fits in a millisecond. */
function at(ns: number, micro = false): string {
  if (ns === Infinity) return '—';
  return micro ? `+${(ns / 1e3).toFixed(3)} µs` : `+${(ns / 1e6).toFixed(3)} ms`;
}

function useMicro(ops: readonly Op[]): boolean {
  return ops.every((o) => (o.ret === Infinity ? o.call : o.ret) < 1e6);
}

function q(v: string | null): string {
  return v === null ? 'absent' : JSON.stringify(v);
}

/** The counterexample as text: heading, timeline, table, and what the search found. */
export function formatCounterexample(ce: Counterexample, opts: { maxTimelineOps?: number } = {}): string {
  const names = opNames(ce.ops.length);
  const out: string[] = [];
  const cut = ce.ops.filter((o) => o.cut).length;
  out.push(
    `key ${JSON.stringify(ce.key)}: not linearizable — counterexample of ${ce.ops.length} operation${ce.ops.length === 1 ? '' : 's'} ` +
      `(from ${ce.fromOps}${ce.minimal ? ', shrunk to a minimum' : ', shrinking stopped at its budget'})`,
  );
  if (cut > 0) out.push(`  ${cut} operation${cut === 1 ? '' : 's'} shown with unknown outcome had not yet returned at the cut`);
  if (ce.initial !== null) out.push(`  the key held ${q(ce.initial)} before the history`);
  out.push('');
  if (ce.ops.length <= (opts.maxTimelineOps ?? 60)) {
    out.push(textTimeline(ce.ops, ce.blockedBy, names));
    out.push('');
  }
  const w = Math.max(...ce.ops.map((o) => describeOp(o).length));
  const micro = useMicro(ce.ops);
  ce.ops.forEach((o, i) => {
    const notes = [i === ce.blockedBy ? '<- cannot be placed' : '', o.cut ? '(returned after the cut)' : '', o.was ? `(recorded as ${o.was}; the rest is not needed)` : ''];
    const flag = notes.filter(Boolean).map((x) => '  ' + x).join('');
    out.push(
      `  ${names[i]!.padStart(2)}  #${String(o.index).padEnd(6)} client ${o.client.padEnd(4)} ${describeOp(o).padEnd(w)}  call ${at(o.call, micro).padStart(14)}  return ${at(o.ret, micro).padStart(14)}${flag}`,
    );
  });
  out.push('');
  if (ce.blockedBy >= 0) {
    const order = ce.partial.map((p) => names[p]).join(' → ');
    const b = ce.ops[ce.blockedBy]!;
    out.push(
      ce.partial.length > 0
        ? `  The longest order found is ${order}, leaving the key ${q(ce.stateAtBlock)}.`
        : `  No operation can even go first (the key starts ${q(ce.initial)}).`,
    );
    out.push(
      `  ${names[ce.blockedBy]} (${describeOp(b)}) must take effect before it returns, and no order of the operations it may follow lets it.`,
    );
  } else {
    out.push('  (the explanation search ran out of budget; the operations above are still a counterexample)');
  }
  return out.join('\n');
}

function describeKeys(keys: readonly KeyReport[], v: Verdict): string {
  return keys
    .filter((k) => k.verdict === v)
    .map((k) => JSON.stringify(k.key) + (k.unknownReason ? ` (${k.unknownReason} budget, ${k.steps} steps)` : ''))
    .join(', ');
}

/** The report as text: first line `linearizable: yes|no|unknown`, then counterexamples. */
export function formatReport(r: LinearizabilityReport, opts: { maxTimelineOps?: number } = {}): string {
  const pending = r.keys.reduce((s, k) => s + k.pending, 0);
  const summary = `${r.ops} operations on ${r.keys.length} key${r.keys.length === 1 ? '' : 's'}, ${pending} with unknown outcome, checked in ${(r.ms / 1000).toFixed(2)} s`;
  const out: string[] = [];
  const illegal = r.keys.filter((k) => k.verdict === 'illegal');
  const unknown = r.keys.filter((k) => k.verdict === 'unknown');
  if (r.verdict === 'ok') out.push(`linearizable: yes (${summary})`);
  else if (r.verdict === 'unknown') out.push(`linearizable: unknown (${summary}); the search budget ran out on ${describeKeys(r.keys, 'unknown')}; no violation found elsewhere`);
  else out.push(`linearizable: no (${illegal.length} of ${r.keys.length} keys fail; ${summary})`);
  if (r.verdict === 'illegal') {
    out.push(`failing keys: ${describeKeys(r.keys, 'illegal')}`);
    if (unknown.length > 0) out.push(`undecided keys (budget): ${describeKeys(r.keys, 'unknown')}`);
    for (const k of illegal) if (k.counterexample) out.push('', formatCounterexample(k.counterexample, opts));
  }
  return out.join('\n');
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** One counterexample as an SVG drawing (same layout as the text timeline). */
export function counterexampleSvg(ce: Counterexample): string {
  const names = opNames(ce.ops.length);
  const step = new Map<number, number>(ce.partial.map((p, k) => [p, k + 1]));
  const { lanes, width } = layoutTimeline(
    ce.ops,
    names,
    ce.ops.map((_, i) => (step.has(i) ? ` ·${step.get(i)}` : '')),
  );
  const cw = 7.5; // px per column
  const lh = 28;
  const left = 80;
  const W = Math.ceil(left + (width + 2) * cw);
  const H = lanes.length * lh + 16;
  const micro = useMicro(ce.ops);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="monospace" font-size="12">`,
    `<defs><linearGradient id="fade"><stop offset="0.6" stop-color="#fde68a"/><stop offset="1" stop-color="#fde68a" stop-opacity="0"/></linearGradient></defs>`,
  ];
  lanes.forEach((lane, li) => {
    const y = 8 + li * lh;
    parts.push(`<text x="4" y="${y + 17}" fill="#444">${esc(lane.name)}</text>`);
    for (const b of lane.bars) {
      const op = ce.ops[b.pos]!;
      const x1 = left + b.x1 * cw;
      const x2 = left + b.x2 * cw;
      const blocked = b.pos === ce.blockedBy;
      const fill = blocked ? '#fca5a5' : isPending(op) ? 'url(#fade)' : step.has(b.pos) ? '#bbf7d0' : '#dbeafe';
      const title = `${names[b.pos]}: ${describeOp(op, 200)} — client ${op.client}, call ${at(op.call, micro)}, return ${at(op.ret, micro)}` + (step.has(b.pos) ? `, step ${step.get(b.pos)} of the longest order found` : '');
      parts.push(
        `<g><title>${esc(title)}</title><rect x="${x1.toFixed(1)}" y="${y}" width="${(x2 - x1).toFixed(1)}" height="${lh - 8}" rx="4" fill="${fill}" stroke="${blocked ? '#b91c1c' : '#64748b'}"${isPending(op) ? ' stroke-dasharray="4 3"' : ''}/>` +
          `<text x="${(x1 + 6).toFixed(1)}" y="${y + 14}">${esc(b.label)}</text></g>`,
      );
    }
  });
  parts.push('</svg>');
  return parts.join('\n');
}

/** A standalone HTML page: the verdict, and for each counterexample its drawing and text. */
export function renderHtml(r: LinearizabilityReport, title = 'Linearizability report'): string {
  const text = formatReport(r);
  const sections = r.keys
    .filter((k) => k.counterexample)
    .map(
      (k) =>
        `<h2>key ${esc(JSON.stringify(k.key))}</h2>\n<p>Green: the longest order found (·n = its step); red: the operation that cannot be placed; fading: outcome unknown.</p>\n` +
        counterexampleSvg(k.counterexample!) +
        `\n<pre>${esc(formatCounterexample(k.counterexample!))}</pre>`,
    );
  return [
    '<!doctype html>',
    `<html><head><meta charset="utf-8"><title>${esc(title)}</title>`,
    '<style>body{font-family:sans-serif;margin:2em}pre{background:#f8fafc;padding:1em;overflow-x:auto}</style></head><body>',
    `<h1>${esc(title)}</h1>`,
    `<pre>${esc(text.split('\n')[0]!)}</pre>`,
    ...sections,
    '</body></html>',
  ].join('\n');
}
