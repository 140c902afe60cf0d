// Every workload, in the order they run. Adding one: a module in this folder, a line here.
import type { Workload } from '../workload.js';
import { seqPut, parPut } from './put.js';
import { seqGet, parGet } from './get.js';
import { mixed } from './mixed.js';
import { range } from './range.js';
import { size } from './size.js';
import { watch, watchFanout } from './watch.js';

export const WORKLOADS: readonly Workload[] = [seqPut, parPut, seqGet, parGet, mixed, range, watch, watchFanout, size];

export function workload(name: string): Workload {
  const w = WORKLOADS.find((x) => x.name === name);
  if (!w) throw new Error(`unknown workload '${name}' (known: ${WORKLOADS.map((x) => x.name).join(', ')})`);
  return w;
}
