// seq-get / par-get: Range of one random preloaded key (linearizable, as etcd's default), by
// 1 client or by 16.
import { DATA_AREA, key, randomIndex } from '../keys.js';
import { PARALLEL, checkFirst, expectKvs, type Workload } from '../workload.js';

function get(name: string, clients: number): Workload {
  return {
    name,
    summary: `Range of one preloaded key, ${clients === 1 ? '1 client' : `${clients} clients`}`,
    clients,
    preload: true,
    op: ({ kv, opts }) =>
      checkFirst(() => kv.range(key(DATA_AREA, randomIndex(opts.preloadKeys))), (res) => expectKvs(res, 1)),
    go: 'get',
  };
}

export const seqGet = get('seq-get', 1);
export const parGet = get('par-get', PARALLEL);
