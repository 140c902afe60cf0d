// A separate process for the object-store race tests: opens the store named by argv[2]
// (JSON ObjectStoreOptions, the key as hex), waits for a line on stdin so that all workers
// start together, does one conditional put (argv[3], JSON) and prints the outcome as JSON.
import { openObjectStore, PreconditionFailedError, type ObjectStoreOptions } from '../shared/objectstore/index.js';

const opts = JSON.parse(process.argv[2]!) as ObjectStoreOptions & { encryptionKey?: string };
const op = JSON.parse(process.argv[3]!) as { key: string; body: string; ifNoneMatch?: '*'; ifMatch?: string };
const store = await openObjectStore({ ...opts, encryptionKey: opts.encryptionKey ? Buffer.from(opts.encryptionKey, 'hex') : undefined });
process.stdout.write('ready\n');
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
try {
  const res = await store.put(op.key, Buffer.from(op.body), { ifNoneMatch: op.ifNoneMatch, ifMatch: op.ifMatch });
  process.stdout.write(JSON.stringify({ won: true, etag: res.etag }) + '\n');
} catch (err) {
  if (!(err instanceof PreconditionFailedError)) throw err;
  process.stdout.write(JSON.stringify({ won: false }) + '\n');
} finally {
  store.close();
  process.stdin.destroy();
}
