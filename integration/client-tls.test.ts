// TLS on the client port (--client-tls-cert/-key/-ca), beside a real etcd 3.4 with the same
// certificates (--cert-file/--key-file, --trusted-ca-file with --client-cert-auth): which
// clients get in, what the others see, that the node keeps serving, certificate rotation
// without a restart, and the client certificate's Common Name reaching the handlers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { copyFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import net from 'node:net';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { assertKvsRefuses, client, etcdctl, pollUntil, runKvsRefused, startEtcd, startKvs, tempDir, type CmdResult } from '../testkit/harness.js';
import { makeCa, type Ca, type CertFiles } from '../testkit/certs.js';
import { GrpcServer, type ServerCall, type UnaryCallback } from '../shared/grpc/server.js';
import { service } from '../shared/proto/index.js';

const tlsArgs = (server: CertFiles, ca?: Ca) => ['--client-tls-cert', server.cert, '--client-tls-key', server.key, ...(ca ? ['--client-tls-ca', ca.cert] : [])];
const ctlTls = (ca: Ca, cert?: CertFiles) => ['--cacert', ca.cert, ...(cert ? ['--cert', cert.cert, '--key', cert.key] : [])];
const FAIL_FAST = ['--dial-timeout=2s', '--command-timeout=3s'];

/** The server's certificate as a fresh TLS connection sees it. */
function servedCertificate(port: number, ca: Ca): Promise<tls.PeerCertificate> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ca: ca.clientTls().ca, ALPNProtocols: ['h2'] }, () => {
      resolve(s.getPeerCertificate());
      s.destroy();
    });
    s.on('error', reject);
  });
}

function handshakeFailures(output: string): string[] {
  return output.split('\n').filter((l) => l.includes('client TLS handshake failed'));
}

test('bad client TLS flags: the node refuses to start with one line naming the flag and the file', async (t) => {
  const ca = await makeCa(t);
  const dir = await tempDir(t, 'kvs-badtls-');
  const server = await ca.server('server');
  const other = await ca.server('other');
  const garbage = path.join(dir, 'garbage.pem');
  writeFileSync(garbage, 'not a certificate\n');
  const missing = path.join(dir, 'missing.pem');
  const cases: [string[], RegExp][] = [
    [['--client-tls-cert', server.cert], /^kvs: --client-tls-cert \S+server\.crt needs --client-tls-key$/],
    [['--client-tls-key', server.key], /^kvs: --client-tls-key \S+server\.key needs --client-tls-cert$/],
    [['--client-tls-ca', ca.cert], /^kvs: --client-tls-ca \S+ca\.crt needs --client-tls-cert and --client-tls-key$/],
    [['--client-tls-cert', missing, '--client-tls-key', server.key], /^kvs: --client-tls-cert \S+missing\.pem: cannot read it: ENOENT$/],
    [['--client-tls-cert', garbage, '--client-tls-key', server.key], /^kvs: --client-tls-cert \S+garbage\.pem: not a valid PEM certificate/],
    [['--client-tls-cert', server.cert, '--client-tls-key', garbage], /^kvs: --client-tls-key \S+garbage\.pem: not a valid PEM private key/],
    [[...tlsArgs(server), '--client-tls-ca', garbage], /^kvs: --client-tls-ca \S+garbage\.pem: not a valid PEM certificate/],
    [['--client-tls-cert', server.cert, '--client-tls-key', other.key], /^kvs: --client-tls-cert \S+server\.crt with --client-tls-key \S+other\.key: .*key values mismatch/],
  ];
  for (const [args, expected] of cases) await assertKvsRefuses(dir, args, expected);
  // The variables work as the flags do.
  const r = await runKvsRefused(dir, [], { env: { KVS_CLIENT_TLS_CERT: server.cert } });
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /--client-tls-cert \S+ needs --client-tls-key/);
});

test('server-side TLS: etcdctl --cacert and the etcd3 client get in; plaintext and an unknown CA do not, as with etcd', async (t) => {
  const ca = await makeCa(t);
  const otherCa = await makeCa(t, 'other-ca');
  const server = await ca.server('server');
  const [kvs, etcd] = await Promise.all([
    startKvs(t, { args: tlsArgs(server), probe: ca.clientTls() }),
    startEtcd(t, [], { tls: { cert: server.cert, key: server.key }, probe: ca.clientTls() }),
  ]);
  for (const [name, ep] of [['kvs', kvs.endpoint], ['etcd', etcd.endpoint]] as const) {
    const url = `https://${ep}`;
    assert.equal((await etcdctl(url, [...ctlTls(ca), 'put', 'k', 'v'])).stdout, 'OK\n', name);
    assert.equal((await etcdctl(ep, [...ctlTls(ca), 'get', 'k', '--print-value-only'])).stdout, 'v\n', `${name}: a bare endpoint with --cacert is TLS too`);
    const members = await etcdctl(url, [...ctlTls(ca), 'member', 'list']);
    assert.match(members.stdout, new RegExp(`, https://${ep.replace(/\./g, '\\.')}, false\n$`), `${name}: ${members.stdout}`);
    const c = client(t, ep, ca.clientTls());
    await c.put('from-etcd3').value('yes');
    assert.equal(await c.get('from-etcd3').string(), 'yes', name);
  }

  // Refused clients: the same outcome from both servers.
  const refused: [string, (ep: string) => Promise<CmdResult>][] = [
    ['plaintext client', (ep) => etcdctl(ep, [...FAIL_FAST, 'get', 'k'])],
    ['plaintext client, http:// URL', (ep) => etcdctl(`http://${ep}`, [...FAIL_FAST, 'get', 'k'])],
    ['unknown CA', (ep) => etcdctl(`https://${ep}`, [...FAIL_FAST, ...ctlTls(otherCa), 'get', 'k'])],
  ];
  for (const [what, run] of refused) {
    const [k, e] = await Promise.all([run(kvs.endpoint), run(etcd.endpoint)]);
    assert.notEqual(e.exitCode, 0, `etcd, ${what}: ${e.stdout}`);
    assert.equal(k.exitCode, e.exitCode, `${what}: kvs ${k.stderr} / etcd ${e.stderr}`);
    assert.equal(lastLine(k.stderr), lastLine(e.stderr), what);
  }
  const refusedEtcd3 = client(t, kvs.endpoint, otherCa.clientTls());
  await assert.rejects(refusedEtcd3.get('k').string(), /UNAVAILABLE|certificate/i);

  // The node kept serving, and said why each connection failed, one line each.
  assert.equal((await etcdctl(`https://${kvs.endpoint}`, [...ctlTls(ca), 'get', 'k', '--print-value-only'])).stdout, 'v\n');
  const failures = await pollUntil('the failed handshakes in the log', async () => {
    const f = handshakeFailures(kvs.output());
    return f.length > 0 ? f : undefined;
  });
  assert.ok(!kvs.output().includes('    at '), 'no stack in the log');
  assert.ok(failures.some((l) => /wrong version number/.test(l)), failures.join('\n'));
  for (const l of failures) assert.match(JSON.parse(l).peer, /^127\.0\.0\.1:\d+$/);
});

test('mutual TLS: a client certificate signed by --client-tls-ca gets in; none, an expired one or one from another CA does not, as with etcd', async (t) => {
  const ca = await makeCa(t);
  const otherCa = await makeCa(t, 'other-ca');
  const server = await ca.server('server');
  const [alice, expired, stranger] = [await ca.client('alice', 'alice'), await ca.client('expired', 'alice', { expired: true }), await otherCa.client('stranger', 'alice')];
  const [kvs, etcd] = await Promise.all([
    startKvs(t, { args: tlsArgs(server, ca), probe: ca.clientTls(alice) }),
    startEtcd(t, [], { tls: { cert: server.cert, key: server.key, clientCa: ca.cert }, probe: ca.clientTls(alice) }),
  ]);
  for (const [name, ep] of [['kvs', kvs.endpoint], ['etcd', etcd.endpoint]] as const) {
    assert.equal((await etcdctl(`https://${ep}`, [...ctlTls(ca, alice), 'put', 'k', 'v'])).stdout, 'OK\n', name);
    const c = client(t, ep, ca.clientTls(alice));
    assert.equal(await c.get('k').string(), 'v', name);
  }
  const refused: [string, string[]][] = [
    ['no client certificate', ctlTls(ca)],
    ['an expired client certificate', ctlTls(ca, expired)],
    ['a client certificate from another CA', ctlTls(ca, stranger)],
  ];
  for (const [what, args] of refused) {
    const [k, e] = await Promise.all([kvs.endpoint, etcd.endpoint].map((ep) => etcdctl(`https://${ep}`, [...FAIL_FAST, ...args, 'get', 'k'])));
    assert.notEqual(e!.exitCode, 0, `etcd, ${what}`);
    assert.equal(k!.exitCode, e!.exitCode, `${what}: kvs ${k!.stderr} / etcd ${e!.stderr}`);
    assert.equal(lastLine(k!.stderr), lastLine(e!.stderr), what);
  }
  const noCert = client(t, kvs.endpoint, ca.clientTls());
  await assert.rejects(noCert.get('k').string(), /UNAVAILABLE/);
  assert.equal((await etcdctl(`https://${kvs.endpoint}`, [...ctlTls(ca, alice), 'get', 'k', '--print-value-only'])).stdout, 'v\n');
  // The expired certificate as node's TLS client sends it (Go's client may send none, seeing
  // it expired): node's TLS server closes such a connection after the handshake, without an alert.
  await new Promise<void>((resolve) => {
    const { ca: caPem, cert, key } = ca.clientTls(expired);
    const s = tls.connect({ host: '127.0.0.1', port: kvs.port, ALPNProtocols: ['h2'], ca: caPem, cert, key });
    s.on('error', () => {});
    s.on('close', () => resolve());
  });
  const failures = await pollUntil('the failed handshakes in the log', async () => {
    const f = handshakeFailures(kvs.output());
    return f.some((l) => /certificate refused/.test(l)) ? f : undefined;
  }, 10_000).catch((err: Error) => assert.fail(`${err.message}:\n${handshakeFailures(kvs.output()).join('\n')}`));
  assert.ok(failures.some((l) => /did not return a certificate/.test(l)), failures.join('\n'));
  for (const l of failures) assert.match(JSON.parse(l).peer, /^127\.0\.0\.1:\d+$/);
});

test('a rotated server certificate is served to new connections without a restart; connected clients keep working', async (t) => {
  const ca = await makeCa(t);
  const dir = await tempDir(t, 'kvs-rotate-');
  const [first, second] = [await ca.server('first'), await ca.server('second')];
  const live = { cert: path.join(dir, 'server.crt'), key: path.join(dir, 'server.key') };
  copyFileSync(first.cert, live.cert);
  copyFileSync(first.key, live.key);
  const kvs = await startKvs(t, { args: tlsArgs(live), probe: ca.clientTls() });
  const c = client(t, kvs.endpoint, ca.clientTls());
  await c.put('k').value('before');
  const watcher = await c.watch().key('k').create();
  assert.equal((await servedCertificate(kvs.port, ca)).serialNumber, first.serial);

  // As tools rotate: each new file written beside the old one, then renamed over it.
  for (const [from, to] of [[second.cert, live.cert], [second.key, live.key]] as const) {
    copyFileSync(from, `${to}.new`);
    renameSync(`${to}.new`, to);
  }
  const served = await servedCertificate(kvs.port, ca);
  assert.equal(served.serialNumber, second.serial);
  assert.equal(served.subject.CN, 'second');
  // The connection made before the rotation still works, its watch too.
  const event = new Promise<string>((resolve) => watcher.on('put', (kv) => resolve(kv.value.toString())));
  await c.put('k').value('after');
  assert.equal(await event, 'after');
  await watcher.cancel();
  assert.equal((await etcdctl(`https://${kvs.endpoint}`, [...ctlTls(ca), 'get', 'k', '--print-value-only'])).stdout, 'after\n');
  await pollUntil('the reload logged', async () => (/client TLS certificate reloaded/.test(kvs.output()) ? true : undefined), 10_000);

  // A half-done rotation (a certificate without its key) keeps the current one served.
  copyFileSync(first.cert, live.cert);
  assert.equal((await servedCertificate(kvs.port, ca)).serialNumber, second.serial);
  // The gateway's log line reaches the test through the supervisor's output, a moment later.
  await pollUntil('the reload failure logged', async () => (/client TLS files changed but do not load/.test(kvs.output()) ? true : undefined), 10_000);
  copyFileSync(first.key, live.key);
  assert.equal((await servedCertificate(kvs.port, ca)).serialNumber, first.serial);
});

test('the Common Name of a verified client certificate reaches the handlers (ServerCall.peerCommonName)', async (t) => {
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const alice = await ca.client('alice', 'alice');
  const seen: (string | undefined)[] = [];
  const start = async (withCa: boolean) => {
    const s = new GrpcServer({ maxReceiveMessageLength: 1024, tls: { cert: server.cert, key: server.key, ...(withCa ? { ca: ca.cert } : {}) } });
    s.addService(service('etcdserverpb.KV'), {
      Range(call: ServerCall, cb: UnaryCallback<object>) {
        seen.push(call.peerCommonName);
        cb(null, {});
      },
    });
    const port = await s.listen('127.0.0.1:0');
    t.after(() => s.shutdown(100));
    return port;
  };
  const KV = grpc.makeGenericClientConstructor(service('etcdserverpb.KV'), 'KV');
  const range = (port: number, creds: grpc.ChannelCredentials) => {
    const c = new KV(`127.0.0.1:${port}`, creds) as grpc.Client & Record<string, any>;
    return new Promise<void>((resolve, reject) =>
      c.Range({ key: Buffer.from('k') }, (err: Error | null) => {
        c.close();
        if (err) reject(err);
        else resolve();
      }),
    ).finally(() => c.close());
  };
  const tlsFiles = ca.clientTls(alice);
  await range(await start(true), grpc.credentials.createSsl(tlsFiles.ca, tlsFiles.key, tlsFiles.cert));
  await range(await start(false), grpc.credentials.createSsl(tlsFiles.ca));
  assert.deepEqual(seen, ['alice', undefined]);
});

function lastLine(s: string): string {
  return s.trimEnd().split('\n').pop() ?? '';
}

/** A TLS handshake to the port: the negotiated protocol and ALPN, or the error. */
function handshake(port: number, opts: tls.ConnectionOptions): Promise<{ version?: string; alpn?: string | false | null; error?: string }> {
  return new Promise((resolve) => {
    const s = tls.connect({ host: '127.0.0.1', port, ...opts }, () => {
      // The server refuses a connection without h2 after the handshake: wait for that too.
      const r = { version: s.getProtocol() ?? undefined, alpn: s.alpnProtocol };
      s.once('close', () => resolve({ ...r, error: 'closed by the server' }));
      setTimeout(() => {
        s.destroy();
        resolve(r);
      }, 500);
    });
    s.on('error', (err) => resolve({ error: err.message }));
  });
}

test('TLS 1.2 and 1.3 with ALPN h2 get in, and with http/1.1 (the JSON gateway); TLS 1.1, a client offering neither and a ClientHello of garbage do not; the node keeps serving', async (t) => {
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const kvs = await startKvs(t, { args: tlsArgs(server), probe: ca.clientTls() });
  const { ca: caPem } = ca.clientTls();
  for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
    const r = await handshake(kvs.port, { ca: caPem, ALPNProtocols: ['h2'], minVersion: v, maxVersion: v });
    assert.deepEqual(r, { version: v, alpn: 'h2' }, v);
  }
  const old = await handshake(kvs.port, { ca: caPem, ALPNProtocols: ['h2'], minVersion: 'TLSv1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' });
  assert.ok(old.error, `TLS 1.1 got in: ${JSON.stringify(old)}`);
  // HTTP/1.1 is the JSON gateway's (docs/json-gateway.md); h2 is preferred when both are offered.
  assert.deepEqual(await handshake(kvs.port, { ca: caPem, ALPNProtocols: ['http/1.1'] }), { version: 'TLSv1.3', alpn: 'http/1.1' });
  assert.deepEqual(await handshake(kvs.port, { ca: caPem, ALPNProtocols: ['http/1.1', 'h2'] }), { version: 'TLSv1.3', alpn: 'h2' });
  const neither = await handshake(kvs.port, { ca: caPem, ALPNProtocols: ['spdy/3'] });
  assert.ok(neither.error, `a client offering neither h2 nor http/1.1 got in: ${JSON.stringify(neither)}`);
  // A TLS record header (handshake, TLS 1.0) followed by garbage.
  await new Promise<void>((resolve) => {
    const s = net.connect(kvs.port, '127.0.0.1', () => s.write(Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0x00, 0x40]), Buffer.alloc(64, 0xab)])));
    s.on('error', () => undefined);
    s.on('close', () => resolve());
    s.resume();
  });
  assert.equal((await etcdctl(`https://${kvs.endpoint}`, [...ctlTls(ca), 'put', 'k', 'still']).then((r) => r.stdout)), 'OK\n');
  const failures = await pollUntil('the refused handshakes in the log', async () => {
    const f = handshakeFailures(kvs.output());
    return f.length >= 3 ? f.map((l) => (JSON.parse(l) as { msg: string }).msg) : undefined;
  });
  // One line each, saying why: the server refused TLS 1.1, found no common ALPN protocol, and
  // could not read the garbage.
  assert.deepEqual(failures, ['client TLS handshake failed: unsupported protocol', 'client TLS handshake failed: no application protocol', 'client TLS handshake failed: unexpected message']);
  assert.ok(!kvs.output().includes('    at '), 'no stack in the log');
});
