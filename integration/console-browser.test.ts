// The operator console in a real browser: Debian's Chromium driven headless by puppeteer-core
// (no browser download) against real kvs nodes. Each view loads and shows what the test wrote;
// the history view shows a key's revisions and diffs, and its earlier incarnations on demand;
// login is required with auth on and a key the user may not read is not shown; a follower's
// cluster view shows its leader degraded while a member is down, and follows a killed leader.
// Without /usr/bin/chromium the tests skip, saying so, except in CI (CI=true), where they fail.
// KVS_CONSOLE_SCREENSHOTS=DIR saves a screenshot of each view there (docs/console/*.png).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { Etcd3 } from 'etcd3';
import { etcdctl, localObjectStore, onCleanup, reservePort, startKvs, type Ctx } from '../testkit/harness.js';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';

const CHROMIUM = '/usr/bin/chromium';
const inCi = process.env.CI === 'true' || process.env.CI === '1';
const skip = !fs.existsSync(CHROMIUM) && !inCi ? `${CHROMIUM} is not installed (apt-get install chromium); the console's browser tests need it` : false;
const SHOTS = process.env.KVS_CONSOLE_SCREENSHOTS;

let browser: Browser | undefined;
async function page(t: Ctx): Promise<Page> {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: CI must install chromium (.ci/run does)`);
  browser ??= await puppeteer.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new', '--disable-gpu'] });
  const p = await browser.newPage();
  await p.setViewport({ width: 1280, height: 900 });
  const errors: string[] = [];
  p.on('pageerror', (e) => errors.push(String(e)));
  onCleanup(t, async () => {
    await p.close();
    assert.deepEqual(errors, [], 'no script error in the page');
  });
  // Actions ask for confirmation: the test confirms.
  p.on('dialog', (d) => void d.accept());
  return p;
}
after(() => browser?.close());

async function shot(p: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: false });
}

/** Waits until the text of `selector`'s first match includes `text`. */
async function waitText(p: Page, selector: string, text: string, timeout = 30_000): Promise<void> {
  try {
    await p.waitForFunction((s: string, x: string) => [...document.querySelectorAll(s)].some((e) => (e.textContent ?? '').includes(x)), { timeout, polling: 100 }, selector, text);
  } catch {
    const seen = await p.evaluate((s: string) => [...document.querySelectorAll(s)].map((e) => e.textContent).join(' | '), selector);
    throw new Error(`"${text}" never appeared in ${selector}; it shows: ${seen.slice(0, 2000) || '(nothing)'}`);
  }
}

async function metricsNode(t: Ctx, args: string[] = [], objectStore = true) {
  const port = await reservePort(t);
  const node = await startKvs(t, { args: ['--metrics-addr', `127.0.0.1:${port}`, ...args], objectStore: objectStore ? await localObjectStore(t) : undefined });
  return { node, url: `http://127.0.0.1:${port}` };
}

test('every view loads against a single node and shows what was written; history shows revisions and diffs; the live tail shows a write', { skip, timeout: 180_000 }, async (t) => {
  const { node, url } = await metricsNode(t);
  const client = new Etcd3({ hosts: `http://${node.endpoint}` });
  onCleanup(t, () => client.close());
  await client.put('app/config').value(JSON.stringify({ replicas: 1, image: 'web:1' }));
  await client.put('app/config').value(JSON.stringify({ replicas: 3, image: 'web:1' }));
  const last = await client.put('app/config').value(JSON.stringify({ replicas: 3, image: 'web:2' })).exec();
  await client.put('app/motd').value('hello from the test');
  await client.put('app/blob').value(Buffer.from([0, 1, 2, 0xff]));
  const lease = await client.lease(600, { autoKeepAlive: false }).grant();
  await client.put('app/leased').value('short-lived').lease(lease);
  // Two lives: the first one's versions are shown on demand.
  await client.put('app/reborn').value('first life');
  const died = await client.delete().key('app/reborn').exec();
  await client.put('app/reborn').value('second life');
  const revision = Number((await client.get('app/config').exec()).header.revision);

  const p = await page(t);
  await p.goto(`${url}/#/cluster`);
  await waitText(p, '#banner', 'Auth is disabled');
  await waitText(p, '[data-testid=member][data-role=leader]', 'default');
  await waitText(p, '[data-testid=member] [data-testid=applied]', String(revision));

  await p.goto(`${url}/#/activity`);
  await waitText(p, '[data-card=revision]', String(revision));
  await waitText(p, 'svg.chart', 'writes/s by op');
  // Writes while the samples come in (every 2 s): the put rate and latencies are drawn.
  let ticking = true;
  const ticks = (async () => {
    for (let i = 0; ticking; i++) await client.put(`tick/${i % 5}`).value(String(i));
  })();
  await p.waitForFunction(() => Number(/(\d+) intervals/.exec(document.querySelector('section[data-view=activity]')?.textContent ?? '')?.[1] ?? 0) >= 4, { timeout: 30_000 });
  await waitText(p, 'svg.chart [data-series=put]', 'put ');
  ticking = false;
  await ticks;
  assert.doesNotMatch(await p.$eval('svg.chart [data-series=put]', (e) => e.textContent ?? ''), /put 0\.0$/, 'a put rate above 0');
  await shot(p, 'activity');

  await p.goto(`${url}/#/keys?prefix=app/&key=app/config`);
  await waitText(p, '[data-testid=keylist]', 'app/motd');
  await waitText(p, '[data-testid=keylist]', 'app/config');
  await waitText(p, '[data-testid=value]', '"image": "web:2"');
  await p.waitForFunction(() => document.querySelectorAll('[data-testid=revision]').length === 3, { timeout: 10_000 });
  const newest = await p.$eval('[data-testid=revision]', (e) => ({ rev: e.getAttribute('data-revision'), add: [...e.querySelectorAll('.add')].map((x) => x.textContent), del: [...e.querySelectorAll('.del')].map((x) => x.textContent) }));
  assert.equal(newest.rev, last.header.revision);
  assert.deepEqual(newest.del, ['-   "image": "web:1"']);
  assert.deepEqual(newest.add, ['+   "image": "web:2"']);
  await waitText(p, '[data-testid=history-end]', 'back to its creation');
  await shot(p, 'keys-history');

  // A key created again: its history is the live life; the earlier one comes on demand.
  await p.click('[data-key="app/reborn"]');
  await waitText(p, '[data-testid=history-end]', 'back to its creation');
  assert.equal(await p.$('[data-testid=incarnation]'), null, 'no earlier life read before it is asked for');
  await p.click('[data-testid=earlier-button]');
  await waitText(p, '[data-testid=earlier]', '1 earlier incarnation: every incarnation since it was first written');
  await waitText(p, '[data-testid=incarnation]', `deleted at revision ${died.header.revision}`);
  await waitText(p, '[data-testid=incarnation] [data-testid=revision]', '+ first life');
  await shot(p, 'keys-earlier');

  // A binary value shows as hex; a leased key shows its lease.
  await p.click('[data-key="app/blob"]');
  await waitText(p, '[data-testid=value][data-mode=hex]', '00 01 02 ff');
  await p.click('[data-key="app/leased"]');
  await waitText(p, '[data-testid=lease]', 's left of 600 s');

  // The live tail: a write under the prefix appears.
  const [button] = await p.$$('xpath/.//button[contains(., "Watch this prefix")]');
  await button!.click();
  await waitText(p, '[data-testid=tail]', 'watching "app/"');
  await client.put('app/live').value('tail me');
  await waitText(p, '[data-testid=tail]', 'app/live = tail me');
  await shot(p, 'keys-watch');

  await p.goto(`${url}/#/durability`);
  await waitText(p, '[data-testid=durability]', 'checkpoint/');
  await waitText(p, '[data-testid=gc]', 'checkpoints');
  await shot(p, 'durability');

  await p.goto(`${url}/#/actions`);
  await waitText(p, 'section[data-view=actions]', 'Checkpoint now');
  await p.click('[data-action=checkpoint]');
  await waitText(p, '[data-testid=action-result]', 'Write a checkpoint now: done');
  await shot(p, 'actions');
  assert.ok((await node.ctl(['status'])).stdout.includes('ready'));
});

test('with auth on the console asks for a login; a user sees only what their roles permit; actions need root', { skip, timeout: 180_000 }, async (t) => {
  const { node, url } = await metricsNode(t, ['--auth-enabled', '--bcrypt-cost', '4'], false);
  for (const args of [
    ['user', 'add', 'root:rootpw'], ['user', 'grant-role', 'root', 'root'], ['role', 'add', 'pub'], ['role', 'grant-permission', 'pub', 'read', '--prefix', 'pub/'],
    ['user', 'add', 'bob:bobpw'], ['user', 'grant-role', 'bob', 'pub'], ['put', 'pub/notice', 'for everyone'], ['put', 'secret/plan', 'not for bob'], ['auth', 'enable'],
  ]) {
    const r = await etcdctl(node.endpoint, args);
    assert.equal(r.exitCode, 0, `etcdctl ${args.join(' ')}: ${r.stderr}`);
  }
  // No token, no data.
  const anon = await fetch(`${url}/api/keys?prefix=`);
  assert.equal(anon.status, 401);
  assert.doesNotMatch(await anon.text(), /secret|pub\//);

  const p = await page(t);
  await p.goto(`${url}/#/keys`);
  await p.waitForSelector('[data-testid=login]');
  await shot(p, 'login');
  assert.equal(await p.$('#banner:not([hidden])'), null, 'no auth-disabled banner');
  await p.type('input[name=user]', 'bob');
  await p.type('input[name=password]', 'wrong');
  await p.click('[data-testid=login] button');
  await waitText(p, '[data-testid=login] [data-testid=error]', 'authentication failed');
  await p.$eval('input[name=password]', (e) => ((e as HTMLInputElement).value = ''));
  await p.type('input[name=password]', 'bobpw');
  await p.click('[data-testid=login] button');
  // bob's roles grant read on pub/: the browser starts there.
  await waitText(p, '[data-testid=keylist]', 'pub/notice');
  assert.doesNotMatch(await p.$eval('main', (e) => e.textContent ?? ''), /secret\/plan/);
  await shot(p, 'keys-limited-user');

  // The whole key space and secret/ are refused by the node, and nothing of them is shown.
  for (const prefix of ['', 'secret/']) {
    await p.$eval('input[name=prefix]', (e, v) => ((e as HTMLInputElement).value = v as string), prefix);
    await p.click('form.inline button[type=submit]');
    await waitText(p, '[data-testid=keylist] [data-testid=error]', 'permission denied');
    assert.doesNotMatch(await p.$eval('main', (e) => e.textContent ?? ''), /secret\/plan|not for bob/);
  }

  await p.goto(`${url}/#/actions`);
  await waitText(p, 'section[data-view=actions]', 'bob does not have the root role');
  await p.click('[data-action=checkpoint]');
  await waitText(p, '[data-testid=action-result]', 'needs the root role');

  // Root sees everything but the reserved key space, and may act.
  await p.click('#who button');
  await p.waitForSelector('[data-testid=login]');
  await p.type('input[name=user]', 'root');
  await p.type('input[name=password]', 'rootpw');
  await p.click('[data-testid=login] button');
  await p.goto(`${url}/#/keys?prefix=`);
  await waitText(p, '[data-testid=keylist]', 'secret/plan');
  assert.doesNotMatch(await p.$eval('[data-testid=keylist]', (e) => e.textContent ?? ''), /auth\//);
});

test('the cluster view of a follower shows every member, the leader degraded while a follower is down, and follows a killed leader', { skip, timeout: 240_000 }, async (t) => {
  const ports = new Map<string, number>();
  const cluster = await startCluster(t, 3, {
    nodeArgs: async (id) => {
      const port = await reservePort(t);
      ports.set(id, port);
      return ['--metrics-addr', `127.0.0.1:${port}`];
    },
  });
  const leader = await waitForLeader(cluster.nodes);
  const watcher = cluster.nodes.find((n) => n !== leader)!;
  await watcher.client.put('k').value('v');
  const p = await page(t);
  await p.goto(`http://127.0.0.1:${ports.get(watcher.id)}/#/cluster`);
  await waitText(p, `[data-testid=member][data-role=leader]`, leader.id);
  await p.waitForFunction(() => document.querySelectorAll('[data-testid=member][data-role=follower]').length === 2, { timeout: 30_000 });
  await waitText(p, '[data-testid=lock]', leader.id);
  await waitText(p, '[data-card=replication]', `in sync with ${leader.id}`);
  await waitText(p, '[data-card=leader]', `${leader.id}: healthy`);
  await shot(p, 'cluster');

  // The other follower stops: this follower's console shows the leader degraded, and why.
  const other = cluster.nodes.find((n) => n !== leader && n !== watcher)!;
  await other.kvs.stop();
  await waitText(p, '[data-card=leader]', `${leader.id}: degraded: ${other.id} disconnected`, 60_000);
  await shot(p, 'cluster-leader-degraded');
  await other.kvs.restart();
  await waitText(p, '[data-card=leader]', `${leader.id}: healthy`, 60_000);

  await leader.kvs.kill9();
  await p.waitForFunction((id: string) => document.querySelector(`[data-testid=member][data-name="${id}"]`)?.getAttribute('data-role') === 'down', { timeout: 60_000 }, leader.id);
  const next = await waitForLeader(cluster.nodes.filter((n) => n !== leader));
  await waitText(p, '[data-testid=member][data-role=leader]', next.id, 60_000);
  await waitText(p, '[data-testid=timeline]', `leader ${leader.id} (term `);
  await waitText(p, '[data-testid=timeline]', `-> ${next.id} (term `);
  await waitText(p, '[data-testid=timeline]', `${leader.id} is down`);
  await waitText(p, `[data-testid=member][data-name="${leader.id}"]`, 'unreachable: connect ECONNREFUSED');
  if (next === watcher) await waitText(p, '[data-testid=timeline]', 'role: follower -> leader');
  await shot(p, 'cluster-failover');
});
