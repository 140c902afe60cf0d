// The console's shell: the session (login with auth enabled), the API helper every view uses,
// and the hash router (#/cluster, #/activity, #/keys, #/durability, #/actions).
import { el, errorBox } from './util.js';

const VIEWS = ['cluster', 'activity', 'keys', 'durability', 'actions'];
const main = document.getElementById('main');
const who = document.getElementById('who');
const banner = document.getElementById('banner');

/** The token lives in this tab's sessionStorage, never in a cookie: no request carries it unless this page sends it. */
const store = window.sessionStorage;
let session;
let cleanup = () => {};

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  const token = store.getItem('kvs-token');
  const user = store.getItem('kvs-user');
  if (token && user) {
    h.Authorization = `Bearer ${token}`;
    h['X-Kvs-User'] = user;
  }
  return h;
}

async function answer(res, relogin = true) {
  const text = await res.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = { error: text };
  }
  if (res.status === 401 && relogin) {
    // The token expired or was revoked, or auth was enabled since the page loaded: log in again.
    store.removeItem('kvs-token');
    store.removeItem('kvs-user');
    if (session?.authEnabled) logout(body.error);
    else setTimeout(() => start().catch((err) => main.replaceChildren(errorBox(err))), 0);
    throw new ApiError(401, body.error);
  }
  if (!res.ok) throw new ApiError(res.status, body.error ?? `HTTP ${res.status}`);
  return body;
}

/** GET /api/<path>?<params>. */
export async function get(path, params = {}) {
  const qs = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined)).toString();
  return answer(await fetch(`/api/${path}${qs ? `?${qs}` : ''}`, { headers: headers() }));
}

/** POST /api/<path> with a JSON body and the console's CSRF header. */
export async function post(path, body = {}) {
  // A refused login is an answer to show, not a session that ended.
  return answer(await fetch(`/api/${path}`, { method: 'POST', headers: headers({ 'Content-Type': 'application/json', 'X-Kvs-Console': '1' }), body: JSON.stringify(body) }), path !== 'login');
}

/** A streamed GET: calls onLine with each JSON line until the returned function aborts it. */
export function stream(path, params, onLine, onError) {
  const ctl = new AbortController();
  const qs = new URLSearchParams(params).toString();
  (async () => {
    const res = await fetch(`/api/${path}?${qs}`, { headers: headers(), signal: ctl.signal });
    if (!res.ok) return answer(res);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) onLine(JSON.parse(line));
      }
    }
  })().catch((err) => {
    if (err.name !== 'AbortError') onError(err);
  });
  return () => ctl.abort();
}

export function currentSession() {
  return session;
}

function logout(why) {
  store.removeItem('kvs-token');
  store.removeItem('kvs-user');
  session = { ...session, user: null };
  showLogin(why);
}

function showLogin(why) {
  cleanup();
  cleanup = () => {};
  who.textContent = '';
  const name = el('input', { name: 'user', autocomplete: 'username', placeholder: 'user', required: true });
  const password = el('input', { name: 'password', type: 'password', autocomplete: 'current-password', placeholder: 'password', required: true });
  const msg = el('div');
  const form = el(
    'form',
    {
      class: 'login',
      'data-testid': 'login',
      onsubmit: async (e) => {
        e.preventDefault();
        msg.replaceChildren();
        try {
          const r = await post('login', { name: name.value, password: password.value });
          store.setItem('kvs-token', r.token);
          store.setItem('kvs-user', r.user);
          await start();
        } catch (err) {
          msg.replaceChildren(errorBox(err));
        }
      },
    },
    el('h2', {}, 'Log in to kvs'),
    el('p', { class: 'muted' }, `Auth is enabled on node ${session.nodeId}. The token lasts ${session.tokenTtl} s without use.`),
    name,
    password,
    el('button', { type: 'submit' }, 'Log in'),
    msg,
    why ? el('p', { class: 'muted' }, why) : undefined,
  );
  main.replaceChildren(form);
  name.focus();
}

async function route() {
  cleanup();
  cleanup = () => {};
  if (session.authEnabled && !session.user) return showLogin();
  const view = (location.hash.replace(/^#\//, '').split('?')[0] || 'cluster').split('/')[0];
  const name = VIEWS.includes(view) ? view : 'cluster';
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === name);
  main.replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
  const mod = await import(`./${name}.js`);
  const root = el('section', { 'data-view': name });
  main.replaceChildren(root);
  cleanup = (await mod.render(root, { session, get, post, stream })) ?? (() => {});
}

async function start() {
  session = await get('session');
  banner.hidden = session.authEnabled;
  banner.textContent = session.authEnabled ? '' : 'Auth is disabled on this node: anyone who can reach this address can read and change everything.';
  if (session.authEnabled && !session.user) return showLogin();
  who.replaceChildren(
    session.authEnabled ? `${session.user}${session.root ? ' (root)' : ''}` : `node ${session.nodeId}`,
    session.authEnabled ? el('button', { onclick: () => logout('Logged out.') }, 'Log out') : '',
  );
  await route();
}

window.addEventListener('hashchange', () => session && route().catch((err) => main.replaceChildren(errorBox(err))));
start().catch((err) => main.replaceChildren(errorBox(err)));
