// open()'s options checked and defaulted once, before anything is touched: a wrong option is a
// TypeError naming it and saying what it must be, as `kvs run` names a wrong flag.
import path from 'node:path';
import { parseDuration } from '../shared/duration.js';
import type { AutoCompact } from '../shared/config.js';
import type { OpenOptions, ReadConsistency } from './options.js';

/** The options with their defaults, dataDir absolute, durations in ms. */
export interface ResolvedOptions extends OpenOptions {
  dataDir: string;
  readConsistency: ReadConsistency;
  nodeId: string;
  walSyncUpload: boolean;
  checkpointIntervalMs: number;
  peerBufferSize: number;
  authEnabled: boolean;
  logLevel: NonNullable<OpenOptions['logLevel']>;
}

const LOG_LEVELS = ['silent', 'fatal', 'error', 'warn', 'info', 'debug', 'trace'];
/** The spec's defaults (Limits), as `kvs run`'s flags have them. */
const CHECKPOINT_INTERVAL = '15m';
const PEER_BUFFER_SIZE = 10_000;

function fail(message: string): never {
  throw new TypeError(`kvs open(): ${message}`);
}

function given(v: unknown): boolean {
  return v !== undefined && v !== null;
}

export function checkOptions(o: OpenOptions): ResolvedOptions {
  if (!o || typeof o !== 'object') fail('takes an options object, e.g. open({ dataDir: "./kvs-data" })');
  if (typeof o.dataDir !== 'string' || o.dataDir === '') fail('dataDir is required: the directory the node keeps its data in (created if absent)');
  const readConsistency = o.readConsistency ?? 'linearizable';
  if (readConsistency !== 'linearizable' && readConsistency !== 'serializable') fail(`readConsistency must be 'linearizable' or 'serializable', got ${JSON.stringify(readConsistency)}`);
  const logLevel = o.logLevel ?? 'silent';
  if (!LOG_LEVELS.includes(logLevel)) fail(`logLevel must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(logLevel)}`);
  if (given(o.walSyncUpload) && typeof o.walSyncUpload !== 'boolean') fail(`walSyncUpload must be true or false, got ${JSON.stringify(o.walSyncUpload)}`);
  const checkpointIntervalMs = durationMs(o.checkpointInterval ?? CHECKPOINT_INTERVAL);
  if (!(checkpointIntervalMs > 0)) fail(`checkpointInterval must be a positive duration (ms, or e.g. '15m'), got ${JSON.stringify(o.checkpointInterval)}`);
  const peerBufferSize = o.peerBufferSize ?? PEER_BUFFER_SIZE;
  if (!Number.isSafeInteger(peerBufferSize) || peerBufferSize < 1) fail(`peerBufferSize must be a whole number of at least 1, got ${JSON.stringify(o.peerBufferSize)}`);
  if (given(o.encryptionKey) && (!(o.encryptionKey instanceof Uint8Array) || o.encryptionKey.length !== 32)) fail('encryptionKey must be 32 bytes (an AES-256 key) as a Uint8Array');
  if (given(o.autoCompact)) checkAutoCompact(o.autoCompact!);
  if (given(o.nodeId) && (typeof o.nodeId !== 'string' || o.nodeId === '')) fail('nodeId must be a non-empty string');

  // Options that only mean something with another one.
  const needsStore = ['ancestorStore', 'branchPoint', 'encryptionKey', 'walSyncUpload', 'checkpointInterval', 'peerListen'] as const;
  if (!given(o.objectStore)) for (const k of needsStore) if (given(o[k])) fail(`${k} needs objectStore (the object store the node archives to)`);
  const needsCluster = ['advertisePeer', 'peerServerTLS', 'peerClientTLS', 'peerBufferSize'] as const;
  if (!given(o.peerListen)) for (const k of needsCluster) if (given(o[k])) fail(`${k} needs peerListen (cluster mode)`);

  return {
    ...o,
    dataDir: path.resolve(o.dataDir),
    readConsistency,
    nodeId: o.nodeId ?? 'default',
    walSyncUpload: o.walSyncUpload ?? true,
    checkpointIntervalMs,
    peerBufferSize,
    authEnabled: o.authEnabled === true,
    logLevel,
  };
}

/** ms as given, or a duration such as '15m'; NaN for anything else. */
function durationMs(v: unknown): number {
  if (typeof v === 'number') return v;
  if (typeof v !== 'string') return NaN;
  try {
    return parseDuration(v, 'duration');
  } catch {
    return NaN;
  }
}

function checkAutoCompact(a: AutoCompact): void {
  const positive = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v > 0;
  if (a.mode === 'time') {
    if (!positive(a.retentionMs) || !positive(a.sampleIntervalMs)) fail('autoCompact { mode: "time" } needs retentionMs and sampleIntervalMs, positive numbers of ms');
  } else if (a.mode === 'revision') {
    if (!Number.isSafeInteger(a.retainRevisions) || a.retainRevisions < 1 || !positive(a.intervalMs)) fail('autoCompact { mode: "revision" } needs retainRevisions (a whole number of at least 1) and intervalMs');
  } else fail(`autoCompact.mode must be 'time' or 'revision', got ${JSON.stringify((a as { mode: unknown }).mode)}`);
}
