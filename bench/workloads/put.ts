// seq-put / par-put: Put of a random key (kvs-bench/put/…, key space = preload size) with a
// 256-byte value, by 1 client or by 16. The -store-local / -store-rgw variants run kvs with
// --wal-sync-upload on a local-directory object store or on Ceph RGW.
import { key, randomIndex } from '../keys.js';
import { PARALLEL, type ObjectStoreKind, type Workload } from '../workload.js';

const STORES: Record<ObjectStoreKind, string> = {
  local: 'kvs uploads each batch to a local-directory object store before answering',
  rgw: 'kvs uploads each batch to Ceph RGW (S3) before answering',
};

function put(name: string, clients: number, objectStore?: ObjectStoreKind): Workload {
  return {
    name,
    summary: `Put, random key of ${clients === 1 ? '1 client' : `${clients} clients`}` + (objectStore ? `; ${STORES[objectStore]}` : ''),
    clients,
    preload: false,
    op: ({ kv, opts, value }) => () => kv.put(key('put', randomIndex(opts.preloadKeys)), value),
    go: 'put',
    fsyncs: true,
    ...(objectStore ? { objectStore } : {}),
  };
}

export const seqPut = put('seq-put', 1);
export const parPut = put('par-put', PARALLEL);
export const seqPutStoreLocal = put('seq-put-store-local', 1, 'local');
export const parPutStoreLocal = put('par-put-store-local', PARALLEL, 'local');
export const seqPutStoreRgw = put('seq-put-store-rgw', 1, 'rgw');
export const parPutStoreRgw = put('par-put-store-rgw', PARALLEL, 'rgw');
