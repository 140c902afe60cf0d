// Peer TLS (docs/security.md#peer-tls): with --peer-tls-ca/-cert/-key the peer port speaks
// mutual TLS 1.3 only, both directions. A cluster of such nodes works as any cluster; a node
// without peer TLS, with a certificate of another CA or with an expired certificate cannot
// join (it keeps trying and never follows, nor leads), and each side logs one clear line for
// it, not one per retry. A TLS node cannot join a plaintext cluster either.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { assertKvsRefuses, etcdctl, pollUntil, runCommand, runKvsRefused, tempDir } from '../testkit/harness.js';
import { makeCa, type Ca, type CertFiles } from '../testkit/certs.js';
import { leaderOf, startCluster, waitForLeader, type ClusterNode, type TestCluster } from '../testkit/node-cluster.js';

const tlsArgs = (ca: Ca, c: CertFiles) => ['--peer-tls-ca', ca.cert, '--peer-tls-cert', c.cert, '--peer-tls-key', c.key];

/** A node that must not join must not lead either: it never sees the lock still for this long. */
const NEVER_TAKE_OVER = ['--leader-liveness-ttl', '10m'];
/** The bad node logs each failed attempt at debug level: how many to see before counting lines. */
const ATTEMPTS = 6;

const lines = (out: string, re: RegExp) => out.split('\n').filter((l) => re.test(l));

interface Refusal {
  /** The line the joining node logs (once). */
  joiner: RegExp;
  /** The line the leader logs (once). */
  leader: RegExp;
}

/**
 * Starts `id` with `args` beside `cluster` and checks that it cannot join: both lines appear
 * exactly once while the node keeps retrying; it is not in the leader's member list, never
 * gets the data, never leads, and the leader is unchanged. Stops it again.
 */
async function cannotJoin(cluster: TestCluster, leader: ClusterNode, id: string, args: string[], expect: Refusal, then?: (bad: ClusterNode, key: string) => Promise<void>): Promise<void> {
  const bad = await cluster.add(id, [...args, ...NEVER_TAKE_OVER, '--log-level', 'debug']);
  try {
    // A new node restores what the object store holds at boot; what is written from now on
    // reaches it only by following the leader.
    const key = `tls/after-${id}`;
    await leader.client.put(key).value('x').exec();
    await pollUntil(`${id}: ${ATTEMPTS} failed attempts to follow the leader`, async () => (lines(bad.kvs.output(), /cannot reach the leader/).length >= ATTEMPTS ? true : undefined), 60_000);
    assert.equal(lines(bad.kvs.output(), expect.joiner).length, 1, `${id} logs one line matching ${expect.joiner}:\n${lines(bad.kvs.output(), /"level":(40|50)/).join('\n')}`);
    assert.equal(lines(leader.kvs.output(), expect.leader).length, 1, `the leader logs one line matching ${expect.leader}:\n${lines(leader.kvs.output(), /refused a peer/).join('\n')}`);
    assert.equal(lines(bad.kvs.output(), /following the leader/).length, 0, `${id} never followed`);

    const members = JSON.parse((await etcdctl(leader.endpoint, ['member', 'list', '-w', 'json'])).stdout) as { members: { name: string }[] };
    assert.deepEqual(members.members.map((m) => m.name).sort(), cluster.nodes.map((n) => n.id).sort(), `${id} is not a member`);
    // Nothing replicated: a local (serializable) read on it does not see the new key.
    const local = await etcdctl(bad.endpoint, ['get', key, '--consistency=s', '--print-value-only']);
    assert.equal(local.exitCode, 0, local.stderr);
    assert.equal(local.stdout.trim(), '', `${id} has none of the cluster's data`);
    assert.notEqual(await leaderOf(bad), true, `${id} does not lead`);
    assert.equal((await waitForLeader(cluster.nodes, 10_000)).id, leader.id, 'the leader is unchanged');
    await then?.(bad, key);
  } finally {
    await bad.kvs.stop();
  }
}

/** Rotates `target`'s files to `from`'s contents (each by rename), as certificate tooling does. */
function replaceFiles(target: CertFiles, from: CertFiles): void {
  for (const k of ['key', 'cert'] as const) {
    copyFileSync(from[k], `${target[k]}.new`);
    renameSync(`${target[k]}.new`, target[k]);
  }
}

/** `node` follows the leader now: it says so, the leader lists it, and it has `key`. */
async function joins(leader: ClusterNode, node: ClusterNode, key: string): Promise<void> {
  await pollUntil(`${node.id} follows the leader`, async () => (lines(node.kvs.output(), /following the leader/).length > 0 ? true : undefined), 30_000);
  await pollUntil(`${node.id} is a member and has ${key}`, async () => {
    const members = JSON.parse((await etcdctl(leader.endpoint, ['member', 'list', '-w', 'json'])).stdout) as { members: { name: string }[] };
    if (!members.members.some((m) => m.name === node.id)) return undefined;
    const local = await etcdctl(node.endpoint, ['get', key, '--consistency=s', '--print-value-only']);
    return local.stdout.trim() === 'x' ? true : undefined;
  }, 30_000);
}

async function openssl(args: string[]) {
  return runCommand('openssl', args, { env: { OPENSSL_CONF: '/usr/lib/ssl/openssl.cnf' }, timeoutMs: 15_000 });
}

test('peer mutual TLS 1.3: a cluster works; no TLS, another CA or an expired certificate cannot join, and both sides say so once', async (t) => {
  const ca = await makeCa(t, 'kvs-peer-ca');
  const other = await makeCa(t, 'kvs-other-ca');
  const certs = new Map<string, CertFiles>();
  for (const id of ['n1', 'n2', 'n3']) certs.set(id, await ca.peer(id));
  const cluster = await startCluster(t, 3, { nodeArgs: async (id) => (certs.has(id) ? tlsArgs(ca, certs.get(id)!) : []) });
  const { nodes } = cluster;
  const leader = await waitForLeader(nodes);
  const [f1, f2] = nodes.filter((n) => n !== leader);

  await t.test('writes on a follower are forwarded over peer TLS, reads on another follower see them', async () => {
    const put = await f1.client.put('tls/k').value('v1').exec();
    assert.equal(await f2.client.get('tls/k').string(), 'v1');
    const got = await f2.client.get('tls/k').exec();
    assert.equal(Number(got.kvs[0].mod_revision), Number(put.header.revision));
    assert.equal(await leader.client.get('tls/k').string(), 'v1');
    for (const n of nodes) assert.match(n.kvs.output(), /"tls":true[^\n]*peer agent ready|peer agent ready[^\n]*"tls":true/, `${n.id} serves peer TLS`);
  });

  await t.test('the peer port does TLS 1.3 with a certificate of the CA and refuses TLS 1.2 (openssl s_client)', async () => {
    const c = certs.get(leader.id)!;
    const base = ['s_client', '-connect', `127.0.0.1:${leader.peerPort}`, '-CAfile', ca.cert, '-cert', c.cert, '-key', c.key, '-alpn', 'h2', '-verify_return_error'];
    const v13 = await openssl([...base, '-tls1_3']);
    assert.equal(v13.exitCode, 0, v13.stdout + v13.stderr);
    assert.match(v13.stdout, /^New, TLSv1\.3, Cipher is /m);
    assert.match(v13.stdout, /Verify return code: 0 \(ok\)/);
    const v12 = await openssl([...base, '-tls1_2']);
    assert.notEqual(v12.exitCode, 0, `TLS 1.2 must be refused:\n${v12.stdout}${v12.stderr}`);
    assert.match(v12.stderr, /alert protocol version|unsupported protocol|no protocols available/i);
    // s_client prints the version it tried even for a failed handshake: no cipher, no certificate.
    assert.match(v12.stdout, /^New, \(NONE\), Cipher is \(NONE\)/m);
    assert.match(v12.stdout, /no peer certificate available/);
    await pollUntil('the leader logs the TLS 1.2 attempt', async () => (lines(leader.kvs.output(), /refused a peer connection from 127\.0\.0\.1: it does not offer TLS 1\.3/).length === 1 ? true : undefined), 10_000);
  });

  await t.test('a node with a certificate of another CA cannot join', async () => {
    await cannotJoin(cluster, leader, 'other-ca', tlsArgs(other, await other.peer('other-ca')), {
      joiner: /cannot connect to the leader at 127\.0\.0\.1:\d+: its peer TLS certificate is not signed by this node's --peer-tls-ca/,
      leader: /refused a peer connection from 127\.0\.0\.1: it closed the connection during the TLS handshake: it probably refused this node's peer TLS certificate/,
    });
  });

  await t.test('a node without peer TLS cannot join a TLS cluster', async () => {
    await cannotJoin(cluster, leader, 'no-tls', [], {
      joiner: new RegExp(`cannot join the cluster: the leader refused this node: peer connection refused by ${leader.id}: its peer port requires mutual TLS and this node dialed without TLS`),
      leader: /refused a peer connection from 127\.0\.0\.1: it does not use TLS, and peer TLS is on here/,
    });
  });

  await t.test('a node with an expired certificate (of the right CA) cannot join; once its files are replaced it joins, without a restart', async () => {
    const expired = await ca.peer('expired', { expired: true });
    await cannotJoin(
      cluster,
      leader,
      'expired',
      tlsArgs(ca, expired),
      {
        joiner: new RegExp(`cannot join the cluster: the leader refused this node: peer connection refused by ${leader.id}: this node's peer TLS certificate has expired`),
        leader: /refused a peer connection from 127\.0\.0\.1: its certificate has expired/,
      },
      async (bad, key) => {
        assert.equal(lines(bad.kvs.output(), /this node's peer TLS certificate \(--peer-tls-cert\) is expired/).length, 1, 'it says its own certificate expired');
        replaceFiles(expired, await ca.peer('renewed'));
        await joins(leader, bad, key);
        assert.match(bad.kvs.output(), /peer TLS files reloaded/);
      },
    );
  });

  // The cluster is as it was.
  await f2.client.put('tls/k').value('v2').exec();
  assert.equal(await f1.client.get('tls/k').string(), 'v2');
});

test('a node with peer TLS cannot join a plaintext cluster; a leader with an expired certificate takes no follower until its files are replaced', async (t) => {
  const ca = await makeCa(t, 'kvs-peer-ca');
  const plain = await startCluster(t, 1);
  const plainLeader = await waitForLeader(plain.nodes);
  await cannotJoin(plain, plainLeader, 'tls-joiner', tlsArgs(ca, await ca.peer('tls-joiner')), {
    joiner: /cannot connect to the leader at 127\.0\.0\.1:\d+: its peer port does not speak TLS: the leader runs without peer TLS and this node with it/,
    leader: /refused a peer connection from 127\.0\.0\.1: it uses TLS, and peer TLS is off here/,
  });

  // A one-node TLS cluster whose leader's certificate expired: it still leads (alone), and says
  // its certificate is refused; a valid node cannot follow it, and says why.
  const expired = await ca.peer('old', { expired: true });
  const old = await startCluster(t, 1, { ids: ['old'], args: tlsArgs(ca, expired) });
  const oldLeader = await waitForLeader(old.nodes);
  assert.equal(lines(oldLeader.kvs.output(), /this node's peer TLS certificate \(--peer-tls-cert\) is expired/).length, 1);
  await cannotJoin(
    old,
    oldLeader,
    'fresh',
    tlsArgs(ca, await ca.peer('fresh')),
    {
      joiner: /cannot connect to the leader at 127\.0\.0\.1:\d+: its peer TLS certificate has expired/,
      leader: /refused a peer connection from 127\.0\.0\.1: it closed the connection during the TLS handshake/,
    },
    async (fresh, key) => {
      // Still one line about its own certificate: checked at every handshake, logged on change.
      assert.equal(lines(oldLeader.kvs.output(), /this node's peer TLS certificate \(--peer-tls-cert\) is expired/).length, 1);
      // The leader's files are replaced: its next handshake serves the new certificate.
      replaceFiles(expired, await ca.peer('old-renewed'));
      await joins(oldLeader, fresh, key);
      assert.match(oldLeader.kvs.output(), /peer TLS files reloaded/);
      assert.match(oldLeader.kvs.output(), /this node's peer TLS certificate is valid again/);
    },
  );
});

test('bad peer TLS flags: the node refuses to start with one line naming the flag and the file', async (t) => {
  const ca = await makeCa(t, 'kvs-peer-ca');
  const dir = await tempDir(t, 'kvs-badpeertls-');
  const n1 = await ca.peer('n1');
  const n2 = await ca.peer('n2');
  const serverOnly = await ca.server('server-only'); // extendedKeyUsage=serverAuth: cannot dial
  const garbage = path.join(dir, 'garbage.pem');
  writeFileSync(garbage, 'not a certificate\n');
  const missing = path.join(dir, 'missing.pem');
  const cases: [string[], RegExp][] = [
    [['--peer-tls-ca', ca.cert], /^kvs: peer TLS needs all three of --peer-tls-ca, --peer-tls-cert and --peer-tls-key$/],
    [['--peer-tls-cert', n1.cert, '--peer-tls-key', n1.key], /^kvs: peer TLS needs all three/],
    [['--peer-tls-ca', missing, '--peer-tls-cert', n1.cert, '--peer-tls-key', n1.key], /^kvs: --peer-tls-ca \S+missing\.pem: cannot read it: ENOENT$/],
    [['--peer-tls-ca', garbage, '--peer-tls-cert', n1.cert, '--peer-tls-key', n1.key], /^kvs: --peer-tls-ca \S+garbage\.pem: not a valid PEM certificate/],
    [['--peer-tls-ca', ca.cert, '--peer-tls-cert', garbage, '--peer-tls-key', n1.key], /^kvs: --peer-tls-cert \S+garbage\.pem: not a valid PEM certificate/],
    [['--peer-tls-ca', ca.cert, '--peer-tls-cert', n1.cert, '--peer-tls-key', garbage], /^kvs: --peer-tls-key \S+garbage\.pem: not a valid PEM private key/],
    [['--peer-tls-ca', ca.cert, '--peer-tls-cert', n1.cert, '--peer-tls-key', n2.key], /^kvs: --peer-tls-key \S+n2\.key is not the private key of --peer-tls-cert \S+n1\.crt$/],
    [tlsArgs(ca, serverOnly), /^kvs: --peer-tls-cert \S+server-only\.crt: its extended key usage lacks clientAuth; /],
  ];
  for (const [args, expected] of cases) await assertKvsRefuses(dir, args, expected);
  // The variables work as the flags do.
  const r = await runKvsRefused(dir, [], {
    env: { KVS_PEER_TLS_CA: ca.cert, KVS_PEER_TLS_CERT: serverOnly.cert, KVS_PEER_TLS_KEY: serverOnly.key },
  });
  assert.equal(r.exitCode, 2);
  assert.match(r.stderr, /--peer-tls-cert \S+server-only\.crt: its extended key usage lacks clientAuth/);
});
