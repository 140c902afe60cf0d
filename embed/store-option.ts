// The `objectStore` option's two forms (and those of ancestorStore, branchPoint.sourceStore and
// fork()'s source), opened as kvs opens a store: a location like the CLI's flags (bucket, prefix,
// endpoint, region, credentials), or an object implementing kvs's ObjectStore interface
// (shared/objectstore/store.ts) that the program keeps owning: it gets the encryption layer
// (with encryptionKey) or the plaintext guard like any store kvs opens, and is not closed.
import { DEFAULT_S3_ENDPOINT } from '../shared/config.js';
import type { Logger } from '../shared/log.js';
import { bodyLayer, normalizePrefix, openObjectStore } from '../shared/objectstore/index.js';
import type { ObjectStore } from '../shared/objectstore/store.js';
import type { ObjectStoreLocation, ObjectStoreOption } from './options.js';

/** Whether `o` is a location (bucket, prefix, ...) rather than an ObjectStore object. */
export function isLocation(o: ObjectStoreOption): o is ObjectStoreLocation {
  return typeof (o as ObjectStore).get !== 'function';
}

/** The name a store goes by in the local manifest and in a branch's manifests: its prefix, or an object's location. */
export function prefixOf(o: ObjectStoreOption): string {
  return isLocation(o) ? normalizePrefix(o.prefix) : o.location;
}

/** Named in the messages of an encrypted prefix opened without its key (and the other way round). */
const KEY_OPTION = 'the encryptionKey option';

/** Opens a store option: a location as `kvs run` opens its flags, an object wrapped (not owned). */
export async function openStore(o: ObjectStoreOption, encryptionKey: Uint8Array | undefined, log?: Logger, prefix?: string): Promise<ObjectStore> {
  const key = encryptionKey ? Buffer.from(encryptionKey) : undefined;
  if (!isLocation(o)) return bodyLayer(o, key, { borrowed: true, keyOption: KEY_OPTION });
  if (typeof o.bucket !== 'string' || o.bucket === '') {
    throw new TypeError('kvs: an object-store location needs bucket (and optionally prefix, endpoint, credentials), or pass an ObjectStore object');
  }
  return openObjectStore({
    endpoint: o.endpoint ?? DEFAULT_S3_ENDPOINT,
    bucket: o.bucket,
    prefix: prefix ?? o.prefix ?? '',
    credentials: o.credentials,
    region: o.region,
    encryptionKey: key,
    keyOption: KEY_OPTION,
    log,
    // The archiver's uploads are awaited one at a time: small puts to a local directory skip
    // the thread pool, as in the archiver process.
    syncSmallPuts: true,
  });
}
