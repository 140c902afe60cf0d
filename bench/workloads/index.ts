// Every workload, in the order they run. Adding one: a module in this folder, a line here.
import type { Workload } from '../workload.js';
import { seqPut, parPut, seqPutStoreLocal, parPutStoreLocal, seqPutStoreRgw, parPutStoreRgw } from './put.js';
import { seqGet, parGet } from './get.js';
import { mixed } from './mixed.js';
import { range, rangeHistory } from './range.js';
import { size, size10x, sizeJson } from './size.js';
import { snapshot } from './snapshot.js';
import { watch, watchFanout } from './watch.js';
import { parGetAuth, parPutAuth } from './auth.js';
import { jsonParGet, jsonParPut, jsonSeqGet, jsonSeqPut } from './json.js';
import { embedParPut, embedSeqGet, embedSeqPut } from './embed.js';
import { clusterFailover, clusterParGet, clusterParPut, clusterParPutViaFollower, clusterSeqGet, clusterSeqPut, clusterSeqPutViaFollower } from './cluster-workloads.js';

/** Against a three-member cluster of each system (bench/cluster-servers.ts). */
export const CLUSTER_WORKLOADS: readonly Workload[] = [
  clusterSeqPut,
  clusterParPut,
  clusterSeqPutViaFollower,
  clusterParPutViaFollower,
  clusterSeqGet,
  clusterParGet,
  clusterFailover,
];

export const WORKLOADS: readonly Workload[] = [seqPut, parPut, parPutAuth, seqPutStoreLocal, parPutStoreLocal, seqGet, parGet, parGetAuth, mixed, range, rangeHistory, watch, watchFanout, jsonSeqPut, jsonParPut, jsonSeqGet, jsonParGet, size, size10x, sizeJson, snapshot, embedSeqPut, embedSeqGet, embedParPut, ...CLUSTER_WORKLOADS];

/** Need Ceph RGW (`--rgw`): not in the default list. */
export const RGW_WORKLOADS: readonly Workload[] = [seqPutStoreRgw, parPutStoreRgw];

export function workload(name: string): Workload {
  const all = [...WORKLOADS, ...RGW_WORKLOADS];
  const w = all.find((x) => x.name === name);
  if (!w) throw new Error(`unknown workload '${name}' (known: ${all.map((x) => x.name).join(', ')})`);
  return w;
}
