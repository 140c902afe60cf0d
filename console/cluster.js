// Cluster: every member this node has seen, with role, term, address, applied revision and
// lag behind the leader (a member that does not answer is down), replication, the leader lock,
// and a timeline of role changes, elections and resyncs. Refreshed every 2 s.
import { el, errorBox, refreshing, table, fmtAgo, fmtTime } from './util.js';

export function render(root, { get }) {
  return refreshing(root, 'Cluster', () => get('cluster'), view);
}

function view(c) {
  const rows = c.members.map((m) =>
    el(
      'tr',
      { 'data-testid': 'member', 'data-name': m.name, 'data-role': m.up ? m.role : 'down' },
      el('td', {}, m.name, m.name === c.nodeId ? el('span', { class: 'muted' }, ' (this node)') : ''),
      el('td', {}, el('span', { class: `pill ${m.up ? m.role : 'down'}` }, m.up ? m.role : 'down')),
      el('td', { class: 'num' }, m.up ? m.term : '–'),
      el('td', {}, m.clientURL),
      el('td', { class: 'num', 'data-testid': 'applied' }, m.up ? m.revision : '–'),
      el('td', { class: 'num' }, m.lag ?? '–'),
      el('td', { class: 'muted' }, m.up ? (m.listed ? '' : 'not in the member list') : m.error),
    ),
  );
  const lock = c.leaderLock;
  const lockView =
    c.mode === 'single'
      ? el('p', { class: 'muted' }, 'A single node: no leader lock.')
      : lock?.error
        ? errorBox(lock.error)
        : lock
          ? table(['holder', 'term', 'client URL', 'last touch', ''], [
              el('tr', { 'data-testid': 'lock' }, el('td', {}, lock.nodeId), el('td', { class: 'num' }, lock.term), el('td', {}, lock.clientUrl), el('td', {}, `${fmtTime(lock.lastTouchMs)} (${fmtAgo(lock.lastTouchMs)})`), el('td', {}, lock.released ? 'released' : '')),
            ])
          : el('p', { class: 'muted' }, 'No leader lock in the object store.');
  const timeline = c.timeline.length
    ? el('ul', { class: 'timeline', 'data-testid': 'timeline' }, c.timeline.map((e) => el('li', {}, el('span', { class: 'muted' }, fmtTime(e.t)), ` ${e.kind}: ${e.text}`)))
    : el('p', { class: 'muted' }, 'Nothing yet.');
  return el(
    'div',
    {},
    el(
      'div',
      { class: 'cards' },
      card('mode', c.mode),
      card('this node', `${c.nodeId}: ${c.role}`),
      card('replication', ...replication(c)),
      c.mode === 'cluster' && c.peer?.role === 'follower' ? card('leader', ...leaderHealth(c.peer)) : '',
      card('elections here', c.elections),
      card('resyncs here', c.resyncs),
    ),
    c.memberListError ? errorBox(`member list: ${c.memberListError}`) : '',
    table(['member', 'role', 'term', 'client URL', 'applied revision', 'lag', ''], rows, { 'data-testid': 'members' }),
    el('h3', {}, 'Leader lock'),
    lockView,
    el('h3', {}, 'Components of this node'),
    table(['component', 'state', 'pid', 'restarts', 'last exit'], c.components.map((x) => el('tr', {}, el('td', {}, x.name), el('td', {}, x.state), el('td', { class: 'num' }, x.pid || '–'), el('td', { class: 'num' }, x.restarts), el('td', {}, x.lastExit)))),
    el('h3', {}, 'Timeline (newest first)'),
    timeline,
  );
}

/** What this node knows of replication: a leader whether it is degraded, a follower whether it is in sync. */
function replication(c) {
  if (c.mode === 'single') return ['n/a'];
  const p = c.peer;
  if (!p || p.error) return [p?.error ?? 'unknown', 'bad'];
  if (p.role === 'leader') return p.degraded || c.degraded ? [`degraded: ${p.leaderDegraded || 'a member is disconnected'}`, 'bad'] : ['healthy', 'ok'];
  if (p.role === 'follower') return p.inSync ? [`in sync with ${p.leader}`, 'ok'] : [`catching up with ${p.leader}${p.reason ? ` (${p.reason})` : ''}`, 'bad'];
  return [p.reason || 'no leader', 'bad'];
}

/** A follower's leader as the leader tells its followers: its replication healthy or degraded, and why. */
function leaderHealth(p) {
  return p.leaderDegraded ? [`${p.leader}: degraded: ${p.leaderDegraded}`, 'bad'] : [`${p.leader}: healthy`, 'ok'];
}

function card(label, value, cls) {
  return el('div', { class: 'card', 'data-card': label }, el('div', { class: 'muted' }, label), el('div', { class: `v ${cls ?? ''}` }, String(value)));
}
