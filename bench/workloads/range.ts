// range: Range of 1,000 consecutive preloaded keys ([k_i, k_i+1000), so neither server has to
// count past the end of the page), 16 clients. Reports MB/s of responses besides ops/s.
// range-history: the same over keys with ten changes each, none compacted (as Kubernetes
// objects updated between compactions are): a tenth of the data set, written ten times.
import { DATA_AREA, key, randomIndex } from '../keys.js';
import { PARALLEL, checkFirst, expectKvs, type Workload } from '../workload.js';

export const RANGE_KEYS = 1000;

export const range: Workload = {
  name: 'range',
  summary: `Range of ${RANGE_KEYS.toLocaleString('en-US')} consecutive preloaded keys, ${PARALLEL} clients`,
  clients: PARALLEL,
  preload: true,
  op: ({ kv, opts }) => {
    const n = Math.min(RANGE_KEYS, opts.preloadKeys);
    return checkFirst(() => {
      const i = randomIndex(opts.preloadKeys - n + 1);
      return kv.range(key(DATA_AREA, i), { rangeEnd: key(DATA_AREA, i + n) });
    }, (res) => expectKvs(res, n));
  },
  go: 'range',
  measure: async (_target, run) => ({ mbPerSec: run.durationS > 0 ? run.bytes / run.durationS / 1e6 : 0 }),
  metrics: [{ key: 'mbPerSec', label: 'MB/s', format: (v) => `${v.toFixed(1)} MB/s`, better: 'higher' }],
};

const RANGE_HISTORY_REVISIONS = 10;

export const rangeHistory: Workload = {
  ...range,
  name: 'range-history',
  summary: `${range.summary}, each key with ${RANGE_HISTORY_REVISIONS} changes (a tenth of the data set, written ${RANGE_HISTORY_REVISIONS} times)`,
  preloadScale: 1 / RANGE_HISTORY_REVISIONS,
  preloadRevisions: RANGE_HISTORY_REVISIONS,
};
