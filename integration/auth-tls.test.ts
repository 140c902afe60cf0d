// Mutual TLS with auth enabled: a request without a token is the user its client certificate's
// Common Name names (etcd's --client-cert-auth), beside a real etcd 3.4 with the same
// certificates and the same users.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { etcdctl, startEtcd, startKvs, type CmdResult } from '../testkit/harness.js';
import { makeCa, type CertFiles } from '../testkit/certs.js';

const lastLine = (s: string) => s.trimEnd().split('\n').at(-1) ?? '';

test('mutual TLS + auth: the client certificate\'s Common Name is the user when no token is sent, as etcd', async (t) => {
  const ca = await makeCa(t);
  const server = await ca.server('server');
  const [root, alice, nobody] = [await ca.client('root', 'root'), await ca.client('alice', 'alice'), await ca.client('nobody', 'nobody')];
  const tlsArgs = ['--client-tls-cert', server.cert, '--client-tls-key', server.key, '--client-tls-ca', ca.cert];
  const [kvs, etcd] = await Promise.all([
    startKvs(t, { args: tlsArgs, probe: ca.clientTls(root) }),
    startEtcd(t, [], { tls: { cert: server.cert, key: server.key, clientCa: ca.cert }, probe: ca.clientTls(root) }),
  ]);
  const as = (ep: string, cert: CertFiles, args: string[]): Promise<CmdResult> =>
    etcdctl(`https://${ep}`, ['--dial-timeout=3s', '--command-timeout=5s', '--cacert', ca.cert, '--cert', cert.cert, '--key', cert.key, ...args]);
  const setup = [
    ['user', 'add', 'root', '--new-user-password=rootpw'],
    ['user', 'grant-role', 'root', 'root'],
    ['role', 'add', 'a-rw'],
    ['role', 'grant-permission', 'a-rw', 'readwrite', 'a/', '--prefix'],
    ['user', 'add', 'alice', '--new-user-password=alicepw'],
    ['user', 'grant-role', 'alice', 'a-rw'],
    ['auth', 'enable'],
  ];
  const steps: [CertFiles, string[]][] = [
    [alice, ['put', 'a/x', '1']], // alice's role covers a/
    [alice, ['get', 'a/x', '--print-value-only']],
    [alice, ['put', 'b/x', '1']], // outside it: denied
    [alice, ['get', 'b/x']],
    [nobody, ['get', 'a/x']], // a CN that names no user
    [root, ['user', 'list']], // root by its certificate
    [root, ['put', 'b/x', '2']],
    [alice, ['user', 'list']], // not root
  ];
  const outcome = (r: CmdResult) => ({ exit: r.exitCode, out: r.stdout, err: r.exitCode ? lastLine(r.stderr) : '' });
  for (const [name, ep] of [['kvs', kvs.endpoint], ['etcd', etcd.endpoint]] as const) {
    for (const args of setup) {
      const r = await as(ep, root, args);
      assert.equal(r.exitCode, 0, `${name}: ${args.join(' ')}: ${r.stderr}`);
    }
  }
  for (const [cert, args] of steps) {
    const [k, e] = [outcome(await as(kvs.endpoint, cert, args)), outcome(await as(etcd.endpoint, cert, args))];
    assert.deepEqual(k, e, `${args.join(' ')} as ${cert.cert}`);
  }
  // What the steps show, spelled out (etcd agreed on each above).
  assert.equal(outcome(await as(kvs.endpoint, alice, ['get', 'a/x', '--print-value-only'])).out, '1\n');
  assert.match(outcome(await as(kvs.endpoint, alice, ['put', 'b/x', '1'])).err, /permission denied/);
  assert.equal(outcome(await as(kvs.endpoint, root, ['get', 'b/x', '--print-value-only'])).out, '2\n');
  // A token still wins over the certificate: alice's certificate with root's password.
  const withUser = await as(kvs.endpoint, alice, ['--user', 'root:rootpw', 'user', 'list']);
  assert.equal(withUser.exitCode, 0, withUser.stderr);
  assert.match(withUser.stdout, /alice\nroot/);
});
