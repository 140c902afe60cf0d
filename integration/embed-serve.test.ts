// node.serve(): an embedded node on an etcd v3 client port in the embedding process, with real
// clients: etcdctl (put, get, watch), the etcd3 npm client, curl on the JSON gateway, and TLS.
// A write through the Node API is seen by an etcdctl watch on the port and the other way round;
// close() (the port's, or the node's) stops the port.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { client, etcdctl, freePorts, startEtcdctl, tempDir } from '../testkit/harness.js';
import { makeCa } from '../testkit/certs.js';
import { run } from '../testkit/process.js';
import { open, type Node, type WatchEvent } from '../embed/index.js';

async function fresh(t: Parameters<typeof tempDir>[0]): Promise<Node> {
  const node = await open({ dataDir: await tempDir(t, 'kvs-embed-serve') });
  t.after(() => node.close());
  return node;
}

test('serve(): etcdctl and the etcd3 client on the embedded node, writes through the Node API and through the port seen by both', async (t) => {
  const node = await fresh(t);
  const [port] = await freePorts(1);
  const served = await node.serve({ listen: `127.0.0.1:${port}` });
  assert.equal(served.port, port);
  const ep = `127.0.0.1:${port}`;

  // etcdctl's watch sees a write made through the Node API.
  const watch = await startEtcdctl(t, ep, ['watch', '--prefix', 'w/']);
  await new Promise((r) => setTimeout(r, 300)); // etcdctl prints nothing once its watch is created
  const r1 = await node.put('w/a', 'from-node');
  await watch.until((out) => out.includes('w/a\nfrom-node'));

  // A write through the port: the Node reads it, and a Node watch sees it.
  const events: WatchEvent[] = [];
  const w = node.watch('w/', { prefix: true, startRevision: r1.revision + 1 });
  const seen = (async () => {
    for await (const e of w) {
      events.push(e);
      if (events.length === 1) break;
    }
  })();
  const put = await etcdctl(ep, ['put', 'w/b', 'from-etcdctl']);
  assert.equal(put.exitCode, 0, put.stderr);
  await seen;
  assert.equal(events[0]!.type, 'put');
  assert.equal(events[0]!.kv.key.toString(), 'w/b');
  assert.equal((await node.get('w/b'))?.value.toString(), 'from-etcdctl');
  await watch.until((out) => out.includes('w/b\nfrom-etcdctl'));

  const got = await etcdctl(ep, ['get', '--prefix', 'w/', '-w', 'json']);
  const kvs = JSON.parse(got.stdout).kvs.map((kv: { key: string; value: string }) => [Buffer.from(kv.key, 'base64').toString(), Buffer.from(kv.value, 'base64').toString()]);
  assert.deepEqual(kvs, [['w/a', 'from-node'], ['w/b', 'from-etcdctl']]);

  // The etcd3 npm client: a put, a txn and a lease on the port, read back through the Node API.
  const c = client(t, ep);
  await c.put('e/k').value('v1');
  assert.equal(await c.get('e/k').string(), 'v1');
  const lease = c.lease(10);
  await lease.put('e/leased').value('x');
  const leased = (await node.get('e/leased'))!;
  assert.equal(leased.lease.toString(), await lease.grant());
  const txn = await c.if('e/k', 'Value', '==', 'v1').then(c.put('e/k').value('v2')).commit();
  assert.equal(txn.succeeded, true);
  assert.equal((await node.linearizableGet('e/k'))?.value.toString(), 'v2');
  await lease.revoke();
  assert.equal(await node.get('e/leased'), undefined);

  // curl on the JSON gateway of the same port.
  const r = await run('curl', ['-s', '-XPOST', `http://${ep}/v3/kv/range`, '-d', JSON.stringify({ key: Buffer.from('w/a').toString('base64') })], { env: {} });
  const body = JSON.parse(r.stdout);
  assert.equal(Buffer.from(body.kvs[0].value, 'base64').toString(), 'from-node');
  assert.equal(Number(body.header.revision), node.currentRevision());
  // etcd's /metrics on the client port: the node's writes and the port's own watches.
  const metrics = (await run('curl', ['-s', `http://${ep}/metrics`], { env: {} })).stdout;
  assert.match(metrics, /^kvs_current_revision \d+/m);
  assert.match(metrics, /^kvs_watch_active(\{[^}]*\})? 1$/m, 'the etcdctl watch is counted');

  // close(): the port stops, the node goes on.
  await served.close();
  const refused = await etcdctl(ep, ['--dial-timeout=1s', '--command-timeout=2s', 'get', 'w/a']);
  assert.notEqual(refused.exitCode, 0);
  assert.match(refused.stderr, /connection refused|context deadline exceeded|Unavailable/i);
  await node.put('after', 'close');
  assert.equal((await node.get('after'))?.value.toString(), 'close');
});

test('serve() with TLS (PEM given as files and as bytes), a second port, and node.close() stopping every port', async (t) => {
  const node = await fresh(t);
  const ca = await makeCa(t);
  const cert = await ca.server('embedded');
  const [p1, p2] = await freePorts(2);
  const files = await node.serve({ listen: `127.0.0.1:${p1}`, tls: { cert: cert.cert, key: cert.key } });
  const pem = await node.serve({ listen: `127.0.0.1:${p2}`, tls: { cert: fs.readFileSync(cert.cert), key: fs.readFileSync(cert.key) } });
  await node.put('k', 'v');
  for (const p of [files.port, pem.port]) {
    const r = await etcdctl(`https://127.0.0.1:${p}`, ['--cacert', ca.cert, 'get', 'k', '--print-value-only']);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout.trim(), 'v');
  }
  // A plaintext client is not served on a TLS port.
  const plain = await etcdctl(`127.0.0.1:${p1}`, ['--dial-timeout=1s', '--command-timeout=2s', 'get', 'k']);
  assert.notEqual(plain.exitCode, 0);
  // A port already taken: the error names the address.
  await assert.rejects(node.serve({ listen: `127.0.0.1:${p1}` }), /cannot listen on 127\.0\.0\.1:\d+/);
  await assert.rejects(node.serve({} as { listen: string }), (err: unknown) => err instanceof TypeError && /listen/.test((err as Error).message));

  await node.close();
  for (const p of [p1, p2]) {
    const r = await etcdctl(`https://127.0.0.1:${p}`, ['--cacert', ca.cert, '--dial-timeout=1s', '--command-timeout=2s', 'get', 'k']);
    assert.notEqual(r.exitCode, 0, `port ${p} still served after node.close()`);
  }
});
