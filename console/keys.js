// Keys: the key space by prefix, a page at a time; a key's value as text, JSON or hex, its
// lease, and its history (each revision kvs still holds, with the diff from the one before;
// the incarnations before its last creation on demand); a live tail of the changes under the prefix. Every read is the node's etcd API with the
// user's token: a key the user may not read is refused by the node and never reaches here.
import { el, errorBox, bytesOf, b64Of, utf8, asText, keyLabel, hexdump, prettyJson, fmtBytes, table } from './util.js';
import { lineDiff } from './diff.js';

const PAGE = 100;

export async function render(root, { session, get, stream }) {
  const params = new URLSearchParams(location.hash.split('?')[1] ?? '');
  const prefixInput = el('input', { name: 'prefix', placeholder: 'prefix (empty: every key)', size: 30, value: params.get('prefix') ?? defaultPrefix(session) });
  const list = el('div', { class: 'keylist', 'data-testid': 'keylist' });
  const info = el('div', { class: 'muted' });
  const more = el('button', { hidden: true }, 'More');
  const detail = el('div', { 'data-testid': 'detail' }, el('p', { class: 'muted' }, 'Pick a key.'));
  const tail = el('div', { class: 'tail', 'data-testid': 'tail' });
  const tailButton = el('button', { type: 'button' }, 'Watch this prefix');
  let last;
  let stopTail;

  const prefixB64 = () => b64Of(utf8.encode(prefixInput.value));
  const load = async (after) => {
    const started = performance.now();
    try {
      const r = await get('keys', { prefix: prefixB64(), after, limit: PAGE });
      if (!after) list.replaceChildren();
      for (const k of r.keys) {
        list.append(el('div', { 'data-key': keyLabel(k.key), title: `${keyLabel(k.key)}: revision ${k.modRevision}, version ${k.version}`, onclick: (e) => select(k.key, e.currentTarget) }, keyLabel(k.key)));
      }
      last = r.keys.at(-1)?.key;
      more.hidden = !r.more;
      const shown = list.childElementCount;
      info.textContent = `${shown} shown${r.more ? `, ${r.remaining - r.keys.length} more` : ''} at revision ${r.revision} (${(performance.now() - started).toFixed(0)} ms)`;
    } catch (err) {
      list.replaceChildren(errorBox(err));
      info.textContent = '';
      more.hidden = true;
    }
  };
  more.addEventListener('click', () => load(last));

  const select = async (key, row) => {
    for (const d of list.querySelectorAll('.sel')) d.classList.remove('sel');
    row?.classList.add('sel');
    detail.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
    try {
      const [k, h] = await Promise.all([get('key', { key }), get('history', { key })]);
      detail.replaceChildren(keyView(key, k, h, get));
    } catch (err) {
      detail.replaceChildren(errorBox(err));
    }
  };

  const toggleTail = () => {
    if (stopTail) {
      stopTail();
      stopTail = undefined;
      tailButton.textContent = 'Watch this prefix';
      return;
    }
    tail.replaceChildren();
    const line = (text, cls) => {
      tail.prepend(el('div', { class: cls }, text));
      while (tail.childElementCount > 200) tail.lastChild.remove();
    };
    stopTail = stream(
      'watch',
      { prefix: prefixB64() },
      (m) => {
        if (m.watching !== undefined) line(`watching "${keyLabel(m.watching)}"…`, 'muted');
        if (m.error) line(`watch ended: ${m.error}`, 'error');
        for (const e of m.events ?? []) line(`${m.revision}  ${e.type.padEnd(6)} ${keyLabel(e.key)}${e.type === 'PUT' ? ` = ${preview(e.value)}` : ''}`, e.type === 'PUT' ? 'add' : 'del');
      },
      (err) => line(`watch failed: ${err.message}`, 'error'),
    );
    tailButton.textContent = 'Stop watching';
  };
  tailButton.addEventListener('click', toggleTail);

  const form = el(
    'form',
    { class: 'inline', onsubmit: (e) => (e.preventDefault(), load()) },
    el('label', {}, 'Prefix ', prefixInput),
    el('button', { type: 'submit' }, 'List'),
    tailButton,
    permittedLinks(session, (p) => ((prefixInput.value = p), load())),
  );
  root.append(el('h2', {}, 'Keys'), form, el('div', { class: 'split' }, el('div', {}, info, list, more, el('h3', {}, 'Live changes'), tail), detail));
  await load();
  if (params.get('key')) await select(b64Of(utf8.encode(params.get('key'))));
  return () => stopTail?.();
}

/** A non-root user's first readable prefix (the whole key space is likely refused to them). */
function defaultPrefix(session) {
  if (!Array.isArray(session.permissions)) return '';
  const p = session.permissions.find((x) => x.type !== 'write');
  return p ? (asText(bytesOf(p.key)) ?? '') : '';
}

function permittedLinks(session, pick) {
  if (!Array.isArray(session.permissions)) return '';
  const readable = session.permissions.filter((x) => x.type !== 'write');
  if (readable.length === 0) return el('span', { class: 'muted' }, 'Your roles grant no read permission.');
  return el('span', { class: 'muted' }, 'You may read: ', readable.map((p) => el('a', { href: '#/keys', onclick: (e) => (e.preventDefault(), pick(keyLabel(p.key))) }, `${keyLabel(p.key)}${p.rangeEnd ? '…' : ''} `)));
}

function preview(b64) {
  const bytes = bytesOf(b64);
  const t = asText(bytes);
  return t === undefined ? `<${bytes.length} bytes>` : t.length > 80 ? `${t.slice(0, 80)}…` : t;
}

function valueView(b64, modeSel) {
  const bytes = bytesOf(b64);
  const text = asText(bytes);
  const json = text !== undefined ? prettyJson(text) : undefined;
  const mode = modeSel ?? (json !== undefined && /^[\[{]/.test(text.trim()) ? 'json' : text !== undefined ? 'text' : 'hex');
  const shown = mode === 'json' ? (json ?? 'not JSON') : mode === 'text' ? (text ?? 'not UTF-8 text') : hexdump(bytes);
  return el('pre', { 'data-testid': 'value', 'data-mode': mode }, shown);
}

function keyView(key, k, h, get) {
  const name = keyLabel(key);
  if (!k.found) return el('div', {}, el('h3', {}, name), el('p', {}, `No live key at revision ${k.revision} (deleted, or never written).`), earlierView(key, h, get));
  const kv = k.kv;
  const holder = el('div', {}, valueView(kv.value));
  const modes = ['text', 'json', 'hex'].map((m) => el('button', { type: 'button', 'data-mode': m, onclick: () => holder.replaceChildren(valueView(kv.value, m)) }, m));
  const lease =
    kv.lease === '0'
      ? 'none'
      : k.lease?.error
        ? `${kv.lease} (${k.lease.error})`
        : `${kv.lease}: ${k.lease.ttl} s left of ${k.lease.grantedTtl} s`;
  const meta = table(['revision', 'created', 'version', 'size', 'lease'], [
    el('tr', {}, el('td', { class: 'num' }, kv.modRevision), el('td', { class: 'num' }, kv.createRevision), el('td', { class: 'num' }, kv.version), el('td', { class: 'num' }, fmtBytes(kv.size)), el('td', { 'data-testid': 'lease' }, lease)),
  ]);
  return el('div', {}, el('h3', { 'data-testid': 'key-name' }, name), meta, el('div', {}, 'Show as ', modes), holder, historyView(h), earlierView(key, h, get));
}

function historyView(h) {
  const revs = h.revisions;
  const why = {
    created: `back to its creation at revision ${revs.at(-1)?.modRevision}`,
    compacted: `history below the compact revision ${h.compactRevision} is gone`,
    limit: `the newest ${revs.length} only`,
    absent: 'no live key',
  }[h.end];
  return el('div', {}, el('h3', {}, `History: ${revs.length} revision${revs.length === 1 ? '' : 's'}`), el('p', { class: 'muted', 'data-testid': 'history-end' }, `${why}; compact revision ${h.compactRevision}.`), revisionItems(revs));
}

/**
 * The key's lives before its last creation (or, deleted now, all of them), loaded on demand:
 * the node reads every revision since the compact revision for them.
 */
function earlierView(key, h, get) {
  if (!h.earlier) return '';
  const before = h.revisions[0]?.createRevision;
  const holder = el('div', { 'data-testid': 'earlier' });
  const button = el('button', { type: 'button', 'data-testid': 'earlier-button' }, before ? `Earlier incarnations (before revision ${before})` : 'Its history before it was deleted');
  button.addEventListener('click', async () => {
    button.disabled = true;
    holder.replaceChildren(el('p', { class: 'muted' }, `Reading revisions ${h.compactRevision + 1} to ${before ? before - 1 : h.revision}…`));
    try {
      const e = await get('history/earlier', { key });
      const why = { complete: 'every incarnation since it was first written', compacted: `history below the compact revision ${e.compactRevision} is gone`, limit: 'the newest versions only' }[e.end];
      holder.replaceChildren(
        el('p', { class: 'muted', 'data-testid': 'earlier-end' }, `${e.incarnations.length} earlier incarnation${e.incarnations.length === 1 ? '' : 's'}: ${why}.`),
        ...e.incarnations.map((i) =>
          el(
            'div',
            { class: 'incarnation', 'data-testid': 'incarnation', 'data-created': i.createRevision, 'data-deleted': i.deleteRevision },
            el('h4', {}, `${i.createRevision ? `Created at revision ${i.createRevision}` : 'Created below the compact revision'}, deleted at revision ${i.deleteRevision}`),
            revisionItems(i.revisions),
          ),
        ),
      );
    } catch (err) {
      holder.replaceChildren(errorBox(err));
      button.disabled = false;
    }
  });
  return el('div', {}, button, holder);
}

/** Revisions newest first, each with its diff from the one before. */
function revisionItems(revs) {
  return revs.map((r, i) => {
    const older = revs[i + 1];
    const cur = r.valueOmitted ? undefined : asText(bytesOf(r.value));
    let change;
    if (r.valueOmitted || older?.valueOmitted) change = el('pre', { class: 'diff' }, `${r.size} bytes (too large to show in the history)`);
    else if (!older) change = el('pre', { class: 'diff' }, el('span', { class: 'add' }, `+ ${cur ?? `<${r.size} bytes>`}`));
    else {
      const prev = asText(bytesOf(older.value));
      if (cur === undefined || prev === undefined) change = el('pre', { class: 'diff' }, `binary: ${older.size} -> ${r.size} bytes${older.value === r.value ? ' (unchanged)' : ''}`);
      else {
        const pa = prettyJson(prev) ?? prev;
        const pb = prettyJson(cur) ?? cur;
        change = el('pre', { class: 'diff' }, lineDiff(pa, pb).map((d) => el('span', { class: d.op === '+' ? 'add' : d.op === '-' ? 'del' : 'same' }, `${d.op} ${d.line}`)));
      }
    }
    return el('div', { class: 'rev', 'data-testid': 'revision', 'data-revision': r.modRevision }, el('div', {}, el('b', {}, `revision ${r.modRevision}`), el('span', { class: 'muted' }, ` version ${r.version}${r.lease !== '0' ? `, lease ${r.lease}` : ''}`)), change);
  });
}
