// Durability: the object store's latest checkpoint, WAL segments waiting for upload, the last
// upload and its latency, registered branches, and what `kvs gc` would delete (a dry run).
import { el, errorBox, table, fmtMs, fmtTime } from './util.js';

export async function render(root, { get }) {
  const keep = el('input', { name: 'keep', type: 'number', min: 1, value: 3, size: 4 });
  const body = el('div');
  const load = async () => {
    body.replaceChildren(el('p', { class: 'muted' }, 'Reading the object store…'));
    try {
      const [d, a] = await Promise.all([get('durability', { keep: keep.value }), get('activity')]);
      body.replaceChildren(view(d, a));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  };
  root.append(el('h2', {}, 'Durability'), el('form', { class: 'inline', onsubmit: (e) => (e.preventDefault(), load()) }, el('label', {}, 'gc would keep ', keep, ' checkpoints'), el('button', { type: 'submit' }, 'Refresh')), body);
  await load();
}

function view(d, a) {
  if (!d.enabled) return el('p', { 'data-testid': 'no-store' }, 'This node runs without an object store (--s3-bucket): its data lives on this disk only; nothing is uploaded and there are no checkpoints.');
  const arch = d.archiver;
  const rows = (pairs) => pairs.map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', { 'data-field': k }, v ?? '–')));
  return el(
    'div',
    {},
    table(['', ''], rows([
      ['object store', d.location],
      ['latest checkpoint', d.latest ? d.latest.checkpoint : 'none'],
      ['checkpoint revision', d.latest?.revision],
      ['checkpoint term', d.latest?.term],
      ['checkpoints', d.checkpoints],
      ['WAL objects uploaded', d.walSegments],
      ['uploaded through WAL index', arch.error ? arch.error : arch.uploadedThrough],
      ['local WAL segments waiting for upload', d.pendingSegments],
      ['WAL uploads (this run)', arch.walUploads],
      ['upload errors', arch.error ? '' : `${arch.walUploadErrors}${arch.lastError ? ` (last: ${arch.lastError})` : ''}`],
      ['last upload', a.lastUpload ? `${fmtTime(a.lastUpload.t)}, median ${fmtMs(a.lastUpload.seconds)}` : 'none in the sampled minutes'],
    ]), { 'data-testid': 'durability' }),
    el('h3', {}, 'Branches'),
    d.branches.length ? table(['branch', 'pinned checkpoint', 'registered'], d.branches.map((b) => el('tr', {}, el('td', {}, b.branchId), el('td', {}, b.checkpoint), el('td', {}, b.createdAt)))) : el('p', { class: 'muted' }, 'No branch registered.'),
    el('h3', {}, `What kvs gc --keep ${d.gc.keep} would delete`),
    d.gc.error
      ? errorBox(d.gc.error)
      : el(
          'div',
          { 'data-testid': 'gc' },
          table(['checkpoints', 'orphan SSTs', 'WAL segments'], [el('tr', {}, el('td', { class: 'num' }, d.gc.checkpoints), el('td', { class: 'num' }, d.gc.orphanSsts), el('td', { class: 'num' }, d.gc.walSegments))]),
          d.gc.checkpointKeys.length ? el('ul', {}, d.gc.checkpointKeys.map((k) => el('li', {}, k))) : '',
          d.gc.warnings.map((w) => el('div', { class: 'error' }, w)),
        ),
  );
}
