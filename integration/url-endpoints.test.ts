// Endpoints written as URLs: every etcdctl command group with --endpoints=http://host:port
// (and https:// on a TLS port) works against kvs as it does against etcd 3.4. etcdctl dials
// some commands' endpoints by the string as given, so the HTTP/2 :authority is the URL itself.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import path from 'node:path';
import { etcdctl, startEtcd, startEtcdctl, startKvs, tempDir, type CmdResult, type Ctx } from '../testkit/harness.js';
import { makeCa } from '../testkit/certs.js';

/** Runs one command of each etcdctl group against `endpoint`; returns what failed. */
async function everyGroup(t: Ctx, endpoint: string, flags: string[], dir: string): Promise<string[]> {
  const failed: string[] = [];
  const run = async (args: string[], opts: { input?: string } = {}, check?: (r: CmdResult) => boolean): Promise<CmdResult> => {
    const r = await etcdctl(endpoint, [...flags, ...args], opts);
    if (r.exitCode !== 0 || (check && !check(r))) failed.push(`${args.join(' ')}: exit ${r.exitCode} ${r.stdout} ${r.stderr.trim().split('\n').pop()}`);
    return r;
  };
  const watch = await startEtcdctl(t, endpoint, [...flags, 'watch', 'w']);
  await run(['put', 'k', 'v'], {}, (r) => r.stdout === 'OK\n');
  await run(['get', 'k', '--print-value-only'], {}, (r) => r.stdout === 'v\n');
  await run(['del', 'k'], {}, (r) => r.stdout === '1\n');
  await run(['txn'], { input: 'value("k") = "v"\n\nput k v2\n\nput k other\n\n' }, (r) => /^FAILURE/.test(r.stdout));
  // etcdctl watch starts watching once it is connected; a put until it prints.
  for (let i = 0; i < 50 && !watch.stdout().includes('PUT'); i++) {
    await etcdctl(endpoint, [...flags, 'put', 'w', `x${i}`]);
    await new Promise((r) => setTimeout(r, 100));
  }
  if (!watch.stdout().includes('PUT')) failed.push(`watch: ${watch.stdout()}`);
  await watch.stop();
  const lease = await run(['lease', 'grant', '60']);
  const id = /lease ([0-9a-f]+) granted/.exec(lease.stdout)?.[1] ?? '0';
  await run(['lease', 'list']);
  await run(['lease', 'timetolive', id]);
  await run(['lease', 'keep-alive', '--once', id]);
  await run(['lease', 'revoke', id]);
  const rev = await run(['get', 'w', '-w', 'json']);
  const revision = (JSON.parse(rev.stdout || '{}') as { header?: { revision?: number } }).header?.revision ?? 1;
  await run(['compaction', String(revision)]);
  await run(['defrag']);
  await run(['endpoint', 'status']);
  await run(['endpoint', 'health']);
  await run(['endpoint', 'hashkv']);
  await run(['member', 'list']);
  await run(['alarm', 'list']);
  await run(['snapshot', 'save', path.join(dir, `snap-${Math.random().toString(36).slice(2)}.db`)]);
  await run(['lock', 'mylock', '--', 'echo', 'locked'], {}, (r) => r.stdout.includes('locked'));
  const elect = await startEtcdctl(t, endpoint, [...flags, 'elect', 'myelection', 'me']);
  try {
    await elect.until((out) => out.includes('me'), 10_000);
  } catch (err) {
    failed.push(`elect: ${(err as Error).message.split('\n')[0]}`);
  }
  await elect.stop();
  return failed;
}

test('every etcdctl command group with a bare endpoint and with http://, as against etcd', async (t) => {
  const dir = await tempDir(t, 'kvs-urls-');
  const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
  for (const ep of [kvs.endpoint, `http://${kvs.endpoint}`, etcd.endpoint, `http://${etcd.endpoint}`]) {
    assert.deepEqual(await everyGroup(t, ep, [], dir), [], ep);
  }
});

test('every etcdctl command group with https:// (and a bare endpoint with --cacert) on a TLS port, as against etcd', async (t) => {
  const dir = await tempDir(t, 'kvs-urls-');
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const alice = await ca.client('alice', 'alice');
  const [kvs, etcd] = await Promise.all([
    startKvs(t, { args: ['--client-tls-cert', server.cert, '--client-tls-key', server.key, '--client-tls-ca', ca.cert], probe: ca.clientTls(alice) }),
    startEtcd(t, [], { tls: { cert: server.cert, key: server.key, clientCa: ca.cert }, probe: ca.clientTls(alice) }),
  ]);
  const flags = ['--cacert', ca.cert, '--cert', alice.cert, '--key', alice.key];
  for (const ep of [`https://${kvs.endpoint}`, kvs.endpoint, `https://${etcd.endpoint}`]) {
    assert.deepEqual(await everyGroup(t, ep, flags, dir), [], ep);
  }
});
