// What every component process does the same way: tell the supervisor when it is ready,
// stop cleanly on SIGTERM, and exit when the supervisor is gone.
import type { Logger } from './log.js';
import { processRegistry, type Owner } from './metrics.js';
import { stopTracing } from './tracing.js';

export interface ComponentHooks {
  /** Graceful stop: finish in-flight work, release files. */
  stop(): Promise<void>;
}

/** Sent to the supervisor over the IPC channel (absent when run alone in the foreground). */
export function signalReady(info: Record<string, unknown> = {}): void {
  process.send?.({ type: 'ready', ...info });
}

/** What the component is doing, shown by `kvs ctl status` (e.g. restore progress). */
export function reportState(detail: string): void {
  process.send?.({ type: 'detail', detail });
}

/** Conditions the supervisor's /readyz reports, e.g. writes refused for lack of disk space. */
export function reportHealth(health: { writesRefused: string }): void {
  process.send?.({ type: 'health', ...health });
}

/**
 * Asks the supervisor to replace this node's database and WAL with the object store's latest
 * checkpoint (a follower too far behind for the uploaded WAL; supervisor.ts).
 */
export function requestCheckpointRestore(why: string): void {
  process.send?.({ type: 'restore-checkpoint', why });
}

export function installLifecycle(log: Logger, hooks: ComponentHooks): void {
  let stopping = false;
  const stop = async (why: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ why }, 'stopping');
    const force = setTimeout(() => {
      log.error('graceful stop took longer than 10 s; exiting');
      process.exit(1);
    }, 10_000);
    force.unref();
    try {
      await hooks.stop();
    } catch (err) {
      log.error({ err }, 'error while stopping');
      process.exitCode = 1;
    }
    // Last, so that the spans of the work the stop finished are exported too.
    await stopTracing();
    log.flush?.();
    process.exit();
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  if (process.send) {
    // Under the supervisor a terminal's Ctrl-C reaches every process of the group; the
    // supervisor alone decides the order in which components stop.
    process.on('SIGINT', () => {});
    process.on('disconnect', () => void stop('supervisor gone'));
  } else {
    process.on('SIGINT', () => void stop('SIGINT'));
  }
}

/**
 * Answers the supervisor's metrics requests (`{type: 'metrics', id}`) with this process's
 * registry as JSON; the supervisor merges every component's into the node's /metrics.
 * `refresh` sets the gauges that are read off the component's state at scrape time.
 */
let nodeMetricsId = 0;
let ownRegistry: ReturnType<typeof processRegistry> | undefined;
/**
 * The node's metrics as the metrics address serves them (every component's, merged by the
 * supervisor); a component run alone has only its own.
 */
export function nodeMetrics(owner: Owner, timeoutMs = 5000): Promise<string> {
  if (!process.send) return (ownRegistry ??= processRegistry(owner)).metrics();
  const id = ++nodeMetricsId;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(undefined, 'the supervisor did not answer'), timeoutMs);
    const onMessage = (msg: { type?: string; id?: number; text?: string; error?: string }) => {
      if (msg?.type === 'node-metrics' && msg.id === id) done(msg.text, msg.error);
    };
    const done = (text: string | undefined, error: string | undefined) => {
      clearTimeout(timer);
      process.off('message', onMessage);
      if (text !== undefined) resolve(text);
      else reject(new Error(error ?? 'no metrics'));
    };
    process.on('message', onMessage);
    process.send!({ type: 'node-metrics', id });
  });
}

export function serveMetrics(owner: Owner, refresh: () => void = () => {}): void {
  if (!process.send) return;
  const registry = processRegistry(owner);
  process.on('message', (msg: { type?: string; id?: number }) => {
    if (msg?.type !== 'metrics') return;
    try {
      refresh();
    } catch {
      // A component still starting has nothing to read yet: its gauges keep their last values.
    }
    registry.getMetricsAsJSON().then(
      (metrics) => process.send?.({ type: 'metrics', id: msg.id, metrics }),
      (err: Error) => process.send?.({ type: 'metrics', id: msg.id, error: err.message }),
    );
  });
}
