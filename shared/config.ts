// Every flag of `kvs run` (and of the components, which take the same flags), with its
// KVS_* environment variable. Precedence: command line, then environment, then default.
import path from 'node:path';
import { parseDuration } from './duration.js';

export interface FlagSpec {
  flag: string;
  env: string;
  description: string;
  default?: string;
  type: 'string' | 'boolean' | 'number';
}

/** The local directory store: the object store that needs no service. */
export const DEFAULT_S3_ENDPOINT = 'file:///var/lib/kvs-objects';

const flag = (flag: string, type: FlagSpec['type'], description: string, def?: string): FlagSpec => ({
  flag,
  env: 'KVS_' + flag.replace(/-/g, '_').toUpperCase(),
  description,
  default: def,
  type,
});

export const RUN_FLAGS: FlagSpec[] = [
  flag('data-dir', 'string', 'Local data directory (embedded database, wal/, run/ sockets)', './kvs-data'),
  flag('listen', 'string', 'Client gRPC listen address, host:port', '127.0.0.1:3379'),
  flag('node-id', 'string', 'Node name (shown by member list)', 'default'),
  flag('log-level', 'string', 'Log verbosity: fatal, error, warn, info, debug, trace', 'info'),
  flag('read-consistency', 'string', 'linearizable or serializable (follower reads; a single node is always current)', 'linearizable'),
  flag('watch-progress-notify-interval', 'string', 'Time between progress notifications to idle watchers that asked for them (etcd\'s --experimental-watch-progress-notify-interval)', '10m'),
  flag('s3-bucket', 'string', 'Object-store bucket; with it, WAL segments and checkpoints go to the object store'),
  flag('s3-prefix', 'string', 'Key prefix inside the bucket (ends with /)', ''),
  flag('s3-endpoint', 'string', 'S3-compatible endpoint URL (for AWS: https://s3.<region>.amazonaws.com), or file:///dir for a local directory as the object store', DEFAULT_S3_ENDPOINT),
  flag('object-store-encryption-key-file', 'string', 'File holding the 32-byte AES-256 key (raw, 64 hex characters, or base64)'),
  flag('object-store-encryption-key-env', 'string', 'Name of an environment variable holding the key (same encodings)'),
  flag('wal-sync-upload', 'boolean', 'Upload each write batch to the object store before acknowledging it', 'true'),
  flag('checkpoint-interval', 'string', 'Time between checkpoints uploaded to the object store (e.g. 15m, 30s)', '15m'),
  flag('branch-prefix', 'string', 'Source prefix of a branch (same bucket); the first boot starts from its checkpoint'),
  flag('branch-checkpoint', 'string', 'Source checkpoint key of a branch (from `kvs branch fork`); used on the first boot only'),
];

export interface Config {
  dataDir: string;
  listen: string;
  nodeId: string;
  logLevel: string;
  readConsistency: 'linearizable' | 'serializable';
  watchProgressNotifyInterval: string;
  s3Bucket?: string;
  s3Prefix: string;
  s3Endpoint?: string;
  objectStoreEncryptionKeyFile?: string;
  objectStoreEncryptionKeyEnv?: string;
  walSyncUpload: boolean;
  checkpointInterval: string;
  branchPrefix?: string;
  branchCheckpoint?: string;
}

function camel(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** Resolves flags parsed by sade (kebab-case keys) against the environment and defaults. */
export function resolveConfig(opts: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const f of RUN_FLAGS) {
    let v: unknown = opts[f.flag];
    if (v === undefined || v === '') v = env[f.env];
    if (v === undefined || v === '') v = f.default;
    if (f.type === 'boolean' && typeof v === 'string') v = v === 'true' || v === '1';
    if (f.type === 'number' && typeof v === 'string') v = Number(v);
    // The parser (mri) makes `--s3-prefix 123` a number and a bare `--s3-prefix` true.
    if (f.type === 'string' && v === true) throw new Error(`--${f.flag} needs a value`);
    if (f.type === 'string' && v !== undefined) v = String(v);
    out[camel(f.flag)] = v;
  }
  const cfg = out as unknown as Config;
  cfg.dataDir = path.resolve(String(cfg.dataDir));
  if (!/^[^:]+:\d+$/.test(cfg.listen) && !/^\[.*\]:\d+$/.test(cfg.listen)) {
    throw new Error(`--listen must be host:port, got "${cfg.listen}"`);
  }
  if (cfg.readConsistency !== 'linearizable' && cfg.readConsistency !== 'serializable') {
    throw new Error(`--read-consistency must be linearizable or serializable, got "${cfg.readConsistency}"`);
  }
  parseDuration(cfg.watchProgressNotifyInterval, 'watch-progress-notify-interval');
  return cfg;
}

/** The command-line form of a config, to start a component with the same flags. */
export function configArgs(cfg: Config): string[] {
  const args: string[] = [];
  for (const f of RUN_FLAGS) {
    const v = (cfg as unknown as Record<string, unknown>)[camel(f.flag)];
    // `--flag=` would parse as true: an empty value is left to the default.
    if (v !== undefined && v !== '') args.push(`--${f.flag}=${String(v)}`);
  }
  return args;
}

/** Where components find each other: unix sockets under <data-dir>/run/. */
export function socketPath(dataDir: string, name: string): string {
  return path.join(dataDir, 'run', `${name}.sock`);
}
