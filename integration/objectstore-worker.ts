// A separate process for the object-store race tests: opens the store named by argv[2] (JSON
// ObjectStoreOptions, the encryption key as hex), waits for a line on stdin so that all
// workers start together, then tries one conditional put per key of argv[3] (JSON: keys,
// body, ifNoneMatch or ifMatch per key) and prints, per key, whether it won.
import { openObjectStore, PreconditionFailedError, type ObjectStoreOptions } from '../shared/objectstore/index.js';

export interface RaceOp {
  keys: string[];
  body: string;
  ifNoneMatch?: '*';
  /** key -> etag */
  ifMatch?: Record<string, string>;
}

const opts = JSON.parse(process.argv[2]!) as ObjectStoreOptions & { encryptionKey?: string };
const op = JSON.parse(process.argv[3]!) as RaceOp;
const store = await openObjectStore({ ...opts, encryptionKey: opts.encryptionKey ? Buffer.from(opts.encryptionKey, 'hex') : undefined });
process.stdout.write('ready\n');
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
const won: Record<string, string | false> = {};
try {
  for (const key of op.keys) {
    try {
      const res = await store.put(key, Buffer.from(op.body), { ifNoneMatch: op.ifNoneMatch, ifMatch: op.ifMatch?.[key] });
      won[key] = res.etag;
    } catch (err) {
      if (!(err instanceof PreconditionFailedError)) throw err;
      won[key] = false;
    }
  }
  process.stdout.write(JSON.stringify(won) + '\n');
} finally {
  store.close();
  process.stdin.destroy();
}
