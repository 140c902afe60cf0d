// The system under test: 1 or 3 real `kvs run` nodes (testkit/harness.ts's startKvs) on one
// object store (a local directory, or Ceph RGW started like the integration tests do), with a
// proxy (proxy.ts) in front of every port the harness wants to cut:
//   - each node's peer port: the node listens on --peer-listen and advertises its proxy
//     (--advertise-peer), so every follower's stream and forwarded write to a leader goes
//     through the leader's proxy, which knows which node dialed (owner.ts);
//   - each node's client port: the workload's clients dial the proxy;
//   - RGW: every node's --s3-endpoint is the proxy. The local-directory store has no socket;
//     each node gets its own failpoint file instead (KVS_FAILPOINT_OBJECTSTORE,
//     shared/objectstore/failpoint.ts), so an outage can hit one node or all of them.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { localObjectStore, objectStoreArgs, reservePort, startKvs, status, tempDir, type Ctx, type KvsNode } from '../testkit/harness.js';
import { FAST_FAILOVER } from '../testkit/node-cluster.js';
import { startS3Server } from '../testkit/s3-server.js';
import { KvClient } from '../testkit/kv-client.js';
import { FAILPOINT_ENV } from '../shared/objectstore/failpoint.js';
import { TcpProxy, type ProxyMode } from '../testkit/proxy.js';

export type StoreKind = 'local' | 's3';

export interface ChaosNode {
  readonly id: string;
  readonly kvs: KvsNode;
  /** In front of the node's client port; the workload dials `client.address`. */
  readonly client: TcpProxy;
  /** In front of its peer port (cluster mode only). */
  readonly peer?: TcpProxy;
  /** Its local-store failpoint file (local store only). */
  readonly failpoint?: string;
  /** A direct connection (not through the proxy) for the harness's own probes. */
  readonly direct: KvClient;
}

export interface ChaosSystem {
  readonly nodes: readonly ChaosNode[];
  readonly store: StoreKind;
  /** The proxy in front of RGW (s3 store only). */
  readonly storeProxy?: TcpProxy;
  /** Cluster mode: the liveness TTL the nodes run with, ms. */
  readonly ttlMs: number;
  /** Object store outage for `node` (or every node): the proxy or the failpoint file. */
  storeFault(mode: ProxyMode, node?: ChaosNode): Promise<void>;
  /** The node every node names as leader (cluster), or the only node; undefined if none agreed within `ms`. */
  leader(ms?: number): Promise<ChaosNode | undefined>;
  /** pid of one component of a node (`kvs ctl status --json`). */
  componentPid(node: ChaosNode, name: string): Promise<{ pid: number; state: string }>;
  /** Every proxy passes and every failpoint lets through. */
  healAll(): Promise<void>;
}

const TTL_MS = 1500; // FAST_FAILOVER's --leader-liveness-ttl

export async function startSystem(t: Ctx, opts: { nodes: number; store: StoreKind; logLevel?: string; writePipeline?: string }): Promise<ChaosSystem> {
  const dir = await tempDir(t, 'kvs-chaos-');
  const cluster = opts.nodes > 1;
  const nodes: ChaosNode[] = [];
  // Supervisor pid → node id, for the proxies that tell sources apart.
  const sources = (): ReadonlyMap<number, string> => new Map(nodes.map((n) => [n.kvs.pid, n.id]));

  let storeArgs: string[];
  let storeEnv: Record<string, string> = {};
  let storeProxy: TcpProxy | undefined;
  if (opts.store === 's3') {
    const s3 = await startS3Server(t);
    const bucket = await s3.createBucket({ versioned: false });
    const rgwPort = Number(new URL(s3.endpoint).port);
    storeProxy = new TcpProxy({ name: 'rgw', target: () => rgwPort, sources });
    await storeProxy.start();
    t.after(() => storeProxy!.close());
    storeArgs = s3.kvsArgs(bucket, 'chaos/').map((a) => (a === s3.endpoint ? `http://${storeProxy!.address}` : a));
    storeEnv = s3.env;
  } else {
    storeArgs = objectStoreArgs(await localObjectStore(t, 'chaos/'));
  }

  for (let i = 1; i <= opts.nodes; i++) {
    const id = `n${i}`;
    const failpoint = opts.store === 'local' ? path.join(dir, `${id}.objectstore-fault`) : undefined;
    if (failpoint) await writeFile(failpoint, 'pass\n');
    let peer: TcpProxy | undefined;
    const args = [...storeArgs, '--node-id', id, ...(opts.logLevel ? ['--log-level', opts.logLevel] : [])];
    if (cluster) {
      // The proxy listens on an ephemeral port, never the node's own: reserved (as its client
      // port, in startKvs) because a restarted node listens on it again.
      let peerPort = 0;
      peer = new TcpProxy({ name: `${id}-peer`, target: () => peerPort, sources });
      await peer.start();
      peerPort = await reservePort(t);
      t.after(() => peer!.close());
      args.push('--peer-listen', `127.0.0.1:${peerPort}`, '--advertise-peer', peer.address, ...FAST_FAILOVER);
      if (opts.writePipeline) args.push('--write-pipeline', opts.writePipeline);
    }
    const kvs = await startKvs(t, { args, env: { ...storeEnv, ...(failpoint ? { [FAILPOINT_ENV]: failpoint } : {}) } });
    const client = new TcpProxy({ name: `${id}-client`, target: () => kvs.port });
    await client.start();
    t.after(() => client.close());
    const direct = new KvClient(kvs.endpoint);
    t.after(() => direct.close());
    nodes.push({ id, kvs, client, peer, failpoint, direct });
  }

  const system: ChaosSystem = {
    nodes,
    store: opts.store,
    storeProxy,
    ttlMs: TTL_MS,
    async storeFault(mode, node) {
      if (storeProxy) {
        if (node) storeProxy.setFor(node.id, mode);
        else storeProxy.set(mode);
        return;
      }
      for (const n of node ? [node] : nodes) await writeFile(n.failpoint!, `${mode}\n`);
    },
    async leader(ms = 60_000) {
      const deadline = Date.now() + ms;
      for (let delay = 25; Date.now() < deadline; delay = Math.min(delay * 2, 250)) {
        const found = await agreedLeader(nodes);
        if (found) return found;
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
      return undefined;
    },
    async componentPid(node, name) {
      const c = (await status(node.kvs)).components.find((x) => x.name === name);
      if (!c) throw new Error(`${node.id} has no component ${name}`);
      return { pid: c.pid, state: c.state };
    },
    async healAll() {
      for (const n of nodes) {
        n.client.heal();
        n.peer?.heal();
      }
      await system.storeFault('pass');
    },
  };
  if (!(await system.leader())) throw new Error('the cluster elected no leader within 60 s');
  return system;
}

/** The node all nodes name as leader (Maintenance.Status over direct connections), if they agree. */
async function agreedLeader(nodes: readonly ChaosNode[]): Promise<ChaosNode | undefined> {
  const statuses = await Promise.all(nodes.map((n) => n.direct.status(2000).catch(() => undefined)));
  if (statuses.some((s) => !s || s.leader === '0')) return undefined;
  const leaders = new Set(statuses.map((s) => s!.leader));
  if (leaders.size !== 1) return undefined;
  const id = [...leaders][0];
  return nodes.find((_, i) => statuses[i]!.memberId === id);
}
