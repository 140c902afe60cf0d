// The JSON gateway's workloads (etcd's grpc-gateway on the client port, issue 37): each client
// its own HTTP/1.1 keep-alive connection (bench/json-client.ts), by 1 client or by 16.
//   json-seq-put, json-par-put: POST /v3/kv/put {"key", "value"} of a random key, as seq-put
//   json-seq-get, json-par-get: POST /v3/kv/range {"key"} of one random preloaded key, as
//                               seq-get (linearizable, the default)
// Keys and values travel in base64, as the gateway's JSON mapping has them. Every answer must be
// a 200 that parses as JSON and holds what the request asks for (a put's header with its
// revision; the one key-value read), or the request counts as an error.
import { JsonClient } from '../json-client.js';
import { DATA_AREA, key, randomIndex } from '../keys.js';
import { PARALLEL, baselineMetrics, type Op, type OpContext, type Workload } from '../workload.js';

type Json = Record<string, any>;

/** An op on its own JSON connection to the client's endpoint, closed after the timed phase. */
function jsonOp(ctx: OpContext, one: (c: JsonClient) => Promise<Buffer>): Op {
  const c = new JsonClient(ctx.kv.endpoint);
  return Object.assign(() => one(c), { close: () => c.close() });
}

/** A workload of `clients` JSON clients doing `what`, compared with the gRPC workload `baseline`. */
function jsonWorkload(name: string, clients: number, baseline: string, what: string, w: Pick<Workload, 'preload' | 'op' | 'fsyncs'>): Workload {
  return {
    name,
    summary: `JSON gateway: ${what}, ${clients === 1 ? '1 client' : `${clients} clients`} (HTTP/1.1 keep-alive)`,
    clients,
    ...w,
    baseline,
    metrics: baselineMetrics(baseline),
  };
}

function put(name: string, clients: number, baseline: string): Workload {
  return jsonWorkload(name, clients, baseline, 'POST /v3/kv/put of a random key', {
    preload: false,
    op: (ctx) => {
      const value = ctx.value.toString('base64');
      return jsonOp(ctx, async (c) => {
        const k = key('put', randomIndex(ctx.opts.preloadKeys)).toString('base64');
        const { raw, json } = await c.post('/v3/kv/put', `{"key":"${k}","value":"${value}"}`);
        if (typeof (json as Json)?.header?.revision !== 'string') throw new Error(`put: no header.revision in ${raw.toString().slice(0, 200)}`);
        return raw;
      });
    },
    fsyncs: true,
  });
}

function get(name: string, clients: number, baseline: string): Workload {
  return jsonWorkload(name, clients, baseline, 'POST /v3/kv/range of one preloaded key', {
    preload: true,
    op: (ctx) =>
      jsonOp(ctx, async (c) => {
        const k = key(DATA_AREA, randomIndex(ctx.opts.preloadKeys)).toString('base64');
        const { raw, json } = await c.post('/v3/kv/range', `{"key":"${k}"}`);
        const kvs = (json as Json)?.kvs;
        if (!Array.isArray(kvs) || kvs.length !== 1 || kvs[0]?.key !== k) throw new Error(`range: expected the one key-value asked for, got ${raw.toString().slice(0, 200)}`);
        return raw;
      }),
  });
}

export const jsonSeqPut = put('json-seq-put', 1, 'seq-put');
export const jsonParPut = put('json-par-put', PARALLEL, 'par-put');
export const jsonSeqGet = get('json-seq-get', 1, 'seq-get');
export const jsonParGet = get('json-par-get', PARALLEL, 'par-get');
