// Real clients of etcd's JSON gateway against kvs and a real etcd 3.4 side by side: Debian's
// python3-etcd3gw (what OpenStack's tooz and other applications speak), curl as an operator's
// script uses it (HTTP/1.1, and HTTP/2 by ALPN over TLS), and python3-etcd3 (gRPC through the
// grpc C core) on the same port. Each must see the same things from both servers.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { makeCa } from '../testkit/certs.js';
import { REPO_ROOT, runCommand, startEtcd, startKvs } from '../testkit/harness.js';

const PYTHON = '/usr/bin/python3';
const CLIENTS = path.join(REPO_ROOT, 'integration', 'clients');
const hostPort = (endpoint: string) => endpoint.split(':') as [string, string];

async function python(script: string, args: string[]): Promise<Record<string, unknown>> {
  // requests lets these variables override a session's CA (etcd3gw's ca_cert): cleared.
  const r = await runCommand(PYTHON, [path.join(CLIENTS, script), ...args], { timeoutMs: 60_000, env: { REQUESTS_CA_BUNDLE: '', CURL_CA_BUNDLE: '' } });
  assert.equal(r.exitCode, 0, `${script} ${args.join(' ')} failed:\n${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

async function curl(args: string[]): Promise<{ status: number; body: string }> {
  const r = await runCommand('curl', ['-sS', '-w', '\n%{http_code} %{http_version}', ...args], { timeoutMs: 30_000 });
  assert.equal(r.exitCode, 0, `curl ${args.join(' ')} failed: ${r.stderr}`);
  const nl = r.stdout.lastIndexOf('\n');
  return { status: Number(r.stdout.slice(nl + 1).split(' ')[0]), body: r.stdout.slice(0, nl) };
}

/** The fields of an answer that do not depend on which server gave it. */
function portable(body: string): unknown {
  const v = JSON.parse(body) as Record<string, unknown>;
  delete v.header;
  return v;
}

const havePython = existsSync(PYTHON) && (await runCommand(PYTHON, ['-c', 'import etcd3gw, etcd3']).then((r) => r.exitCode === 0));
const skip = havePython ? false : 'needs Debian python3-etcd3gw and python3-etcd3 (.ci/run installs them)';

describe('JSON gateway clients, plaintext', { skip }, () => {
  test('python3-etcd3gw sees the same from kvs as from etcd: put/get/create/replace, leases, its lock, a watch, deletes', async (t) => {
    const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
    const [a, b] = await Promise.all([python('etcd3gw-check.py', hostPort(kvs.endpoint)), python('etcd3gw-check.py', hostPort(etcd.endpoint))]);
    assert.deepEqual(a, b);
    assert.deepEqual(a.watch, [{ type: 'PUT', key: '/app/watched', value: 'w' }]);
    assert.equal(a.lock_other_acquire, false);
  });

  test('python3-etcd3 (gRPC over the grpc C core) on the same port as the JSON clients', async (t) => {
    const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
    const [a, b] = await Promise.all([python('etcd3-grpc-check.py', hostPort(kvs.endpoint)), python('etcd3-grpc-check.py', hostPort(etcd.endpoint))]);
    assert.deepEqual(a, b);
    // And the same port still serves JSON to curl after a gRPC client used it.
    const r = await curl(['-X', 'POST', `http://${kvs.endpoint}/v3/kv/range`, '-d', '{"key":"L3B5L2E="}']);
    assert.equal(r.status, 200);
  });

  test("curl as etcd's documentation uses it: put, range, a streamed watch, /version, /health", async (t) => {
    const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
    for (const ep of [kvs.endpoint, etcd.endpoint]) {
      const put = await curl(['-X', 'POST', `http://${ep}/v3/kv/put`, '-d', '{"key": "Zm9v", "value": "YmFy"}']);
      assert.equal(put.status, 200, put.body);
    }
    const both = async (route: string, body: string) => {
      const [a, b] = await Promise.all([kvs.endpoint, etcd.endpoint].map((ep) => curl(['-X', 'POST', `http://${ep}${route}`, '-d', body])));
      assert.equal(a.status, b.status, `${route} ${body}: ${a.body} / ${b.body}`);
      assert.deepEqual(portable(a.body), portable(b.body), route);
      return a;
    };
    const range = await both('/v3/kv/range', '{"key": "Zm9v"}');
    assert.match(range.body, /"value":"YmFy"/);
    await both('/v3/kv/range', '{"key": "Zm9v", "range_end": "Zm9w", "keys_only": true}');
    await both('/v3/kv/deleterange', '{"key": "bm9uZQ=="}');
    // A watch from revision 1 streams the put as its second line; --max-time ends it.
    const watch = await runCommand('curl', ['-sS', '-N', '--max-time', '2', '-X', 'POST', `http://${kvs.endpoint}/v3/watch`, '-d', '{"create_request": {"key": "Zm9v", "start_revision": "1"}}'], { timeoutMs: 30_000 });
    const lines = watch.stdout.trim().split('\n').map((l) => JSON.parse(l) as { result: Record<string, unknown> });
    assert.equal(lines[0].result.created, true);
    assert.equal((lines[1].result.events as { kv: { value: string } }[])[0].kv.value, 'YmFy');
    const version = await curl([`http://${kvs.endpoint}/version`]);
    assert.deepEqual(Object.keys(JSON.parse(version.body)).sort(), ['etcdcluster', 'etcdserver']);
    const health = await curl([`http://${kvs.endpoint}/health`]);
    assert.deepEqual([health.status, JSON.parse(health.body)], [200, { health: 'true' }]);
  });
});

describe('JSON gateway clients over TLS', { skip }, () => {
  test('python3-etcd3gw over https and curl over HTTP/2 (ALPN h2) and HTTP/1.1 see the same from kvs as from etcd', async (t) => {
    const ca = await makeCa(t);
    const server = await ca.server('server');
    const [kvs, etcd] = await Promise.all([
      startKvs(t, { args: ['--client-tls-cert', server.cert, '--client-tls-key', server.key], probe: ca.clientTls() }),
      startEtcd(t, [], { tls: { cert: server.cert, key: server.key }, probe: ca.clientTls() }),
    ]);
    const [a, b] = await Promise.all([kvs, etcd].map((n) => python('etcd3gw-check.py', [...hostPort(n.endpoint), 'https', ca.cert])));
    assert.deepEqual(a, b);
    for (const version of ['--http2', '--http1.1']) {
      const answers = await Promise.all(
        [kvs, etcd].map((n) => runCommand('curl', ['-sS', version, '--cacert', ca.cert, '-w', '\n%{http_code} %{http_version}', '-X', 'POST', `https://${n.endpoint}/v3/kv/range`, '-d', '{"key":"L2FwcC8=","range_end":"L2FwcDA="}'], { timeoutMs: 30_000 })),
      );
      const [ka, ea] = answers.map((r) => {
        assert.equal(r.exitCode, 0, r.stderr);
        const nl = r.stdout.lastIndexOf('\n');
        return { tail: r.stdout.slice(nl + 1), body: portable(r.stdout.slice(0, nl)) };
      });
      assert.deepEqual(ka, ea, version);
      assert.equal(ka.tail, version === '--http2' ? '200 2' : '200 1.1');
    }
  });
});
