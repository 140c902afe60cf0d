// etcdserverpb.Maintenance for a single node, answering as etcd 3.4 does
// (etcdserver/api/v3rpc/maintenance.go), and etcdserverpb.Cluster (MemberList). Membership is
// not managed through this API: nodes join by sharing the object store.
import * as grpc from '@grpc/grpc-js';
import type { ServerCall, UnaryCallback } from '../../shared/grpc/server.js';
import { service, num } from '../../shared/proto/index.js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { META, readMeta } from '../../shared/mvcc/schema.js';
import { dbSizes } from '../../shared/mvcc/tables.js';
import type { HashWorker } from './hash-worker.js';
import type { Logger } from '../../shared/log.js';
import type { NodeInfo } from './node-info.js';
import { toServiceError } from './service-error.js';
import { streamSnapshot } from './snapshot.js';
import { VERSION } from '../../shared/version.js';

type Handler = (call: ServerCall<any, unknown>, cb: UnaryCallback<unknown>) => void;

const AlarmAction = { GET: 0, ACTIVATE: 1, DEACTIVATE: 2 } as const;

export function maintenanceService(db: MvccDb, dataDir: string, node: NodeInfo, log: Logger, hashes: HashWorker) {
  const def = service('etcdserverpb.Maintenance');
  /** Runs `fn` in a fresh read snapshot; its errors become etcd's gRPC errors. */
  const read = (cb: UnaryCallback<unknown>, fn: () => unknown) => {
    try {
      db.env.resetReadTxn();
      cb(null, fn());
    } catch (err) {
      cb(toServiceError(err));
    }
  };
  const impl: Record<string, Handler | ((call: any) => void)> = {
    Status(_call, cb) {
      read(cb, () => {
        const applied = readMeta(db, META.appliedIndex);
        return {
          header: node.header(readMeta(db, META.revision)),
          version: VERSION.etcdCompat,
          ...dbSizes(db),
          // A single node is always its own leader; a cluster node names its leader, or has none
          // during an election (as etcd: leader 0 and the error listed).
          leader: node.leaderId,
          // The WAL index plays raft's: every applied write has one, and there is no lag.
          raftIndex: applied,
          raftTerm: node.raftTerm,
          raftAppliedIndex: applied,
          errors: node.leaderId === '0' ? ['etcdserver: no leader'] : [],
        };
      });
    },
    Alarm(call, cb) {
      // kvs raises no alarms (no space quota: LMDB grows with the disk). As etcd, listing or
      // disarming when there is none answers an empty response without a header.
      if (call.request.action === AlarmAction.ACTIVATE) {
        return cb({
          code: grpc.status.FAILED_PRECONDITION,
          details: 'kvs: alarms cannot be activated: kvs has no space quota and raises no alarms; nothing was changed',
        });
      }
      cb(null, {});
    },
    Defragment(_call, cb) {
      // A no-op (docs/architecture.md#maintenance-servicesgatewaymaintenancets): LMDB reuses
      // free pages itself, and shrinking the file would mean swapping it under two processes
      // that map it.
      log.info('defragment requested: nothing to do (LMDB reuses free pages)');
      cb(null, {});
    },
    Hash(_call, cb) {
      hashes.hash().then((r) => cb(null, { header: node.header(r.revision), hash: r.hash }), (err) => cb(toServiceError(err)));
    },
    HashKV(call, cb) {
      hashes.hashKV(num(call.request.revision)).then(
        (r) => cb(null, { header: node.header(r.revision), hash: r.hash, compactRevision: r.compactRevision }),
        (err) => cb(toServiceError(err)),
      );
    },
    MoveLeader(call, cb) {
      // etcd on one member: moving to itself succeeds at once (no header); any other target is
      // not a member.
      const target = call.request.targetID;
      if (target != null && target.toString() === node.memberId) return cb(null, {});
      cb({ code: grpc.status.FAILED_PRECONDITION, details: 'etcdserver: bad leader transferee' });
    },
    Snapshot(call: ServerCall<unknown, any>) {
      void streamSnapshot(dataDir, call, log);
    },
  };
  return { def, impl };
}

export function clusterService(db: MvccDb, node: NodeInfo) {
  const def = service('etcdserverpb.Cluster');
  const managed: Handler = (_call, cb) =>
    cb({
      code: grpc.status.FAILED_PRECONDITION,
      details: 'kvs: membership is not changed through this API: a node joins by starting with the same object-store bucket and prefix, and leaves by stopping',
    });
  const impl: Record<string, Handler> = {
    MemberList(_call, cb) {
      cb(null, {
        // As etcd's ClusterServer.header(): cluster id, member id and raft term, no revision.
        header: { clusterId: node.clusterId, memberId: node.memberId, raftTerm: node.raftTerm },
        members: node.members(),
      });
    },
    MemberAdd: managed,
    MemberRemove: managed,
    MemberUpdate: managed,
    MemberPromote: managed,
  };
  return { def, impl };
}
