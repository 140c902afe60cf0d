// Cluster facts several processes share: a node's member and cluster ids, the role values of
// proto/kvs/peer.proto's Role enum.
import { createHash } from 'node:crypto';

/** kvs.peer.Role, as its messages carry it. */
export const Role = { UNKNOWN: 0, LEADER: 1, FOLLOWER: 2 } as const;
export type RoleValue = (typeof Role)[keyof typeof Role];

/**
 * A node's etcd member id, from its --node-id: stable across restarts and restores (the
 * database itself comes from the leader's checkpoint, with the leader's id in it), and the
 * same on every node that names it. Positive 63-bit, as etcd's ids print.
 */
export function memberIdOf(nodeId: string): string {
  const h = createHash('sha256').update(`kvs-member:${nodeId}`).digest();
  return (h.readBigUInt64BE(0) >> 1n).toString();
}

/** The cluster id every node of one bucket and prefix shows (etcd's is fixed at bootstrap). */
export function clusterIdOf(bucket: string, prefix: string): string {
  const h = createHash('sha256').update(`kvs-cluster:${bucket}/${prefix}`).digest();
  return (h.readBigUInt64BE(0) >> 1n).toString();
}
