// Cluster facts several processes share: a node's member id, its roles' names.
import { createHash } from 'node:crypto';

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
