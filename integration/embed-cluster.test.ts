// An embedded node as a member of a cluster with `kvs run` nodes, on a local-directory object
// store: as a follower (in this process) and as the leader (in a program of its own, so that it
// can be killed). Writes made through etcdctl on a `kvs run` node are seen by the embedded
// node's linearizableGet, and its own writes are seen there; node.role() says what it is; with
// the embedded leader killed -9, the `kvs run` nodes elect one of theirs and go on, with every
// write the embedded leader acknowledged.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { Etcd3 } from 'etcd3';
import {
  REPO_ROOT, TEST_CALL_OPTIONS, TEST_FAULT_HANDLING, etcdctl, localObjectStore, onCleanup, pollUntil, reservePort, startKvs, tempDir, type Ctx, type KvsNode, type ObjectStoreSpec,
} from '../testkit/harness.js';
import { FAST_FAILOVER, startCluster } from '../testkit/node-cluster.js';
import { makeCa, type CertFiles } from '../testkit/certs.js';
import { open, type OpenOptions } from '../embed/index.js';

const location = (s: ObjectStoreSpec) => ({ bucket: s.bucket, prefix: s.prefix, endpoint: s.endpoint });

async function value(endpoint: string, key: string): Promise<string> {
  const r = await etcdctl(endpoint, ['get', key, '--print-value-only']);
  assert.equal(r.exitCode, 0, r.stderr);
  return r.stdout.trim();
}

async function put(endpoint: string, key: string, v: string): Promise<void> {
  const r = await etcdctl(endpoint, ['put', key, v]);
  assert.equal(r.exitCode, 0, r.stderr);
}

test('an embedded follower of two kvs run nodes, on peer TLS given as PEM: role, writes both ways, linearizable reads, its client port, and the cluster after it closes', async (t) => {
  // Peer TLS as the kvs run nodes have it from their flags; the embedded node's as bytes.
  const ca = await makeCa(t);
  const certs = new Map<string, CertFiles>();
  for (const id of ['n1', 'n2', 'e3']) certs.set(id, await ca.peer(id));
  const cluster = await startCluster(t, 2, { nodeArgs: async (id) => ['--peer-tls-ca', ca.cert, '--peer-tls-cert', certs.get(id)!.cert, '--peer-tls-key', certs.get(id)!.key] });
  const [n1, n2] = cluster.nodes as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
  const peerPort = await reservePort(t);
  const node = await open({
    dataDir: await tempDir(t, 'kvs-embed-member'),
    objectStore: location(cluster.objectStore!),
    nodeId: 'e3',
    peerListen: `127.0.0.1:${peerPort}`,
    peerServerTLS: { ca: fs.readFileSync(ca.cert), cert: fs.readFileSync(certs.get('e3')!.cert), key: fs.readFileSync(certs.get('e3')!.key) },
  });
  t.after(() => node.close());
  await pollUntil('the embedded node to follow', async () => (node.role() === 'follower' ? true : undefined));

  // A write on a kvs run node: the embedded node's linearizable read sees it at once.
  await put(n1.endpoint, 'from-n1', 'a');
  assert.equal((await node.linearizableGet('from-n1'))?.value.toString(), 'a');
  // Its own write is forwarded to the leader and seen on the other kvs run node.
  const w = await node.put('from-e3', 'b');
  assert.equal(await value(n2.endpoint, 'from-e3'), 'b');
  assert.equal((await node.get('from-e3'))?.modRevision, w.revision);
  // A compare-and-swap through the leader.
  await node.update('from-n1', 'a2', (await node.linearizableGet('from-n1'))!.modRevision);
  assert.equal(await value(n1.endpoint, 'from-n1'), 'a2');

  // The member list of the cluster names it.
  const members = await etcdctl(n1.endpoint, ['member', 'list', '-w', 'json']);
  const names = (JSON.parse(members.stdout).members as { name: string }[]).map((m) => m.name).sort();
  assert.deepEqual(names, ['e3', 'n1', 'n2']);

  // Its client port serves the cluster: a put there is forwarded to the leader.
  const served = await node.serve({ listen: `127.0.0.1:${await reservePort(t)}` });
  const ep = `127.0.0.1:${served.port}`;
  await put(ep, 'via-e3-port', 'c');
  assert.equal(await value(n1.endpoint, 'via-e3-port'), 'c');
  assert.equal(await value(ep, 'from-n1'), 'a2');
  const status = await etcdctl(ep, ['endpoint', 'status', '-w', 'json']);
  const s = JSON.parse(status.stdout)[0].Status;
  assert.notEqual(s.leader, s.header.member_id, 'the embedded node does not say it leads');

  // Closed, it leaves a cluster that goes on.
  await node.close();
  await put(n1.endpoint, 'after-e3', 'd');
  assert.equal(await value(n2.endpoint, 'after-e3'), 'd');
});

/** The embedded member in a program of its own (integration/embed-member.ts), and calls of its Node API. */
async function startMember(t: Ctx, options: OpenOptions & { listen?: string }) {
  const child: ChildProcess = spawn(process.execPath, [path.join(REPO_ROOT, 'dist/integration/embed-member.js'), JSON.stringify(options)], { stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  onCleanup(t, () => void child.kill('SIGKILL'));
  let stderr = '';
  child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (b: Buffer) => b.toString().includes('open') && resolve());
    void exited.then(() => reject(new Error(`the embedding program exited before open() resolved:\n${stderr}`)));
  });
  let nextId = 1;
  const waiting = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  child.on('message', (m: { id: number; result?: unknown; error?: string }) => {
    const w = waiting.get(m.id);
    waiting.delete(m.id);
    if (m.error !== undefined) w?.reject(new Error(m.error));
    else w?.resolve(m.result);
  });
  const call = <T>(op: string, key?: string, v?: string) =>
    new Promise<T>((resolve, reject) => {
      const id = nextId++;
      waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      child.send({ id, op, key, value: v });
    });
  return {
    role: () => call<string>('role'),
    put: (key: string, v: string) => call<number>('put', key, v),
    linearizableGet: (key: string) => call<string | undefined>('linearizableGet', key),
    async kill9() {
      child.kill('SIGKILL');
      return exited;
    },
  };
}

test('an embedded leader with two kvs run followers: writes both ways, then kill -9 of its program and the cluster goes on', async (t) => {
  const objectStore = await localObjectStore(t, 'cluster/');
  const member = await startMember(t, {
    dataDir: await tempDir(t, 'kvs-embed-leader'),
    objectStore: location(objectStore),
    nodeId: 'e1',
    peerListen: `127.0.0.1:${await reservePort(t)}`,
  });
  // First in the store, it takes the lock.
  await pollUntil('the embedded node to lead', async () => ((await member.role()) === 'leader' ? true : undefined));
  const nodes: { id: string; kvs: KvsNode; client: Etcd3 }[] = [];
  for (const id of ['n2', 'n3']) {
    const kvs = await startKvs(t, { objectStore, args: ['--node-id', id, '--peer-listen', `127.0.0.1:${await reservePort(t)}`, ...FAST_FAILOVER] });
    const client = new Etcd3({ hosts: `http://${kvs.endpoint}`, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING });
    onCleanup(t, () => client.close());
    nodes.push({ id, kvs, client });
  }
  const [n2, n3] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
  assert.equal(await member.role(), 'leader');

  // Writes on the followers are forwarded to the embedded leader, and read there.
  await put(n2.kvs.endpoint, 'from-n2', 'a');
  assert.equal(await member.linearizableGet('from-n2'), 'a');
  // The leader's own writes reach the followers.
  const acked: string[] = [];
  for (let i = 0; i < 20; i++) {
    await member.put(`e/${i}`, `v${i}`);
    acked.push(`e/${i}`);
  }
  assert.equal(await value(n3.kvs.endpoint, 'e/19'), 'v19');
  const status = await n2.client.maintenance.status();
  const members = await n2.client.cluster.memberList({});
  assert.equal(members.members.find((m) => m.ID === status.leader)?.name, 'e1', 'the followers name the embedded node as leader');

  // The embedding program dies: a kvs run node takes over, with every acknowledged write.
  assert.equal(await member.kill9(), 'SIGKILL');
  const leader = await pollUntil('a kvs run node to lead', async () => {
    for (const n of nodes) {
      const s = await n.client.maintenance.status().catch(() => undefined);
      if (s && s.leader !== '0' && s.leader === s.header.member_id) return n;
    }
    return undefined;
  });
  await put(leader.kvs.endpoint, 'after-e1', 'b');
  for (const n of nodes) {
    assert.equal(await value(n.kvs.endpoint, 'after-e1'), 'b');
    assert.equal(await value(n.kvs.endpoint, 'e/19'), 'v19', `${n.id} has every write the embedded leader acknowledged`);
  }
});
