// The durability scenarios (archiver-scenarios.ts) on S3: a real Ceph RGW, started once for
// this file; "store down" stops radosgw itself.
import { openObjectStore } from '../shared/objectstore/index.js';
import { fileScope, onCleanup } from '../testkit/harness.js';
import { startS3Server } from '../testkit/s3-server.js';
import { diskLossScenario, storeDownScenario, type Backend } from './archiver-scenarios.js';

const s3 = await startS3Server(fileScope);

let prefixes = 0;
const rgw: Backend = {
  name: 'S3 (Ceph RGW)',
  async open() {
    const bucket = await s3.createBucket();
    const own = `node${++prefixes}/`;
    return {
      nodeOptions: (prefix = own) => ({ args: s3.kvsArgs(bucket, prefix), env: s3.env }),
      async store(t, prefix = own) {
        const store = await openObjectStore(s3.storeOptions(bucket, prefix));
        onCleanup(t, () => store.close());
        return store;
      },
      down: () => s3.stopGateway(),
      up: () => s3.startGateway(),
    };
  },
};

diskLossScenario(rgw);
storeDownScenario(rgw);
