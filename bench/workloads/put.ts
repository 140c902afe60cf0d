// seq-put / par-put: Put of a random key (kvs-bench/put/…, key space = preload size) with a
// 256-byte value, by 1 client or by 16.
import { key, randomIndex } from '../keys.js';
import { PARALLEL, type Workload } from '../workload.js';

function put(name: string, clients: number): Workload {
  return {
    name,
    summary: `Put, random key of ${clients === 1 ? '1 client' : `${clients} clients`}`,
    clients,
    preload: false,
    op: ({ kv, opts, value }) => () => kv.put(key('put', randomIndex(opts.preloadKeys)), value),
  };
}

export const seqPut = put('seq-put', 1);
export const parPut = put('par-put', PARALLEL);
