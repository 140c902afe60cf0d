// The console's HTTP API on --metrics-addr against real nodes, without a browser: the probes
// unchanged beside it, paging, a key's history (both ways it is read) against what etcdctl
// reads at each revision, compaction, CSRF and bad input refused with a reason, auth (no data
// without a valid token, root for actions), https with the client port's certificate.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import https from 'node:https';
import { readFileSync } from 'node:fs';
import { Etcd3 } from 'etcd3';
import { etcdctl, localObjectStore, onCleanup, pollUntil, reservePort, startKvs, waitComponent, type Ctx } from '../testkit/harness.js';
import { makeCa } from '../testkit/certs.js';
import { rawExchange } from '../testkit/raw-socket.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: string) => Buffer.from(s, 'base64').toString();

async function consoleNode(t: Ctx, args: string[] = [], objectStore = false) {
  const port = await reservePort(t);
  const node = await startKvs(t, { args: ['--metrics-addr', `127.0.0.1:${port}`, ...args], objectStore: objectStore ? await localObjectStore(t) : undefined });
  const base = `http://127.0.0.1:${port}`;
  const client = new Etcd3({ hosts: `http://${node.endpoint}` });
  onCleanup(t, () => client.close());
  const api = async (path: string, init: RequestInit = {}) => {
    const res = await fetch(`${base}${path}`, init);
    const text = await res.text();
    let body: any;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    return { status: res.status, body, headers: res.headers };
  };
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    api(path, { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Kvs-Console': '1', ...headers }, body: JSON.stringify(body) });
  return { node, base, client, api, post };
}

test('the probes keep their paths and answers beside the console; the page and its files are served, nothing else', async (t) => {
  const { api } = await consoleNode(t);
  assert.equal((await api('/healthz')).body, 'ok\n');
  assert.equal((await api('/readyz')).body, 'ok\n');
  assert.match((await api('/metrics')).body, /^# HELP /m);
  assert.equal((await api('/metrics', { method: 'POST', body: 'x' })).status, 405);
  const page = await api('/');
  assert.equal(page.status, 200);
  assert.match(page.body, /<script type="module" src="\/static\/app.js">/);
  assert.match(page.headers.get('content-security-policy') ?? '', /default-src 'self'/);
  assert.equal((await api('/static/app.js')).headers.get('content-type'), 'text/javascript; charset=utf-8');
  for (const p of ['/static/../package.json', '/static/%2e%2e%2fpackage.json', '/static/nope.js', '/nope']) assert.equal((await api(p)).status, 404, p);
  const s = await api('/api/session');
  assert.deepEqual([s.status, s.body.authEnabled, s.body.root], [200, false, true]);
});

test('keys page through a prefix in order, each once; a key shows its value and lease; bad input is refused with the reason', async (t) => {
  const { client, api } = await consoleNode(t);
  const names = Array.from({ length: 250 }, (_, i) => `page/${String(i).padStart(3, '0')}`);
  for (let i = 0; i < names.length; i += 50) {
    const batch = names.slice(i, i + 50);
    const txn = client.if(batch[0]!, 'Version', '>', -1);
    await txn.then(...batch.map((k) => client.put(k).value(`v-${k}`))).commit();
  }
  await client.put('pagf').value('outside the prefix');
  const seen: string[] = [];
  let after: string | undefined;
  for (;;) {
    const r = await api(`/api/keys?prefix=${encodeURIComponent(b64('page/'))}&limit=100${after ? `&after=${encodeURIComponent(after)}` : ''}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    seen.push(...r.body.keys.map((k: { key: string }) => unb64(k.key)));
    if (!r.body.more) break;
    after = r.body.keys.at(-1).key;
  }
  assert.deepEqual(seen, names);

  const lease = await client.lease(300, { autoKeepAlive: false }).grant();
  await client.put('page/leased').value('{"a":1}').lease(lease);
  const k = await api(`/api/key?key=${encodeURIComponent(b64('page/leased'))}`);
  assert.equal(unb64(k.body.kv.value), '{"a":1}');
  assert.equal(k.body.kv.lease, lease);
  assert.ok(k.body.lease.ttl > 0 && k.body.lease.grantedTtl === 300, JSON.stringify(k.body.lease));
  assert.deepEqual((await api(`/api/key?key=${encodeURIComponent(b64('page/none'))}`)).body.found, false);

  for (const [path, status, message] of [
    ['/api/keys?prefix=%25%25', 400, /prefix must be base64/],
    ['/api/keys?limit=0', 400, /limit must be a whole number from 1 to 1000, got "0"/],
    ['/api/keys?limit=abc', 400, /limit must be a whole number/],
    ['/api/key', 400, /key must not be empty/],
    ['/api/history?key=', 400, /key is not provided/],
    ['/api/nope', 404, /no console API GET \/api\/nope/],
  ] as const) {
    const r = await api(path);
    assert.equal(r.status, status, path);
    assert.match(r.body.error, message, path);
  }
  assert.equal((await api('/readyz')).status, 200, 'the node still serves');
});

test("a key's history: every revision with its value, read by one watch (dense) or by Range probes (sparse), down to creation or the compact revision", async (t) => {
  const { node, client, api } = await consoleNode(t);
  // Sparse: each write of hist/sparse is followed by writes of other keys.
  const written: { rev: string; value: string }[] = [];
  for (let i = 0; i < 40; i++) {
    const value = JSON.stringify({ i, tags: ['a', String(i)] });
    written.push({ rev: (await client.put('hist/sparse').value(value).exec()).header.revision, value });
    for (let j = 0; j < 1 + (i % 7); j++) await client.put(`hist/other/${j}`).value(String(i));
  }
  // More revisions since its creation than 100 per version (history.ts's DENSE): probes, not a watch.
  for (let i = 0; i < 42; i++) await Promise.all(Array.from({ length: 100 }, (_, j) => client.put(`hist/later/${j}`).value(String(i))));
  const h = await api(`/api/history?key=${encodeURIComponent(b64('hist/sparse'))}`);
  assert.equal(h.status, 200, JSON.stringify(h.body));
  assert.equal(h.body.end, 'created');
  assert.ok(h.body.reads > 2, `the sparse key was read by probes (${h.body.reads} reads)`);
  assert.deepEqual(
    h.body.revisions.map((r: { modRevision: number; value: string }) => ({ rev: String(r.modRevision), value: unb64(r.value) })),
    [...written].reverse(),
  );
  // etcdctl agrees at a few revisions.
  for (const w of [written[0]!, written[17]!, written[39]!]) {
    const r = await etcdctl(node.endpoint, ['get', 'hist/sparse', '--rev', w.rev, '--print-value-only']);
    assert.equal(r.stdout.trim(), w.value);
  }

  // Dense: 30 writes in a row, the last revisions of the node: one watch.
  const dense: string[] = [];
  for (let i = 0; i < 30; i++) {
    await client.put('hist/dense').value(`v${i}`);
    dense.push(`v${i}`);
  }
  const d = await api(`/api/history?key=${encodeURIComponent(b64('hist/dense'))}`);
  assert.equal(d.body.reads, 2, 'one Range and one watch');
  assert.deepEqual(d.body.revisions.map((r: { value: string }) => unb64(r.value)), [...dense].reverse());
  const limited = await api(`/api/history?key=${encodeURIComponent(b64('hist/dense'))}&limit=5`);
  assert.deepEqual([limited.body.end, limited.body.revisions.length], ['limit', 5]);

  // Compacted: what lies below the compact revision is gone, and the answer says so.
  const cut = Number(written[20]!.rev) + 1;
  assert.equal((await etcdctl(node.endpoint, ['compact', String(cut)])).exitCode, 0);
  await waitComponent(node, 'storage', (c) => c.state === 'ready');
  const c = await api(`/api/history?key=${encodeURIComponent(b64('hist/sparse'))}`);
  assert.equal(c.body.end, 'compacted');
  assert.ok(c.body.compactRevision >= cut, JSON.stringify({ compactRevision: c.body.compactRevision, cut }));
  // Versions 22..40 are above the cut; version 21 was live at the compact revision, so it is kept.
  assert.deepEqual(c.body.revisions.map((r: { version: number }) => r.version), Array.from({ length: 20 }, (_, i) => 40 - i));
  assert.equal((await api(`/api/history?key=${encodeURIComponent(b64('hist/none'))}`)).body.end, 'absent');
});

test("a key's earlier incarnations, on demand: deleted and created again, deleted now, partly compacted", async (t) => {
  const { node, client, api } = await consoleNode(t);
  const rev = async (p: Promise<{ header: { revision: string } }>) => Number((await p).header.revision);
  // Three lives of life/k, other keys written between them; life/gone ends deleted.
  const lives: { puts: { rev: number; value: string }[]; deleted?: number }[] = [];
  for (let life = 0; life < 3; life++) {
    const puts: { rev: number; value: string }[] = [];
    for (let v = 0; v < 3 + life; v++) {
      const value = `life${life}-v${v}`;
      puts.push({ rev: await rev(client.put('life/k').value(value).exec()), value });
      await client.put('life/other').value(value);
    }
    const deleted = life < 2 ? await rev(client.delete().key('life/k').exec()) : undefined;
    lives.push({ puts, deleted });
  }
  const gone: number[] = [];
  for (let v = 0; v < 4; v++) gone.push(await rev(client.put('life/gone').value(`g${v}`).exec()));
  const goneAt = await rev(client.delete().key('life/gone').exec());
  const q = (key: string) => `key=${encodeURIComponent(b64(key))}`;
  const shape = (body: any) =>
    body.incarnations.map((i: any) => ({ created: i.createRevision, deleted: i.deleteRevision, puts: i.revisions.map((r: any) => ({ rev: r.modRevision, value: unb64(r.value) })) }));
  const expected = (ls: typeof lives) => ls.map((l) => ({ created: l.puts[0]!.rev, deleted: l.deleted ?? 0, puts: [...l.puts].reverse() })).reverse();

  // The fast default shows the live incarnation only, and says there may be earlier ones.
  const h = await api(`/api/history?${q('life/k')}`);
  assert.deepEqual([h.body.end, h.body.revisions.length, h.body.earlier], ['created', lives[2]!.puts.length, true]);
  const e = await api(`/api/history/earlier?${q('life/k')}`);
  assert.equal(e.status, 200, JSON.stringify(e.body));
  assert.deepEqual([e.body.end, e.body.before], ['complete', lives[2]!.puts[0]!.rev]);
  assert.deepEqual(shape(e.body), expected(lives.slice(0, 2)));
  // etcdctl reads the same value at a revision of the first life.
  assert.equal((await etcdctl(node.endpoint, ['get', 'life/k', '--rev', String(lives[0]!.puts[1]!.rev), '--print-value-only'])).stdout.trim(), 'life0-v1');

  // Deleted now: no live key, and every life it had, ended by its DELETE.
  const g = await api(`/api/history?${q('life/gone')}`);
  assert.deepEqual([g.body.end, g.body.earlier], ['absent', true]);
  const ge = await api(`/api/history/earlier?${q('life/gone')}`);
  assert.deepEqual(shape(ge.body), [{ created: gone[0], deleted: goneAt, puts: gone.map((r, i) => ({ rev: r, value: `g${i}` })).reverse() }]);
  assert.equal(ge.body.end, 'complete');
  // Never written: nothing, and that is the whole story.
  assert.deepEqual([(await api(`/api/history/earlier?${q('life/never')}`)).body.incarnations, (await api(`/api/history/earlier?${q('life/never')}`)).body.end], [[], 'complete']);
  // A limit keeps the newest versions.
  const lim = await api(`/api/history/earlier?${q('life/k')}&limit=4`);
  assert.deepEqual([lim.body.end, lim.body.incarnations.flatMap((i: any) => i.revisions).length], ['limit', 4]);
  assert.deepEqual(shape(lim.body)[0], expected(lives.slice(0, 2))[0]);

  // Compacted into the first life: its start is gone (createRevision 0), its last version stays.
  const cut = lives[0]!.puts[1]!.rev + 1;
  assert.equal((await etcdctl(node.endpoint, ['compact', String(cut)])).exitCode, 0);
  await waitComponent(node, 'storage', (c) => c.state === 'ready');
  const c = await api(`/api/history/earlier?${q('life/k')}`);
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(c.body.end, 'compacted');
  assert.ok(c.body.compactRevision >= cut, JSON.stringify(c.body.compactRevision));
  const first = shape(c.body).at(-1);
  assert.deepEqual(first, { created: 0, deleted: lives[0]!.deleted, puts: [{ rev: lives[0]!.puts[2]!.rev, value: 'life0-v2' }] });
  assert.deepEqual(shape(c.body)[0], expected(lives.slice(0, 2))[0], 'the second life whole');
  // Compacted past every earlier life: nothing before the live one, and the default says so.
  assert.equal((await etcdctl(node.endpoint, ['compact', String(lives[2]!.puts[0]!.rev)])).exitCode, 0);
  await waitComponent(node, 'storage', (c) => c.state === 'ready');
  await pollUntil('the console samples the new compact revision', async () => ((await api(`/api/history?${q('life/k')}`)).body.earlier === false ? true : undefined), 20_000);
  assert.deepEqual((await api(`/api/history/earlier?${q('life/k')}`)).body.incarnations, []);
  assert.equal((await api(`/api/history/earlier?key=`)).status, 400);
  assert.equal((await api('/readyz')).status, 200, 'the node still serves');
});

test('state-changing requests need the console header, a JSON body and the same origin; actions compact, checkpoint and restart', async (t) => {
  const { node, client, api, post, base } = await consoleNode(t, [], true);
  await client.put('a').value('1');
  const rev = Number((await client.put('a').value('2').exec()).header.revision);
  const refusals: [RequestInit, number, RegExp][] = [
    [{ method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"revision":2}' }, 403, /X-Kvs-Console: 1/],
    [{ method: 'POST', headers: { 'X-Kvs-Console': '1', 'Content-Type': 'text/plain' }, body: '{"revision":2}' }, 415, /JSON body/],
    [{ method: 'POST', headers: { 'X-Kvs-Console': '1', 'Content-Type': 'application/json', Origin: 'http://evil.example' }, body: '{"revision":2}' }, 403, /cross-origin request refused: Origin http:\/\/evil.example/],
    [{ method: 'POST', headers: { 'X-Kvs-Console': '1', 'Content-Type': 'application/json' }, body: '{"revision":' }, 400, /not JSON/],
    [{ method: 'POST', headers: { 'X-Kvs-Console': '1', 'Content-Type': 'application/json' }, body: '{"revision":"x"}' }, 400, /revision must be a whole number/],
    [{ method: 'GET' }, 404, /no console API GET \/api\/actions\/compact/],
  ];
  for (const [init, status, message] of refusals) {
    const r = await api('/api/actions/compact', init);
    assert.equal(r.status, status, JSON.stringify(init));
    assert.match(r.body.error, message);
  }
  assert.equal((await etcdctl(node.endpoint, ['get', 'a', '--rev', '2', '--print-value-only'])).stdout.trim(), '1', 'nothing was compacted');

  const ok = await post('/api/actions/compact', { revision: rev }, { Origin: base });
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.match((await etcdctl(node.endpoint, ['get', 'a', '--rev', '2'])).stderr, /required revision has been compacted/);
  const tooFar = await post('/api/actions/compact', { revision: rev + 100 });
  assert.deepEqual([tooFar.status, tooFar.body.error], [400, 'etcdserver: mvcc: required revision is a future revision']);

  const cp = await post('/api/actions/checkpoint', {});
  assert.equal(cp.status, 200, JSON.stringify(cp.body));
  assert.match(cp.body.key, /^checkpoint\//);
  const d = await api('/api/durability?keep=1');
  assert.equal(d.body.latest.checkpoint, cp.body.key);
  // The boot's checkpoint and this one: a gc keeping one would delete the older; a dry run
  // deletes nothing.
  assert.equal(d.body.checkpoints, 2);
  assert.equal(d.body.gc.checkpoints, 1, JSON.stringify(d.body.gc));
  assert.notEqual(d.body.gc.checkpointKeys[0], cp.body.key);
  assert.equal((await api('/api/durability?keep=1')).body.checkpoints, 2, 'the dry run deleted nothing');
  assert.equal((await api('/api/durability?keep=0')).status, 400);

  const bad = await post('/api/actions/restart', { component: 'nope' });
  assert.deepEqual([bad.status, bad.body.error], [400, 'no component "nope"; components: archiver, storage, gateway']);
  const r = await post('/api/actions/restart', { component: 'gateway' });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.components.find((c: { name: string }) => c.name === 'gateway').restarts, 1);
  await waitComponent(node, 'gateway', (c) => c.state === 'ready');
  assert.equal(await client.get('a').string(), '2');
});

test('with auth enabled: no data without a valid token, a token only for its own user, actions for root only', async (t) => {
  const { node, api, post } = await consoleNode(t, ['--auth-enabled', '--bcrypt-cost', '4', '--token-ttl', '120']);
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['role', 'add', 'ro'], ['role', 'grant-permission', 'ro', 'read', '--prefix', 'pub/'], ['user', 'add', 'ann:annpw'], ['user', 'grant-role', 'ann', 'ro'], ['put', 'pub/a', '1'], ['put', 'priv/b', '2'], ['auth', 'enable']]) {
    assert.equal((await etcdctl(node.endpoint, args)).exitCode, 0, args.join(' '));
  }
  for (const route of ['cluster', 'activity', 'keys', `key?key=${b64('pub/a')}`, `history?key=${b64('pub/a')}`, `history/earlier?key=${b64('pub/a')}`, 'watch', 'durability']) {
    const r = await api(`/api/${route}`);
    assert.equal(r.status, 401, route);
    assert.deepEqual(Object.keys(r.body), ['error'], route);
    const forged = await api(`/api/${route}`, { headers: { Authorization: 'Bearer forged.1', 'X-Kvs-User': 'root' } });
    assert.equal(forged.status, 401, route);
  }
  assert.deepEqual((await api('/api/session')).body.user, null);
  const wrong = await post('/api/login', { name: 'ann', password: 'nope' });
  assert.deepEqual([wrong.status, wrong.body.error], [401, 'etcdserver: authentication failed, invalid user ID or password']);
  const ann = await post('/api/login', { name: 'ann', password: 'annpw' });
  assert.equal(ann.status, 200);
  assert.deepEqual([ann.body.ttl, ann.body.root, ann.body.roles], [120, false, ['ro']]);
  const as = (who: { token: string; user: string }, user = who.user) => ({ headers: { Authorization: `Bearer ${who.token}`, 'X-Kvs-User': user } });
  // ann's token does not pass for root.
  assert.equal((await api('/api/cluster', as(ann.body, 'root'))).status, 401);
  const s = await api('/api/session', as(ann.body));
  assert.deepEqual(s.body.permissions, [{ role: 'ro', type: 'read', key: b64('pub/'), rangeEnd: b64('pub0') }]);
  assert.equal((await api(`/api/keys?prefix=${b64('pub/')}`, as(ann.body))).body.keys.length, 1);
  const denied = await api(`/api/keys?prefix=${b64('priv/')}`, as(ann.body));
  assert.deepEqual([denied.status, denied.body.error], [403, 'etcdserver: permission denied']);
  assert.equal((await api(`/api/history?key=${b64('priv/b')}`, as(ann.body))).status, 403);
  assert.equal((await api(`/api/history/earlier?key=${b64('priv/b')}`, as(ann.body))).status, 403);
  assert.equal((await api(`/api/history/earlier?key=${b64('pub/a')}`, as(ann.body))).body.end, 'complete');
  assert.equal((await api('/api/cluster', as(ann.body))).status, 200);
  const act = await post('/api/actions/compact', { revision: 2 }, as(ann.body).headers);
  assert.deepEqual([act.status, act.body.error], [403, 'compact needs the root role; ann does not have it']);

  const root = (await post('/api/login', { name: 'root', password: 'rootpw' })).body;
  assert.equal(root.root, true);
  const all = await api('/api/keys', as(root));
  assert.deepEqual(all.body.keys.map((k: { key: string }) => unb64(k.key)), ['priv/b', 'pub/a']);
  // The reserved key space is refused to root too (the gRPC API's own check).
  const reserved = await api(`/api/key?key=${b64('\0auth/users/root')}`, as(root));
  assert.equal(reserved.status, 403);
  assert.equal((await post('/api/actions/compact', { revision: 2 }, as(root).headers)).status, 200);
});

test('with TLS on the client port the console is served over https with its certificate; the probes answer in plain HTTP too', async (t) => {
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const port = await reservePort(t);
  await startKvs(t, { args: ['--client-tls-cert', server.cert, '--client-tls-key', server.key, '--metrics-addr', `127.0.0.1:${port}`], probe: ca.clientTls() });
  const get = (path: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      https
        .get({ host: '127.0.0.1', port, path, ca: readFileSync(ca.cert) }, (res) => {
          let body = '';
          res.on('data', (d) => (body += d));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        })
        .on('error', reject);
    });
  const page = await get('/');
  assert.equal(page.status, 200);
  assert.match(page.body, /kvs console/);
  const session = JSON.parse((await get('/api/session')).body);
  assert.equal(session.authEnabled, false);
  const keys = JSON.parse((await get('/api/keys')).body);
  assert.ok(Array.isArray(keys.keys), JSON.stringify(keys));
  assert.equal((await get('/healthz')).body, 'ok\n');
  const plain = await fetch(`http://127.0.0.1:${port}/healthz`);
  assert.equal(await plain.text(), 'ok\n');
  const redirect = await fetch(`http://127.0.0.1:${port}/api/keys`, { redirect: 'manual' });
  assert.deepEqual([redirect.status, redirect.headers.get('location')], [308, `https://127.0.0.1:${port}/api/keys`]);
});

test('auth enabled or disabled at run time (etcdctl auth enable|disable) is what the console enforces', async (t) => {
  const { node, api } = await consoleNode(t, ['--bcrypt-cost', '4']);
  assert.equal((await api('/api/session')).body.authEnabled, false);
  assert.equal((await api('/api/keys')).status, 200);
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['auth', 'enable']]) assert.equal((await etcdctl(node.endpoint, args)).exitCode, 0);
  const on = await pollUntil('the console to see auth on', async () => ((await api('/api/session')).body.authEnabled ? true : undefined), 10_000);
  assert.equal(on, true);
  const r = await api('/api/keys');
  assert.deepEqual([r.status, r.body.error], [401, 'log in: this node has auth enabled']);
  assert.equal((await etcdctl(node.endpoint, ['--user', 'root:rootpw', 'auth', 'disable'])).exitCode, 0);
  await pollUntil('the console to see auth off', async () => ((await api('/api/session')).body.authEnabled === false ? true : undefined), 10_000);
  assert.equal((await api('/api/keys')).status, 200);
});

test('the watch stream: a JSON line per change under the prefix, none from outside it; it ends when the client closes or half-closes', async (t) => {
  const { node, client, base } = await consoleNode(t);
  const lines: any[] = [];
  let buf = '';
  const ctl = new AbortController();
  const res = await fetch(`${base}/api/watch?prefix=${encodeURIComponent(b64('w/'))}`, { signal: ctl.signal });
  assert.equal(res.headers.get('content-type'), 'application/x-ndjson');
  const reader = res.body!.getReader();
  const next = async (what: (l: any) => boolean) => {
    for (;;) {
      const found = lines.find(what);
      if (found) return found;
      const { value, done } = await reader.read();
      if (done) throw new Error(`the stream ended; lines: ${JSON.stringify(lines)}`);
      buf += Buffer.from(value).toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        lines.push(JSON.parse(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
      }
    }
  };
  await next((l) => l.watching === b64('w/'));
  await client.put('x/outside').value('no');
  await client.put('w/1').value('yes');
  await client.delete().key('w/1');
  const put = await next((l) => l.events?.some((e: { type: string }) => e.type === 'PUT'));
  assert.deepEqual(put.events.map((e: { key: string; value: string }) => [unb64(e.key), unb64(e.value)]), [['w/1', 'yes']]);
  const del = await next((l) => l.events?.some((e: { type: string }) => e.type === 'DELETE'));
  assert.equal(unb64(del.events[0].key), 'w/1');
  assert.ok(!lines.some((l) => l.events?.some((e: { key: string }) => unb64(e.key) === 'x/outside')));
  ctl.abort();
  await reader.closed.catch(() => undefined);
  // The gateway's watchers go back to none once the stream is gone.
  await pollUntil('the watch to be cancelled', async () => {
    const m = await (await fetch(`${base}/metrics`)).text();
    return /^kvs_watch_active 0$/m.test(m) ? true : undefined;
  }, 10_000);

  // A client that half-closes (done sending) ends it too.
  const r = await rawExchange(base.replace('http://', ''), Buffer.from(`GET /api/watch?prefix=${encodeURIComponent(b64('w/'))} HTTP/1.1\r\nHost: x\r\n\r\n`), true, 10_000);
  assert.ok(r.closed, 'the server closed the half-closed watch');
  assert.match(r.received.toString(), /^HTTP\/1\.1 200 OK[\s\S]*"watching"/);
  // So does one that sent a body with its GET first (fuzz --seed 187671786 --case 33: a body
  // left unread held the half-close behind it, and the watch stayed open).
  const body = 'x'.repeat(70_000);
  const withBody = await rawExchange(base.replace('http://', ''), Buffer.from(`GET /api/watch?prefix=${encodeURIComponent(b64('w/'))} HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`), true, 10_000);
  assert.ok(withBody.closed, 'the server closed the half-closed watch that had a body');
  assert.equal((await api0(node.endpoint)).status, 'ok');
});

/** The node still answers a read. */
async function api0(endpoint: string): Promise<{ status: string }> {
  const r = await etcdctl(endpoint, ['get', 'w/1']);
  return { status: r.exitCode === 0 ? 'ok' : r.stderr };
}

test('a follower\'s console with auth on: a login there sees every member, and a killed leader as down', { timeout: 240_000 }, async (t) => {
  const port = await reservePort(t);
  const cluster = await startCluster(t, 3, { args: ['--bcrypt-cost', '4'], nodeArgs: async (id) => (id === 'n2' ? ['--metrics-addr', `127.0.0.1:${port}`] : []) });
  const leader = await waitForLeader(cluster.nodes);
  for (const args of [['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['auth', 'enable']]) assert.equal((await etcdctl(leader.endpoint, args)).exitCode, 0);
  const base = `http://127.0.0.1:${port}`;
  const login = await pollUntil('a login through n2', async () => {
    const r = await fetch(`${base}/api/login`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Kvs-Console': '1' }, body: JSON.stringify({ name: 'root', password: 'rootpw' }) });
    return r.status === 200 ? ((await r.json()) as { token: string }) : undefined;
  }, 30_000);
  const view = async () => (await (await fetch(`${base}/api/cluster`, { headers: { Authorization: `Bearer ${login.token}`, 'X-Kvs-User': 'root' } })).json()) as { members: { name: string; up: boolean; role: string; error?: string }[] };
  let last: unknown;
  const all = await pollUntil('every member up', async () => {
    const v = await view();
    last = v;
    return v.members.length === 3 && v.members.every((m) => m.up) ? v : undefined;
  }, 30_000).catch((err: Error) => {
    throw new Error(`${err.message}; the console shows ${JSON.stringify(last)}`);
  });
  assert.deepEqual(all.members.map((m) => [m.name, m.role]).sort(), cluster.nodes.map((n) => [n.id, n === leader ? 'leader' : 'follower']).sort());
  if (leader.id === 'n2') return; // the console's own node: nothing left to look from
  await leader.kvs.kill9();
  const after = await pollUntil('the killed leader down, another leading', async () => {
    const v = await view();
    const dead = v.members.find((m) => m.name === leader.id);
    return dead && !dead.up && v.members.some((m) => m.up && m.role === 'leader') ? v : undefined;
  }, 60_000);
  assert.match(after.members.find((m) => m.name === leader.id)!.error!, /^unreachable: /);
});

test('with mutual TLS on the client port (--client-tls-ca) the console reaches its node with the node\'s own certificate', async (t) => {
  const ca = await makeCa(t);
  // Server and client use (serverAuth, clientAuth), as etcd's own gateway needs of its certificate.
  const server = await ca.peer('server');
  const client = await ca.client('probe', 'probe');
  const port = await reservePort(t);
  await startKvs(t, { args: ['--client-tls-cert', server.cert, '--client-tls-key', server.key, '--client-tls-ca', ca.cert, '--metrics-addr', `127.0.0.1:${port}`], probe: ca.clientTls(client) });
  const body = await new Promise<string>((resolve, reject) => {
    https
      .get({ host: '127.0.0.1', port, path: '/api/cluster', ca: readFileSync(ca.cert) }, (res) => {
        let b = '';
        res.on('data', (d) => (b += d));
        res.on('end', () => resolve(b));
      })
      .on('error', reject);
  });
  const view = JSON.parse(body) as { members: { up: boolean }[]; self: { revision?: number } };
  assert.ok(view.self.revision! >= 1, body);
  assert.deepEqual(view.members.map((m) => m.up), [true]);
});

test("a follower's console says when its leader is degraded, and why, as the leader's own console does; and when that clears", { timeout: 240_000 }, async (t) => {
  const ports = new Map<string, number>();
  const cluster = await startCluster(t, 3, { nodeArgs: async (id) => (ports.set(id, await reservePort(t)), ['--metrics-addr', `127.0.0.1:${ports.get(id)}`]) });
  const leader = await waitForLeader(cluster.nodes);
  const [watcher, missing] = cluster.nodes.filter((n) => n !== leader) as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
  type Peer = { role: string; leader: string; degraded: boolean; leaderDegraded: string };
  const peerOf = async (n: { id: string }) => ((await (await fetch(`http://127.0.0.1:${ports.get(n.id)}/api/cluster`)).json()) as { peer: Peer }).peer;
  let last: unknown;
  const until = (what: string, ok: (follower: Peer, lead: Peer) => boolean) =>
    pollUntil(what, async () => {
      const [f, l] = [await peerOf(watcher), await peerOf(leader)];
      last = { follower: f, leader: l };
      return ok(f, l) ? { f, l } : undefined;
    }, 60_000).catch((err: Error) => {
      throw new Error(`${err.message}; the consoles show ${JSON.stringify(last)}`);
    });
  const healthy = await until('every follower caught up', (f, l) => f.role === 'follower' && f.leaderDegraded === '' && l.role === 'leader' && !l.degraded);
  assert.equal(healthy.f.leader, leader.id);

  // A follower goes missing: the leader replicates through the object store, and says so.
  await missing.kvs.stop();
  const degraded = await until(`the follower's console names ${missing.id} as the leader's trouble`, (f, l) => l.degraded && f.leaderDegraded !== '');
  assert.equal(degraded.f.leaderDegraded, `${missing.id} disconnected`);
  assert.equal(degraded.l.leaderDegraded, degraded.f.leaderDegraded, "the follower shows what the leader's console shows");
  assert.equal(degraded.f.role, 'follower', 'the follower itself is still in sync');

  await missing.kvs.restart();
  await until('both consoles healthy again', (f, l) => f.leaderDegraded === '' && !l.degraded && l.leaderDegraded === '');
});
