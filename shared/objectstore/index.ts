// Opening the object store: a local directory for `file://` endpoints, S3 otherwise, wrapped
// in the encryption layer (with a key) or the plaintext guard (without one).
import { fileURLToPath } from 'node:url';
import { DEFAULT_S3_ENDPOINT, type Config } from '../config.js';
import { EncryptedStore, PlainGuardStore, loadEncryptionKey } from './encryption.js';
import { LocalObjectStore } from './local.js';
import { LoggedStore } from './logged.js';
import { FAILPOINT_ENV, FailpointStore } from './failpoint.js';
import type { Logger } from '../log.js';
import type { ObjectStore } from './store.js';

export * from './store.js';

export interface ObjectStoreOptions {
  /** `file:///dir` (a local directory) or an http(s) URL of an S3-compatible service. */
  endpoint: string;
  bucket: string;
  /** Key prefix inside the bucket ('' or ending with `/`). */
  prefix: string;
  /** The 32-byte AES-256 key of the prefix, when its bodies are encrypted. */
  encryptionKey?: Buffer;
  /** S3 only: explicit credentials instead of KVS_S3_* and the SDK's chain (tests, embedding). */
  credentials?: { accessKeyId: string; secretAccessKey: string };
  /** S3 only: the region (embedding); default AWS_REGION, AWS_DEFAULT_REGION, else us-east-1. */
  region?: string;
  /** How the caller gives encryptionKey, named in messages (default: the --object-store-encryption-key-* flags). */
  keyOption?: string;
  /** At debug level, every operation is logged here (logged.ts). */
  log?: Logger;
  /**
   * A local directory only: puts of up to 256 KiB with synchronous file-system calls, for a
   * process whose loop has nothing better to do meanwhile (the archiver; local.ts).
   */
  syncSmallPuts?: boolean;
}

export async function openObjectStore(opts: ObjectStoreOptions): Promise<ObjectStore> {
  if (!opts.bucket) throw new Error('object store: --s3-bucket is required');
  opts = { ...opts, prefix: normalizePrefix(opts.prefix) };
  let raw: ObjectStore;
  const url = parseEndpoint(opts.endpoint);
  if (url.protocol === 'file:') {
    raw = new LocalObjectStore({ root: fileURLToPath(url), bucket: opts.bucket, prefix: opts.prefix, syncSmallPuts: opts.syncSmallPuts });
  } else if (url.protocol === 'http:' || url.protocol === 'https:') {
    const { S3ObjectStore } = await import('./s3.js');
    raw = new S3ObjectStore({ endpoint: opts.endpoint, bucket: opts.bucket, prefix: opts.prefix, credentials: opts.credentials, region: opts.region });
  } else {
    throw new Error(`--s3-endpoint must be a file:// or http(s):// URL, got "${opts.endpoint}"`);
  }
  if (process.env[FAILPOINT_ENV]) raw = new FailpointStore(raw, process.env[FAILPOINT_ENV]);
  if (opts.log?.isLevelEnabled('debug')) raw = new LoggedStore(raw, opts.log);
  return bodyLayer(raw, opts.encryptionKey, { keyOption: opts.keyOption });
}

/**
 * The layer every store kvs uses is wrapped in: encryption with a key, the plaintext guard
 * without. `borrowed`: the raw store is the caller's (an embedding program's), left open on
 * close(). `keyOption`: how the caller gives the key, named in messages (default: the flags).
 */
export function bodyLayer(raw: ObjectStore, encryptionKey: Buffer | undefined, opts: { borrowed?: boolean; keyOption?: string } = {}): ObjectStore {
  const store = encryptionKey ? new EncryptedStore(raw, encryptionKey) : new PlainGuardStore(raw);
  store.borrowed = opts.borrowed === true;
  if (opts.keyOption) store.keyOption = opts.keyOption;
  return store;
}

/** The spec's prefixes end with `/`; `kvs` and `kvs/` name the same prefix. */
export function normalizePrefix(prefix: string | undefined): string {
  if (!prefix) return '';
  return prefix.endsWith('/') ? prefix : prefix + '/';
}

function parseEndpoint(endpoint: string): URL {
  try {
    return new URL(endpoint);
  } catch {
    throw new Error(`--s3-endpoint must be a URL (file:///dir or https://host), got "${endpoint}"`);
  }
}

/** The subset of the flags that names a prefix of the object store (the commands take only these). */
export type ObjectStoreFlags = Pick<Config, 's3Bucket' | 's3Prefix' | 's3Endpoint' | 'objectStoreEncryptionKeyFile' | 'objectStoreEncryptionKeyEnv'>;

/** Options from the flags: reads the encryption key, checks the bucket is given. */
export function objectStoreOptions(cfg: ObjectStoreFlags, env: NodeJS.ProcessEnv = process.env): ObjectStoreOptions {
  if (!cfg.s3Bucket) throw new Error('--s3-bucket is required');
  return {
    endpoint: cfg.s3Endpoint || DEFAULT_S3_ENDPOINT,
    bucket: cfg.s3Bucket,
    prefix: cfg.s3Prefix ?? '',
    encryptionKey: loadEncryptionKey({ keyFile: cfg.objectStoreEncryptionKeyFile, keyEnv: cfg.objectStoreEncryptionKeyEnv }, env),
  };
}
