// Messages between the main process and the load-generator processes (IPC, 'advanced'
// serialization so latency arrays travel as typed arrays). The Go load generator
// (`--client go`, bench/go-client.ts) gets the same requests as JSON lines, each run request
// with its op named (GoRunRequest), and answers in JSON lines too (latencies in base64).
import type { ClientKind } from '../testkit/kv-client.js';
import type { GoOp, WorkloadOptions } from './workload.js';

export interface PreloadRequest {
  type: 'preload';
  client: ClientKind;
  endpoint: string;
  /** Keys [from, to) of the data set. */
  from: number;
  to: number;
  /** Concurrent clients in this process. */
  clients: number;
  /** Puts per Txn (etcd allows 128 ops per Txn by default). */
  batch: number;
  valueBytes: number;
}

export interface RunRequest {
  type: 'run';
  client: ClientKind;
  workload: string;
  /** Client i talks to endpoints[i % endpoints.length]. */
  endpoints: string[];
  /** The clients this process runs. */
  clientIds: number[];
  totalClients: number;
  opts: WorkloadOptions;
  /** Epoch ms: start issuing requests (warm-up), start recording, stop. */
  startAt: number;
  measureAt: number;
  endAt: number;
}

export type ToWorker = PreloadRequest | RunRequest;

/** A run request for the Go load generator: it knows ops, not workloads. */
export interface GoRunRequest extends Omit<RunRequest, 'client'> {
  op: GoOp;
  /** -auth workloads: clientv3 logs in as this user (and again if the token is refused). */
  auth?: { user: string; password: string };
}

export interface RunResult {
  type: 'result';
  /** Milliseconds per request started in the measured window. */
  latencies: Float64Array;
  bytes: number;
  errors: number;
  firstError?: string;
  /** -auth workloads: logins again after a token was refused as invalid (expired). */
  relogins?: number;
}

export type FromWorker =
  | { type: 'ready' }
  | { type: 'preloaded'; keys: number }
  | RunResult
  | { type: 'failed'; message: string };
