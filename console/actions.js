// Actions: compact to a revision, checkpoint now, restart a component. Each asks for
// confirmation; the node refuses them unless the user has the root role (with auth enabled).
import { el, errorBox } from './util.js';

export async function render(root, { session, get, post }) {
  const out = el('div', { 'data-testid': 'action-result' });
  const act = async (what, path, body) => {
    if (!window.confirm(`${what}?`)) return;
    out.replaceChildren(el('p', { class: 'muted' }, `${what}…`));
    try {
      const r = await post(path, body);
      out.replaceChildren(el('pre', { class: 'ok' }, `${what}: done\n${JSON.stringify(r, null, 2)}`));
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  const activity = await get('activity').catch(() => ({}));
  const rev = el('input', { name: 'revision', type: 'number', min: 1, value: activity.revision ?? '', size: 10 });
  const cluster = await get('cluster').catch(() => ({ components: [] }));
  const comp = el('select', { name: 'component' }, cluster.components.map((c) => el('option', { value: c.name }, c.name)));
  root.append(
    el('h2', {}, 'Actions'),
    session.root ? '' : el('p', { class: 'error' }, `${session.user} does not have the root role: the node will refuse these.`),
    el('h3', {}, 'Compact'),
    el('p', { class: 'muted' }, `Drops history below a revision (etcdctl compact). Current revision ${activity.revision ?? '?'}, compact revision ${activity.compactRevision ?? '?'}.`),
    el('form', { class: 'inline', onsubmit: (e) => (e.preventDefault(), act(`Compact to revision ${rev.value}`, 'actions/compact', { revision: Number(rev.value) })) }, rev, el('button', { type: 'submit', class: 'danger' }, 'Compact')),
    el('h3', {}, 'Checkpoint'),
    el('p', { class: 'muted' }, 'Uploads a checkpoint of the database to the object store now (kvs ctl checkpoint).'),
    el('button', { class: 'danger', 'data-action': 'checkpoint', onclick: () => act('Write a checkpoint now', 'actions/checkpoint', {}) }, 'Checkpoint now'),
    el('h3', {}, 'Restart a component'),
    el('p', { class: 'muted' }, 'Stops and starts one process of this node (kvs ctl restart); clients of the gateway reconnect.'),
    el('form', { class: 'inline', onsubmit: (e) => (e.preventDefault(), act(`Restart ${comp.value}`, 'actions/restart', { component: comp.value })) }, comp, el('button', { type: 'submit', class: 'danger' }, 'Restart')),
    out,
  );
}
