// A kvs cluster for integration tests: N real `kvs run` nodes in cluster mode on loopback
// (free client and peer ports, one shared object store), with helpers to find the leader.
// The failure-detection knobs are set short (real flags, documented in docs/cluster.md) so
// that failovers take seconds, not the defaults' ten.
import { Etcd3 } from 'etcd3';
import { openObjectStore } from '../shared/objectstore/index.js';
import { LEADER_LOCK } from '../shared/objectstore/layout.js';
import { TEST_CALL_OPTIONS, TEST_FAULT_HANDLING, localObjectStore, pollUntil, reservePort, startKvs, type Ctx, type KvsNode, type ObjectStoreSpec, onCleanup } from './harness.js';
import { TcpProxy } from './proxy.js';

/** Fast failure detection for tests: a takeover after about 3 x 300 ms + 1.5 s. */
export const FAST_FAILOVER = ['--follower-retry-interval', '300ms', '--follower-max-retries', '3', '--leader-liveness-ttl', '1500ms'];

export interface ClusterNode {
  readonly id: string;
  readonly peerPort: number;
  /** The node's process (stop, kill9, restart, output, ctl). */
  readonly kvs: KvsNode;
  /** '127.0.0.1:PORT' of its client port. */
  readonly endpoint: string;
  /** A client of this node alone. */
  readonly client: Etcd3;
  /** With `peerProxies`: the proxy the node advertises as its peer address (testkit/proxy.ts). */
  readonly peerProxy?: TcpProxy;
}

export interface ClusterOptions {
  objectStore?: ObjectStoreSpec;
  /** Instead of `objectStore`: the nodes' object-store flags and environment (an S3 server). */
  store?: { args: string[]; env: Record<string, string> };
  /** Added to every node's flags (after FAST_FAILOVER, which they may override). */
  args?: string[];
  /** Node ids (default n1..nN). */
  ids?: string[];
  /** Flags for one node, after the common ones (e.g. its own --metrics-addr). */
  nodeArgs?: (id: string) => Promise<string[]>;
  /** A node's data directory (the caller owns it), instead of a fresh temp dir; undefined: a temp dir. */
  dataDir?: (id: string) => string | undefined;
  /** Environment for one node (e.g. a fake clock or an object-store failpoint for it alone). */
  nodeEnv?: (id: string) => Record<string, string>;
  /**
   * Put a TCP proxy in front of every node's peer port and have the node advertise it, so a
   * test can cut a leader off from its followers (all of them, or one: `setFor(nodeId, ...)`).
   */
  peerProxies?: boolean;
}

export interface TestCluster {
  nodes: ClusterNode[];
  /** The local-directory store, unless the nodes were given an S3 server's (`store`). */
  objectStore: ObjectStoreSpec | undefined;
  /** Starts one more node with the cluster's flags (and `args` after them). */
  add(id: string, args?: string[]): Promise<ClusterNode>;
}

/** Starts `count` nodes one after another (the first becomes leader). */
export async function startCluster(t: Ctx, count: number, opts: ClusterOptions = {}): Promise<TestCluster> {
  const objectStore = opts.store ? undefined : (opts.objectStore ?? (await localObjectStore(t, 'cluster/')));
  const nodes: ClusterNode[] = [];
  // Supervisor pid -> node id: how a proxy tells which node dialed (testkit/owner.ts).
  const sources = (): ReadonlyMap<number, string> => new Map(nodes.map((n) => [n.kvs.pid, n.id]));
  const add = async (id: string, args: string[] = []): Promise<ClusterNode> => {
    let peerProxy: TcpProxy | undefined;
    let peerPort = 0;
    if (opts.peerProxies) {
      // The proxy listens on an ephemeral port, never the node's own, reserved below.
      peerProxy = new TcpProxy({ name: `${id}-peer`, target: () => peerPort, sources });
      await peerProxy.start();
      onCleanup(t, () => peerProxy!.close());
    }
    // A restarted node listens on it again: reserved for the test, as its client port.
    peerPort = await reservePort(t);
    const kvs = await startKvs(t, {
      objectStore,
      dataDir: opts.dataDir?.(id),
      env: { ...opts.store?.env, ...opts.nodeEnv?.(id) },
      args: [
        ...(opts.store?.args ?? []), '--node-id', id, '--peer-listen', `127.0.0.1:${peerPort}`,
        ...(peerProxy ? ['--advertise-peer', peerProxy.address] : []),
        ...FAST_FAILOVER, ...(opts.args ?? []), ...((await opts.nodeArgs?.(id)) ?? []), ...args,
      ],
    });
    const client = new Etcd3({ hosts: `http://${kvs.endpoint}`, defaultCallOptions: TEST_CALL_OPTIONS, faultHandling: TEST_FAULT_HANDLING });
    onCleanup(t, () => client.close());
    return { id, peerPort, kvs, endpoint: kvs.endpoint, client, peerProxy };
  };
  const ids = opts.ids ?? Array.from({ length: count }, (_, i) => `n${i + 1}`);
  for (const id of ids) nodes.push(await add(id));
  const cluster = { nodes, objectStore, add };
  await waitForLeader(nodes);
  return cluster;
}

/** Each node's view: is it the leader (etcd's Status: leader == its own member id)? */
async function leaderOf(node: ClusterNode): Promise<boolean | undefined> {
  try {
    const s = await node.client.maintenance.status();
    return s.leader !== '0' && s.leader === s.header.member_id;
  } catch {
    return undefined;
  }
}

/**
 * Waits until exactly one of `nodes` says it leads and every other one names it as leader,
 * and returns it.
 */
export async function waitForLeader(nodes: ClusterNode[], deadlineMs = 60_000): Promise<ClusterNode> {
  return pollUntil('one leader that every node names', async () => {
    const statuses = await Promise.all(nodes.map((n) => n.client.maintenance.status().catch(() => undefined)));
    if (statuses.some((s) => !s || s.leader === '0')) return undefined;
    const leaders = new Set(statuses.map((s) => s!.leader));
    if (leaders.size !== 1) return undefined;
    const id = [...leaders][0];
    return nodes.find((_, i) => statuses[i]!.header.member_id === id);
  }, deadlineMs);
}

export { leaderOf };

/** The epoch of the leadership in the cluster's lock (services/peer/lock.ts): what peer calls carry. */
export async function leaderEpoch(cluster: TestCluster): Promise<string> {
  const store = await openObjectStore(cluster.objectStore!);
  try {
    const got = await store.get(LEADER_LOCK);
    return (JSON.parse(got!.body.toString('utf8')) as { epoch?: string }).epoch ?? '';
  } finally {
    store.close();
  }
}
