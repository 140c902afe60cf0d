// Small helpers shared by the views: DOM building, base64 of byte strings, formatting.

/** el('div', {class: 'x', onclick}, child, 'text', ...) */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== undefined && c !== null && c !== false) e.append(c instanceof Node ? c : String(c));
  return e;
}

export function bytesOf(b64) {
  const bin = atob(b64 ?? '');
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function b64Of(bytes) {
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin);
}

export const utf8 = new TextEncoder();
const strict = new TextDecoder('utf-8', { fatal: true });

/** The bytes as text if they are UTF-8 without control characters (tab and newlines aside). */
export function asText(bytes) {
  try {
    const s = strict.decode(bytes);
    return /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(s) ? undefined : s;
  } catch {
    return undefined;
  }
}

/** A key for display: text, or its bytes escaped. */
export function keyLabel(b64) {
  const bytes = bytesOf(b64);
  const t = asText(bytes);
  if (t !== undefined) return t;
  return [...bytes].map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`)).join('');
}

export function hexdump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = [...bytes.subarray(i, i + 16)];
    const hex = row.map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = row.map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${i.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

export function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return undefined;
  }
}

export function fmtMs(seconds) {
  if (seconds === undefined || seconds === null) return '–';
  if (seconds === 0) return '0';
  const ms = seconds * 1000;
  return ms < 1 ? `${(ms * 1000).toFixed(0)} µs` : ms < 100 ? `${ms.toFixed(2)} ms` : `${ms.toFixed(0)} ms`;
}

export function fmtTime(ms) {
  if (!ms) return '–';
  return new Date(ms).toLocaleTimeString();
}

export function fmtAgo(ms) {
  if (!ms) return '–';
  const s = Math.round((Date.now() - ms) / 1000);
  return s < 60 ? `${s}s ago` : s < 3600 ? `${Math.round(s / 60)}m ago` : `${Math.round(s / 3600)}h ago`;
}

export function fmtBytes(n) {
  if (n === undefined) return '–';
  return n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / (1 << 20)).toFixed(1)} MiB`;
}

export function errorBox(err) {
  return el('div', { class: 'error', 'data-testid': 'error' }, String(err.message ?? err));
}

/** Shows `title` and, below it, view(await load()) (or the error) in `root`, refreshed every 2 s; returns the stop function. */
export async function refreshing(root, title, load, view) {
  const body = el('div');
  root.append(el('h2', {}, title), body);
  let stopped = false;
  let timer;
  const refresh = async () => {
    try {
      body.replaceChildren(view(await load()));
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
    if (!stopped) timer = setTimeout(refresh, 2000);
  };
  await refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

export function table(headers, rows, attrs = {}) {
  return el('table', attrs, el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))), el('tbody', {}, rows));
}
