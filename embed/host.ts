// What a Node stands on: the storage engine in this process, and the routes its operations
// take. A single node writes straight into the engine's queue (engine.submit: the same code
// path as `kvs run`'s storage process, without the socket) and reads LMDB; a cluster member
// (embed/cluster.ts) replaces the routes: a follower forwards writes to the leader and waits
// for the leader's revision before a linearizable read.
import type { Engine } from '../services/storage/engine.js';
import type { Logger } from '../shared/log.js';
import type { StreamChannel } from '../shared/grpc/stream-channel.js';
import { Op } from '../shared/storage/ops.js';
import { fromEtcd } from './errors.js';
import type { Role } from './types.js';

export interface Routes {
  /** A write of the storage protocol (`op`, the request message's bytes); resolves with the response's bytes. */
  write(op: number, body: Uint8Array, traceParent?: string): Promise<Buffer>;
  /** A lease keep-alive or time-to-live query (Op.LEASE_KEEPALIVE, Op.LEASE_TIME_TO_LIVE): answered, never written. */
  lease(op: number, body: Uint8Array): Promise<Buffer>;
  /** Resolves once this node holds everything committed when it was called. */
  linearize(): Promise<void>;
  role(): Role;
}

export interface Host {
  readonly engine: Engine;
  readonly log: Logger;
  /** Replaced in part by what attaches to the node (a cluster role). */
  routes: Routes;
  /** A cluster member: a new connection to its peer agent (set by embed/cluster.ts; node.serve()'s gateway follows it). */
  agent?: () => StreamChannel;
}

const done = Promise.resolve();

/** The routes of a node alone: the engine's own queue and lessor. */
export function localRoutes(engine: Engine): Routes {
  return {
    write: (op, body, traceParent) =>
      new Promise((resolve, reject) =>
        engine.submit(op, body, (r) => (r.code === 0 ? resolve(r.body ?? Buffer.alloc(0)) : reject(fromEtcd(r.code, r.message))), 0, traceParent),
      ),
    lease: (op, body) =>
      new Promise((resolve, reject) => {
        if (op !== Op.LEASE_KEEPALIVE && op !== Op.LEASE_TIME_TO_LIVE) throw new Error(`not a lease query: op ${op}`);
        engine.lessor.call(op, body, (r) => (r.code === 0 ? resolve(r.body ?? Buffer.alloc(0)) : reject(fromEtcd(r.code, r.message))));
      }),
    linearize: () => done,
    role: () => (engine.role === 'leader' ? 'leader' : engine.role === 'single' ? 'single' : 'follower'),
  };
}
