// Ceph RGW for the `-store-rgw` workloads (`--rgw`): one server for the whole run (the test
// kit's s3-server.ts, as the integration tests start it: monitor, memstore OSD, radosgw on
// loopback), a fresh bucket for each kvs node.
import { existsSync } from 'node:fs';
import { startS3Server, type S3TestServer } from '../testkit/s3-server.js';
import type { KvsObjectStore } from './servers.js';

export interface Rgw {
  store(): Promise<KvsObjectStore>;
  stop(): Promise<void>;
}

export async function startRgw(): Promise<Rgw> {
  for (const bin of ['/usr/bin/radosgw', '/usr/bin/ceph-mon', '/usr/bin/ceph-osd']) {
    if (!existsSync(bin)) throw new Error(`--rgw needs Ceph RGW (${bin} is missing; Debian packages radosgw, ceph-mon, ceph-osd)`);
  }
  const cleanups: (() => unknown)[] = [];
  let s3: S3TestServer;
  try {
    s3 = await startS3Server({ after: (fn) => void cleanups.push(fn as () => unknown) });
  } catch (err) {
    for (const fn of cleanups.reverse()) await fn();
    throw err;
  }
  return {
    async store() {
      const bucket = await s3.createBucket();
      // The bucket goes with the server (memstore): nothing to remove per node.
      return { args: [...s3.kvsArgs(bucket, 'bench/'), '--wal-sync-upload'], env: s3.env, remove: async () => {} };
    },
    async stop() {
      for (const fn of cleanups.reverse()) await fn();
    },
  };
}
