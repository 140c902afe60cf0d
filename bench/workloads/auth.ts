// par-get-auth / par-put-auth: par-get and par-put with auth enabled on the server (kvs and
// etcd alike; bench/auth.ts): each client logs in as `bench` (readwrite on kvs-bench/) before
// the timed phase and sends its token in the `token` metadata of every request. The op is the
// baseline's own; KvClient adds the token. When the baseline ran too, each system's row shows
// its ops/s and server CPU per op relative to the baseline's (main.ts fills them in).
import { baselineMetrics, type Workload } from '../workload.js';
import { parPut } from './put.js';
import { parGet } from './get.js';

function withAuth(base: Workload): Workload {
  const b = base.name;
  return {
    ...base,
    name: `${b}-auth`,
    summary: `${base.summary}; auth enabled, a user's token on every request`,
    auth: { baseline: b },
    metrics: baselineMetrics(b),
  };
}

export const parGetAuth = withAuth(parGet);
export const parPutAuth = withAuth(parPut);
