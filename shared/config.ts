// Every flag of `kvs run` (and of the components, which take the same flags), with its
// KVS_* environment variable. Precedence: command line, then environment, then default.
import os from 'node:os';
import path from 'node:path';
import { parseDuration } from './duration.js';
import { clientTlsFiles } from './tls/client-port.js';
import { peerTlsFiles } from './tls/peer-port.js';
import { formatAuthToken, loadJwtKeys, parseAuthToken } from './auth/token-options.js';

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
  flag('log-format', 'string', 'json (one JSON object a line) or pretty (readable lines); default: pretty on a terminal, else json'),
  flag('metrics-addr', 'string', 'host:port of the HTTP observability endpoints (/metrics, /healthz, /readyz) and the operator console (/); off when not given'),
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
  flag('auto-compact-mode', 'string', 'Automatic compaction of history: time or revision; off when not given'),
  flag('auto-compact-retention', 'string', 'time mode: history kept, a duration such as 168h'),
  flag('auto-compact-sample-interval', 'string', 'time mode: how often the revision is sampled (default clamp(retention/7, 1m, 24h))'),
  flag('auto-compact-retain-revisions', 'number', 'revision mode: revisions kept behind the current one'),
  flag('auto-compact-interval', 'string', 'revision mode: how often to compact (default 5m, as etcd)'),
  flag('auth-enabled', 'boolean', 'Enforce the Auth API (needs a root user with the root role); without it, auth enabled on the data is disabled at start', 'false'),
  flag('token-ttl', 'number', 'Lifetime of simple auth tokens in seconds, renewed while in use (etcd\'s --auth-token-ttl)', '300'),
  flag('bcrypt-cost', 'number', 'bcrypt cost of stored password hashes (4-31)', '10'),
  flag('auth-token', 'string', 'Token type, in etcd\'s --auth-token syntax: simple, or jwt,sign-method=RS256|ES256|...,priv-key=FILE[,pub-key=FILE][,ttl=5m] (docs/security.md)', 'simple'),
  flag('client-tls-cert', 'string', 'PEM certificate (chain) of the client port; with --client-tls-key the port speaks TLS only (re-read when the file changes)'),
  flag('client-tls-key', 'string', 'PEM private key of --client-tls-cert'),
  flag('client-tls-ca', 'string', 'PEM CA bundle; clients must present a certificate it signed (mutual TLS)'),
  flag('cpu-affinity', 'string', 'CPUs the supervisor pins every component process to, in taskset syntax (0, 0,1, 0-1); needs util-linux taskset on PATH; off when not given'),
  flag('advertise-client', 'string', 'Client URL other nodes and member list show for this node (default: from --listen)'),
  // Cluster mode (docs/cluster.md): on when --peer-listen is given.
  flag('peer-listen', 'string', 'Peer listen address, host:port; turns on cluster mode (needs --s3-bucket and a unique --node-id)'),
  flag('advertise-peer', 'string', 'Peer address the other nodes dial, host:port (default: --peer-listen unless it is a wildcard address)'),
  flag('follower-max-retries', 'number', 'Consecutive stream failures before a follower checks the leader lock', '5'),
  flag('follower-retry-interval', 'string', 'Time between a follower\'s attempts to reach its leader', '2s'),
  flag('leader-liveness-ttl', 'string', 'How long a follower must see the leader lock unchanged before it takes over (LeaderLivenessTTL)', '6s'),
  flag('leader-watch-interval-sec', 'number', 'Seconds between a leader\'s re-checks of its lock while every follower is connected', '300'),
  flag('peer-buffer-size', 'number', 'Recent WAL entries a leader keeps in memory for followers catching up', '10000'),
  flag('write-pipeline', 'string', 'Write batches a leader keeps in flight waiting for its followers\' ACKs: 1-4, or auto (2 while a connected follower runs on another machine, else 1; docs/cluster.md)', 'auto'),
  flag('peer-tls-ca', 'string', 'PEM CA of peer mutual TLS (with --peer-tls-cert and --peer-tls-key; TLS 1.3 only)'),
  flag('peer-tls-cert', 'string', 'PEM certificate of this node on the peer port (server and client)'),
  flag('peer-tls-key', 'string', 'PEM private key of --peer-tls-cert'),
];

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** Automatic compaction, resolved from the --auto-compact-* flags (durations in ms). */
export type AutoCompact =
  | { mode: 'time'; retentionMs: number; sampleIntervalMs: number }
  | { mode: 'revision'; retainRevisions: number; intervalMs: number };

export interface Config {
  dataDir: string;
  listen: string;
  nodeId: string;
  logLevel: string;
  logFormat: 'json' | 'pretty';
  metricsAddr?: string;
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
  autoCompactMode?: string;
  autoCompactRetention?: string;
  autoCompactSampleInterval?: string;
  autoCompactRetainRevisions?: number;
  autoCompactInterval?: string;
  authEnabled: boolean;
  tokenTtl: number;
  bcryptCost: number;
  authToken: string;
  clientTlsCert?: string;
  clientTlsKey?: string;
  clientTlsCa?: string;
  /** CPU list (taskset -c syntax) the supervisor pins every component to; unset: no pinning. */
  cpuAffinity?: string;
  advertiseClient?: string;
  peerListen?: string;
  advertisePeer?: string;
  followerMaxRetries: number;
  followerRetryInterval: string;
  leaderLivenessTtl: string;
  leaderWatchIntervalSec: number;
  peerBufferSize: number;
  /** --write-pipeline: a number (1-4) or 'auto' (services/storage/engine/leader-pipeline.ts, depth()). */
  writePipeline: WritePipeline;
  peerTlsCa?: string;
  peerTlsCert?: string;
  peerTlsKey?: string;
}

function camel(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** Resolves flags parsed by sade (kebab-case keys) against the environment and defaults. */
export function resolveConfig(opts: Record<string, unknown>, env: NodeJS.ProcessEnv = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const f of RUN_FLAGS) {
    let v: unknown = opts[f.flag];
    // A flag given twice: the last one counts (as etcd's flags).
    if (Array.isArray(v)) v = v[v.length - 1];
    if (v === undefined || v === '') v = env[f.env];
    if (v === undefined || v === '') v = f.default;
    if (f.type === 'boolean' && typeof v === 'string') v = v === 'true' || v === '1';
    if (f.type === 'number' && (typeof v === 'string' || typeof v === 'boolean')) {
      if (v === true || !/^\d+$/.test(String(v).trim())) throw new Error(`--${f.flag} must be a whole number, got "${String(v)}"`);
      v = Number(v);
    }
    // The parser (mri) makes `--s3-prefix 123` a number and a bare `--s3-prefix` true.
    if (f.type === 'string' && v === true) throw new Error(`--${f.flag} needs a value`);
    if (f.type === 'string' && v !== undefined) v = String(v);
    out[camel(f.flag)] = v;
  }
  const cfg = out as unknown as Config;
  cfg.dataDir = path.resolve(String(cfg.dataDir));
  checkHostPort('listen', cfg.listen);
  if (cfg.metricsAddr !== undefined) checkHostPort('metrics-addr', cfg.metricsAddr);
  if (!(LOG_LEVELS as readonly string[]).includes(cfg.logLevel)) {
    throw new Error(`--log-level must be one of ${LOG_LEVELS.join(', ')}, got "${cfg.logLevel}"`);
  }
  // Resolved here, in the supervisor, so that components (whose stdout is the supervisor's)
  // get the same format.
  cfg.logFormat ??= process.stdout.isTTY ? 'pretty' : 'json';
  if (cfg.logFormat !== 'json' && cfg.logFormat !== 'pretty') {
    throw new Error(`--log-format must be json or pretty, got "${cfg.logFormat}"`);
  }
  if (cfg.readConsistency !== 'linearizable' && cfg.readConsistency !== 'serializable') {
    throw new Error(`--read-consistency must be linearizable or serializable, got "${cfg.readConsistency}"`);
  }
  parseDuration(cfg.watchProgressNotifyInterval, 'watch-progress-notify-interval');
  autoCompact(cfg);
  if (cfg.tokenTtl < 1) throw new Error(`--token-ttl must be at least 1 (seconds), got ${cfg.tokenTtl}`);
  if (cfg.bcryptCost < 4 || cfg.bcryptCost > 31) throw new Error(`--bcrypt-cost must be between 4 and 31, got ${cfg.bcryptCost}`);
  const authToken = parseAuthToken(cfg.authToken);
  if (authToken.type === 'jwt') loadJwtKeys(authToken); // fail now, naming the problem, rather than in the gateway
  cfg.authToken = formatAuthToken(authToken);
  const tlsFiles = clientTlsFiles(cfg);
  if (tlsFiles) Object.assign(cfg, { clientTlsCert: tlsFiles.cert, clientTlsKey: tlsFiles.key, clientTlsCa: tlsFiles.ca });
  if (cfg.cpuAffinity !== undefined) cfg.cpuAffinity = formatCpuList(checkCpuList(cfg.cpuAffinity));
  checkCluster(cfg);
  return cfg;
}

/** CPUs of this machine, numbered 0 to cpuCount() - 1. */
export function cpuCount(): number {
  return os.cpus().length || os.availableParallelism();
}

/**
 * Checks a --cpu-affinity list (taskset -c syntax without strides: CPU numbers and ranges such
 * as `0`, `0,1`, `0-3,6`) against the CPUs of this machine (`cpus`, default cpuCount()); throws,
 * naming the bad entry and the valid range. Returns the CPUs, ascending, without repeats.
 */
export function checkCpuList(list: string, cpus = cpuCount()): number[] {
  const valid = `valid CPUs on this machine: ${cpus === 1 ? '0' : `0-${cpus - 1}`}`;
  const out = new Set<number>();
  for (const raw of list.split(',')) {
    const entry = raw.trim();
    const m = /^(\d+)(?:-(\d+))?$/.exec(entry);
    if (!m) throw new Error(`--cpu-affinity: "${entry}" in "${list}" is not a CPU number or a range such as 0-1 (${valid})`);
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    if (to < from) throw new Error(`--cpu-affinity: range "${entry}" ends before it starts (${valid})`);
    if (to >= cpus) throw new Error(`--cpu-affinity: "${entry}" names CPU ${to}, which does not exist (${valid})`);
    for (let c = from; c <= to; c++) out.add(c);
  }
  return [...out].sort((a, b) => a - b);
}

/** CPUs as the kernel lists them (Cpus_allowed_list): ascending, runs as ranges, e.g. `0-2,5`. */
export function formatCpuList(cpus: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < cpus.length; ) {
    let j = i;
    while (j + 1 < cpus.length && cpus[j + 1] === cpus[j]! + 1) j++;
    parts.push(j === i ? String(cpus[i]) : `${cpus[i]}-${cpus[j]}`);
    i = j + 1;
  }
  return parts.join(',');
}

/** Cluster mode: on when --peer-listen is given. */
export function clusterMode(cfg: Pick<Config, 'peerListen'>): boolean {
  return cfg.peerListen !== undefined && cfg.peerListen !== '';
}

const WILDCARD_HOSTS = new Set(['0.0.0.0', '::', '']);

/** How many write batches a cluster leader keeps in flight: a number, or chosen by where its followers run. */
export type WritePipeline = number | 'auto';
export const MAX_WRITE_PIPELINE = 4;

export function parseWritePipeline(v: string): WritePipeline {
  if (v === 'auto') return v;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > MAX_WRITE_PIPELINE) throw new Error(`--write-pipeline must be auto or a whole number from 1 to ${MAX_WRITE_PIPELINE}, got '${v}'`);
  return n;
}

function checkCluster(cfg: Config): void {
  parseDuration(cfg.followerRetryInterval, 'follower-retry-interval');
  parseDuration(cfg.leaderLivenessTtl, 'leader-liveness-ttl');
  if (cfg.followerMaxRetries < 1) throw new Error(`--follower-max-retries must be at least 1, got ${cfg.followerMaxRetries}`);
  if (cfg.leaderWatchIntervalSec < 1) throw new Error(`--leader-watch-interval-sec must be at least 1, got ${cfg.leaderWatchIntervalSec}`);
  if (cfg.peerBufferSize < 1) throw new Error(`--peer-buffer-size must be at least 1, got ${cfg.peerBufferSize}`);
  cfg.writePipeline = parseWritePipeline(String(cfg.writePipeline));
  const peerTls = [cfg.peerTlsCa, cfg.peerTlsCert, cfg.peerTlsKey].filter((v) => v !== undefined && v !== '').length;
  if (peerTls !== 0 && peerTls !== 3) throw new Error('peer TLS needs all three of --peer-tls-ca, --peer-tls-cert and --peer-tls-key');
  // Read and checked now (one line naming the flag and file), as absolute paths for the peer process.
  const peerFiles = peerTlsFiles(cfg);
  if (peerFiles) Object.assign(cfg, { peerTlsCa: peerFiles.ca, peerTlsCert: peerFiles.cert, peerTlsKey: peerFiles.key });
  if (cfg.advertiseClient !== undefined && !/^https?:\/\/[^/]+$/.test(cfg.advertiseClient)) {
    throw new Error(`--advertise-client must be a URL such as http://10.0.0.1:3379, got "${cfg.advertiseClient}"`);
  }
  if (!clusterMode(cfg)) {
    if (cfg.advertisePeer) throw new Error('--advertise-peer needs --peer-listen (cluster mode)');
    return;
  }
  checkHostPort('peer-listen', cfg.peerListen!);
  if (!cfg.s3Bucket) throw new Error('cluster mode (--peer-listen) needs --s3-bucket: the nodes elect their leader through the object store');
  if (cfg.nodeId === 'default') throw new Error('cluster mode (--peer-listen) needs a --node-id unique to this node');
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(cfg.nodeId)) throw new Error(`--node-id must be 1-64 letters, digits, '.', '_' or '-', got "${cfg.nodeId}"`);
  if (!cfg.advertisePeer) {
    const [host] = splitHostPort(cfg.peerListen!)!;
    if (WILDCARD_HOSTS.has(host)) throw new Error(`--peer-listen ${cfg.peerListen} is a wildcard address: give --advertise-peer, the address other nodes dial`);
    cfg.advertisePeer = cfg.peerListen;
  }
  checkHostPort("advertise-peer", cfg.advertisePeer!);
  const [advHost] = splitHostPort(cfg.advertisePeer!)!;
  if (WILDCARD_HOSTS.has(advHost)) throw new Error(`--advertise-peer must be an address other nodes can dial, not ${cfg.advertisePeer}`);
}

/** The client URL a node shows (member list, the leader lock). */
export function clientUrl(cfg: Pick<Config, 'advertiseClient' | 'listen' | 'clientTlsCert'>): string {
  return cfg.advertiseClient ?? `${cfg.clientTlsCert ? 'https' : 'http'}://${cfg.listen}`;
}

/** host:port or [v6]:port as [host, port], or undefined when malformed. */
export function splitHostPort(addr: string): [string, number] | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d+)$/.exec(addr);
  if (!m || Number(m[3]) > 65535) return undefined;
  return [m[1] ?? m[2]!, Number(m[3])];
}

function checkHostPort(name: string, value: string): void {
  if (!splitHostPort(value)) throw new Error(`--${name} must be host:port, got "${value}"`);
}

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;

/**
 * The automatic compaction a config asks for, or undefined (off). Throws, naming the flag,
 * for an unknown mode, a malformed value, or a flag of one mode given with the other.
 */
export function autoCompact(cfg: Config): AutoCompact | undefined {
  const mode = cfg.autoCompactMode;
  const given = (v: unknown) => v !== undefined && v !== '';
  const timeFlags = { 'auto-compact-retention': cfg.autoCompactRetention, 'auto-compact-sample-interval': cfg.autoCompactSampleInterval };
  const revisionFlags = { 'auto-compact-retain-revisions': cfg.autoCompactRetainRevisions, 'auto-compact-interval': cfg.autoCompactInterval };
  const refuseOthers = (flags: Record<string, unknown>, need: string) => {
    for (const [name, v] of Object.entries(flags)) {
      if (given(v)) throw new Error(`--${name} needs --auto-compact-mode ${need}${mode ? `, got --auto-compact-mode ${mode}` : ''}`);
    }
  };
  if (!given(mode)) {
    refuseOthers(timeFlags, 'time');
    refuseOthers(revisionFlags, 'revision');
    return undefined;
  }
  if (mode === 'time') {
    refuseOthers(revisionFlags, 'revision');
    if (!given(cfg.autoCompactRetention)) throw new Error('--auto-compact-mode time needs --auto-compact-retention (e.g. 168h)');
    const retentionMs = parseDuration(cfg.autoCompactRetention!, 'auto-compact-retention');
    const sampleIntervalMs = given(cfg.autoCompactSampleInterval)
      ? parseDuration(cfg.autoCompactSampleInterval!, 'auto-compact-sample-interval')
      : Math.min(Math.max(retentionMs / 7, MINUTE), DAY);
    return { mode, retentionMs, sampleIntervalMs };
  }
  if (mode === 'revision') {
    refuseOthers(timeFlags, 'time');
    const retainRevisions = cfg.autoCompactRetainRevisions;
    if (!given(retainRevisions)) throw new Error('--auto-compact-mode revision needs --auto-compact-retain-revisions (e.g. 1000)');
    if (!Number.isSafeInteger(retainRevisions) || retainRevisions! < 1) {
      throw new Error(`--auto-compact-retain-revisions must be a whole number of at least 1, got "${retainRevisions}"`);
    }
    return { mode, retainRevisions: retainRevisions!, intervalMs: parseDuration(cfg.autoCompactInterval ?? '5m', 'auto-compact-interval') };
  }
  throw new Error(`--auto-compact-mode must be time or revision, got "${mode}"`);
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
