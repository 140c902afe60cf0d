// etcdserverpb.Maintenance (Status, Alarm) and etcdserverpb.Cluster (MemberList) for a single
// node. Membership is not managed through this API: nodes join by sharing the object store.
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { service } from '../../shared/proto/index.js';
import type { MvccDb } from '../../shared/mvcc/schema.js';
import { META, readMeta, dbPath } from '../../shared/mvcc/schema.js';
import type { NodeInfo } from './node-info.js';
import { VERSION } from '../../shared/version.js';

type Handler = (call: grpc.ServerUnaryCall<any, unknown>, cb: grpc.sendUnaryData<unknown>) => void;

export function maintenanceService(db: MvccDb, dataDir: string, node: NodeInfo) {
  const def = service('etcdserverpb.Maintenance');
  const impl: Record<string, Handler> = {
    Status(_call, cb) {
      db.env.resetReadTxn();
      const revision = readMeta(db, META.revision);
      const applied = readMeta(db, META.appliedIndex);
      let dbSize = 0;
      try {
        dbSize = fs.statSync(path.join(dbPath(dataDir), 'data.mdb')).size;
      } catch {}
      const stats = db.env.getStats() as { pageSize?: number; lastPageNumber?: number; freelistEntries?: number };
      const inUse = stats.pageSize && stats.lastPageNumber ? stats.pageSize * (stats.lastPageNumber + 1) : dbSize;
      cb(null, {
        header: node.header(revision),
        version: VERSION.etcdCompat,
        dbSize,
        leader: node.memberId,
        raftIndex: applied,
        raftTerm: node.raftTerm,
        raftAppliedIndex: applied,
        errors: [],
        dbSizeInUse: Math.min(inUse, dbSize || inUse),
        isLearner: false,
      });
    },
    Alarm(_call, cb) {
      // kvs raises no alarms (no quota: LMDB grows with the disk); list and disarm answer empty.
      db.env.resetReadTxn();
      cb(null, { header: node.header(readMeta(db, META.revision)), alarms: [] });
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
        members: [{ ID: node.memberId, name: node.name, peerURLs: [], clientURLs: node.clientUrls, isLearner: false }],
      });
    },
    MemberAdd: managed,
    MemberRemove: managed,
    MemberUpdate: managed,
    MemberPromote: managed,
  };
  return { def, impl };
}
