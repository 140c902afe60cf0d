// The spec's metrics, one object each, and who counts them. Every process keeps its own
// prom-client registry holding the metrics its component owns (plus Node's process metrics
// labelled with the component); the supervisor asks each component for its registry's JSON over
// the IPC channel and merges them (AggregatorRegistry) into the node's one /metrics. A metric
// is owned by exactly one process, so every metric appears once, with its HELP and TYPE even
// before its first event, and with the spec's labels only.
import client from 'prom-client';
import { METRIC_OPS, type MetricOp } from './mvcc/write-kind.js';

export type Owner = 'supervisor' | 'storage' | 'gateway' | 'archiver' | 'peer';

const owned = new Map<Owner, client.Metric[]>();
function own<M extends client.Metric>(owner: Owner, m: M): M {
  let list = owned.get(owner);
  if (!list) owned.set(owner, (list = []));
  list.push(m);
  return m;
}

/** Latency buckets in seconds: 100 µs to 10 s (an fsync is ~0.1 ms here; an S3 PUT ~2-50 ms). */
const LATENCY = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const opLabel = { labelNames: ['op'] as const };

// ---- storage: the write path, revisions, compaction, local WAL
export const writesTotal = own('storage', new client.Counter({ name: 'kvs_writes_total', help: 'Completed writes, by op (put, create, update, delete, txn, compact)', ...opLabel, registers: [] }));
export const writeErrorsTotal = own('storage', new client.Counter({ name: 'kvs_write_errors_total', help: 'Writes that returned an error, by op', ...opLabel, registers: [] }));
export const writeDuration = own('storage', new client.Histogram({ name: 'kvs_write_duration_seconds', help: 'Write latency in storage, from arrival to answer (queue, WAL fsync, upload in sync mode, apply), by op', ...opLabel, buckets: LATENCY, registers: [] }));
export const currentRevision = own('storage', new client.Gauge({ name: 'kvs_current_revision', help: 'Latest applied revision', registers: [] }));
export const compactRevision = own('storage', new client.Gauge({ name: 'kvs_compact_revision', help: 'Compaction watermark', registers: [] }));
/** The write metrics' children per op, resolved once: the write path skips the label lookup. */
export const writeMetricsByOp = Object.fromEntries(
  METRIC_OPS.map((op) => [op, { done: writesTotal.labels({ op }), failed: writeErrorsTotal.labels({ op }), duration: writeDuration.labels({ op }) }]),
) as Record<MetricOp, { done: client.Counter.Internal; failed: client.Counter.Internal; duration: client.Histogram.Internal<string> }>;
/**
 * WAL fdatasync buckets, 125 µs to 8.192 s doubling: the upper fourteen are exactly etcd's
 * `etcd_disk_wal_fsync_duration_seconds` buckets (1 ms x 2^k), the three below them resolve the
 * ~0.1 ms fdatasync of a fast local disk.
 */
const FSYNC = [0.000125, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192];
export const walFsyncDuration = own('storage', new client.Histogram({ name: 'kvs_wal_fsync_duration_seconds', help: 'Duration of the fdatasync of each WAL append (one per group-commit batch that wrote records; on a follower, one per replicated append)', buckets: FSYNC, registers: [] }));
export const writeBatchSize = own('storage', new client.Histogram({ name: 'kvs_write_batch_size', help: 'Requests per group-commit write batch (client writes, lease grants and revokes, auth changes, compactions)', buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], registers: [] }));
export const writeBatchesInFlight = own('storage', new client.Histogram({ name: 'kvs_write_batches_in_flight', help: 'Batches a cluster leader (or a single node uploading each batch) had written and not yet applied when it wrote one more, that one included (--write-pipeline)', buckets: [1, 2, 3, 4], registers: [] }));
export const walGcSegmentsTotal = own('storage', new client.Counter({ name: 'kvs_wal_gc_segments_total', help: 'Local WAL segments deleted once uploaded and covered by a checkpoint', registers: [] }));

// ---- archiver: the object store
export const walUploadsTotal = own('archiver', new client.Counter({ name: 'kvs_wal_uploads_total', help: 'WAL objects uploaded to the object store', registers: [] }));
export const walUploadErrorsTotal = own('archiver', new client.Counter({ name: 'kvs_wal_upload_errors_total', help: 'Failed WAL uploads (each retry that failed)', registers: [] }));
export const walUploadConflictsTotal = own('archiver', new client.Counter({ name: 'kvs_wal_upload_conflicts_total', help: 'WAL uploads skipped because the object already existed', registers: [] }));
export const walUploadDuration = own('archiver', new client.Histogram({ name: 'kvs_wal_upload_duration_seconds', help: 'WAL upload latency', buckets: LATENCY, registers: [] }));
export const checkpointsTotal = own('archiver', new client.Counter({ name: 'kvs_checkpoints_total', help: 'Checkpoints written to the object store', registers: [] }));

// ---- gateway: watches, auth
export const watchActive = own('gateway', new client.Gauge({ name: 'kvs_watch_active', help: 'Active watch subscriptions', registers: [] }));
export const watchActivePrefixes = own('gateway', new client.Gauge({ name: 'kvs_watch_active_prefixes', help: 'Distinct prefixes with active watches', registers: [] }));
export const watchFeedQuiet = own('gateway', new client.Gauge({ name: 'kvs_watch_feed_quiet', help: '1 while the gateway has asked storage to hold its feed (no watcher, nothing waiting)', registers: [] }));
export const watchScanDuration = own('gateway', new client.Histogram({ name: 'kvs_watch_scan_duration_seconds', help: 'Time scanning revision history for watch delivery (catch-up of unsynced watchers)', buckets: LATENCY, registers: [] }));
export const watchScanRevisionSpan = own('gateway', new client.Histogram({ name: 'kvs_watch_scan_revision_span', help: 'Revisions spanned by one watch history scan', buckets: [1, 10, 100, 1000, 10_000, 100_000, 1_000_000], registers: [] }));
export const watchScanEntriesTotal = own('gateway', new client.Counter({ name: 'kvs_watch_scan_entries_total', help: 'History entries read by watch scans (scanned) and delivered to a watcher (matched)', labelNames: ['result'] as const, registers: [] }));
export const authAttemptsTotal = own('gateway', new client.Counter({ name: 'kvs_auth_attempts_total', help: 'Authenticate outcomes: success, fail, locked', labelNames: ['result'] as const, registers: [] }));

// ---- supervisor: the node's role. Cluster mode (the peer component) takes these over.
export const role = own('peer', new client.Gauge({ name: 'kvs_role', help: '1 for the active role (leader, follower, single)', labelNames: ['role'] as const, registers: [] }));
export const replicationDegraded = own('peer', new client.Gauge({ name: 'kvs_replication_degraded', help: '1 while the leader flushes each batch to the object store for lack of follower ACKs', registers: [] }));
export const electionsTotal = own('peer', new client.Counter({ name: 'kvs_elections_total', help: 'Leader elections, by outcome (won, lost)', labelNames: ['outcome'] as const, registers: [] }));
export const forwardedWritesTotal = own('peer', new client.Counter({ name: 'kvs_forwarded_writes_total', help: 'Writes forwarded from a follower to the leader, by op', ...opLabel, registers: [] }));
export const forwardDuration = own('peer', new client.Histogram({ name: 'kvs_forward_duration_seconds', help: 'Forwarded write round trip, by op', ...opLabel, buckets: LATENCY, registers: [] }));
export const followerResyncsTotal = own('peer', new client.Counter({ name: 'kvs_follower_resyncs_total', help: 'Full follower resyncs, by reason (behind_leader_start, ring_buffer_miss, stream_gap)', labelNames: ['reason'] as const, registers: [] }));

/**
 * Label values known in advance are set to 0, so every series a dashboard plots exists from
 * the start (a rate over a series that appears late misses its first increments).
 */
function zeroKnownLabels(): void {
  for (const op of METRIC_OPS) {
    writesTotal.inc({ op }, 0);
    writeErrorsTotal.inc({ op }, 0);
    forwardedWritesTotal.inc({ op }, 0);
  }
  for (const result of ['scanned', 'matched']) watchScanEntriesTotal.inc({ result }, 0);
  for (const result of ['success', 'fail', 'locked']) authAttemptsTotal.inc({ result }, 0);
  for (const outcome of ['won', 'lost']) electionsTotal.inc({ outcome }, 0);
  for (const reason of ['behind_leader_start', 'ring_buffer_miss', 'stream_gap']) followerResyncsTotal.inc({ reason }, 0);
  for (const r of ['leader', 'follower', 'single']) role.set({ role: r }, 0);
}
zeroKnownLabels();

/** Every metric of the spec, by name (the tests check the merged exposition against it). */
export const SPEC_METRIC_NAMES: readonly string[] = [...owned.values()].flat().map((m) => (m as unknown as { name: string }).name);

/** How often Node's event-loop delay is sampled for `nodejs_eventloop_lag_*` (ms). */
const EVENT_LOOP_SAMPLE_MS = 100;

/**
 * This process's registry: the metrics `owner` counts, and Node's process metrics. `adopt`
 * names owners that run no process on this node (no archiver without an object store): their
 * metrics are exported from here, at zero, so the exposition always has every metric.
 */
export function processRegistry(owner: Owner, adopt: Owner[] = []): client.Registry {
  const registry = new client.Registry();
  for (const o of [owner, ...adopt]) for (const m of owned.get(o) ?? []) registry.registerMetric(m);
  // prom-client samples the event loop's delay with a libuv timer, every 10 ms by default: 100
  // wake-ups a second in every kvs process, about half of an idle node's CPU.
  // Every 100 ms still catches a stalled loop; the lag percentiles come from fewer samples.
  client.collectDefaultMetrics({ register: registry, labels: { component: owner }, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  return registry;
}

/**
 * A registry of the metrics `owners` count, without Node's process metrics: for a program that
 * embeds a node (embed/), which merges it into its own registry (that has its own process
 * metrics). The metrics are this module's, so every node of one process counts into the same.
 */
export function ownedRegistry(owners: readonly Owner[]): client.Registry {
  const registry = new client.Registry();
  for (const o of owners) for (const m of owned.get(o) ?? []) registry.registerMetric(m);
  return registry;
}

export type MetricsJson = client.MetricObjectWithValues<client.MetricValue<string>>[];

/** The node's exposition: every process's registry JSON, merged (counters and histograms summed). */
export function mergeMetrics(parts: MetricsJson[]): Promise<string> {
  return client.AggregatorRegistry.aggregate(parts).metrics();
}

/** The same merge, as prom-client's JSON (the console's sampler reads it). */
export function mergedJson(parts: MetricsJson[]): Promise<MetricsJson> {
  return client.AggregatorRegistry.aggregate(parts).getMetricsAsJSON() as Promise<MetricsJson>;
}

export const CONTENT_TYPE = client.Registry.PROMETHEUS_CONTENT_TYPE;
