// mixed: 16 clients, each request a get (50 %) or a put (50 %) of a random preloaded key.
import { DATA_AREA, key, randomIndex } from '../keys.js';
import { PARALLEL, type Workload } from '../workload.js';

export const mixed: Workload = {
  name: 'mixed',
  summary: `50 % get / 50 % put of preloaded keys, ${PARALLEL} clients`,
  clients: PARALLEL,
  preload: true,
  op: ({ kv, opts, value }) => () => {
    const k = key(DATA_AREA, randomIndex(opts.preloadKeys));
    return Math.random() < 0.5 ? kv.range(k) : kv.put(k, value);
  },
  go: 'mixed',
  fsyncs: true,
};
