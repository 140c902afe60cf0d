// The servers a fuzz run attacks, started as real processes by the integration harness: one
// kvs node for the client port (gRPC, or the JSON gateway's HTTP/1.x on the same port); a
// cluster for the peer port, three nodes unless asked (its peer ports are fuzzed, its client
// ports serve the oracle).
import { reservePort, startKvs, type Ctx, type KvsNode } from '../../testkit/harness.js';
import { leaderEpoch, startCluster } from '../../testkit/node-cluster.js';
import type { Case } from './cases.js';
import { clientCase } from './client-cases.js';
import { closeHttpGuard } from './http-guard.js';
import { HTTP_ANSWER_MS, httpCase } from './http-cases.js';
import { peerCase } from './peer-cases.js';
import { CONSOLE_ANSWER_MS, consoleCase } from './console-cases.js';
import type { Rand } from './random.js';

export type TargetKind = 'client' | 'peer' | 'http' | 'console';

/**
 * How long a server has to answer or close a connection once the client is done. A connection
 * node:http2 stopped reading after its own error GOAWAY is closed only when a PING goes
 * unanswered: on the peer port by its keepalive (2 s + 3 s, services/peer/transport.ts), on the
 * client port by the gateway's idle probe (8-12 s, shared/grpc/server.ts). An HTTP/1.x
 * connection must be closed within HTTP_ANSWER_MS of the client half-closing it.
 */
export const CLOSE_DEADLINE_MS: Record<TargetKind, number> = { client: 14_000, peer: 5000, http: HTTP_ANSWER_MS, console: CONSOLE_ANSWER_MS };

export interface FuzzTarget {
  kind: TargetKind;
  /** Where cases are sent. */
  fuzzEndpoints: string[];
  /** Client endpoints of every node, for the oracle (the first writes the data set). */
  clientEndpoints: string[];
  nodes: KvsNode[];
  cases: (rand: Rand) => Case | Promise<Case>;
  /** The peer port's leadership epoch (lock.ts), which real peer calls carry. */
  epoch?: string;
}

/** `clusterSize`: the peer port's cluster (3 by default; 1 is a leader alone, quicker to start). */
export async function startTarget(t: Ctx, kind: TargetKind, clusterSize = 3): Promise<FuzzTarget> {
  if (kind === 'client' || kind === 'http') return clientPortTarget(t, kind, await startKvs(t));
  if (kind === 'console') {
    const port = await reservePort(t);
    return consoleTarget(await startKvs(t, { args: ['--metrics-addr', `127.0.0.1:${port}`] }), `127.0.0.1:${port}`);
  }
  const cluster = await startCluster(t, clusterSize);
  const epoch = await leaderEpoch(cluster);
  return {
    kind,
    fuzzEndpoints: cluster.nodes.map((n) => `127.0.0.1:${n.peerPort}`),
    clientEndpoints: cluster.nodes.map((n) => n.endpoint),
    nodes: cluster.nodes.map((n) => n.kvs),
    cases: (rand) => peerCase(rand, epoch),
    epoch,
  };
}

/** The client port of a running node, fuzzed with gRPC (`client`) or HTTP/1.x (`http`). */
export function clientPortTarget(t: Ctx, kind: 'client' | 'http', node: KvsNode): FuzzTarget {
  if (kind === 'http') t.after(closeHttpGuard);
  return { kind, fuzzEndpoints: [node.endpoint], clientEndpoints: [node.endpoint], nodes: [node], cases: kind === 'http' ? httpCase : clientCase };
}

/** The console on a running node's --metrics-addr (`addr`), fuzzed with HTTP/1.x. */
export function consoleTarget(node: KvsNode, addr: string): FuzzTarget {
  return { kind: 'console', fuzzEndpoints: [addr], clientEndpoints: [node.endpoint], nodes: [node], cases: consoleCase };
}

/** A Ctx outside node:test (the CLI): cleanups run by `close()`, last first. */
export function standaloneCtx(): Ctx & { close(): Promise<void> } {
  const fns: (() => unknown)[] = [];
  return {
    after: ((fn: () => unknown) => void fns.push(fn)) as Ctx['after'],
    async close() {
      while (fns.length) {
        try {
          await fns.pop()!();
        } catch {
          // best effort: the rest still runs
        }
      }
    },
  };
}
