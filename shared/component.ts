// What every component process does the same way: tell the supervisor when it is ready, stop
// cleanly when the supervisor says so (or on SIGTERM and SIGINT when run alone), and stop when
// the supervisor is gone.
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

/** What the supervisor sends over the IPC channel to stop a component (supervisor/component.ts). */
export const STOP_MESSAGE = 'stop';

/** The component's graceful stop, once installLifecycle has set it up; the log it writes to. */
let lifecycle: { stop(why: string): void; log: Logger } | undefined;
let guarded = false;

/**
 * Under a supervisor (an IPC channel that is connected), a component stops only when the
 * supervisor tells it to over that channel, or when the channel closes (the supervisor is gone,
 * even by SIGKILL). SIGTERM and SIGINT are ignored then: a service manager signals every
 * process of the node at once (systemd's default KillMode=control-group, `kill -- -PGID`, a
 * terminal's Ctrl-C, a container init forwarding to the group), and the supervisor, which gets
 * the same signal, stops the components in its order (a leader's peer agent hands over while
 * its storage still runs, storage last). Run alone (`kvs component`), or once its supervisor is
 * gone, a component stops on SIGTERM and SIGINT.
 *
 * Called first thing in a component process (bin/kvs.js, then supervisor/cli.ts), so that a
 * signal during a long startup (a restore, a WAL replay) is ignored as well. A stop asked for
 * before installLifecycle exits at once, as a SIGTERM's default action did then (a component is
 * safe to kill at any point).
 */
export function guardSignals(): void {
  if (guarded) return;
  guarded = true;
  const stopNow = (why: string, signal?: NodeJS.Signals) => {
    if (lifecycle) return lifecycle.stop(why);
    if (!signal) process.exit(0);
    // Not started yet and nobody to wait for: the signal's default action.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      if (process.connected) lifecycle?.log.info({ signal }, `${signal} ignored: the supervisor orders the stop`);
      else stopNow(signal, signal);
    });
  }
  if (process.send) {
    process.on('message', (msg: { type?: string }) => {
      if (msg?.type === STOP_MESSAGE) stopNow('the supervisor stops it');
    });
    process.on('disconnect', () => stopNow('supervisor gone'));
    // Gone before this ran: nobody will send the stop.
    if (!process.connected) stopNow('supervisor gone');
  }
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
  lifecycle = { stop: (why) => void stop(why), log };
  guardSignals();
}

let nodeMetricsId = 0;
let ownRegistry: ReturnType<typeof processRegistry> | undefined;
/** Requests for the node's metrics waiting for the supervisor's answer, by id. */
const nodeMetricsWaiting = new Map<number, (text: string | undefined, error: string | undefined) => void>();
/** The scrape in flight: concurrent requests share it (each would make the supervisor ask every component). */
let nodeMetricsInFlight: Promise<string> | undefined;

/**
 * The node's metrics as the metrics address serves them (every component's, merged by the
 * supervisor); a component run alone has only its own.
 */
export function nodeMetrics(owner: Owner, timeoutMs = 5000): Promise<string> {
  if (!process.send) return (ownRegistry ??= processRegistry(owner)).metrics();
  if (!process.connected) return Promise.reject(new Error('the supervisor is gone'));
  if (nodeMetricsInFlight) return nodeMetricsInFlight;
  if (nodeMetricsWaiting.size === 0) process.on('message', onNodeMetrics);
  const id = ++nodeMetricsId;
  nodeMetricsInFlight = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => done(undefined, 'the supervisor did not answer'), timeoutMs);
    const done = (text: string | undefined, error: string | undefined) => {
      clearTimeout(timer);
      nodeMetricsWaiting.delete(id);
      if (nodeMetricsWaiting.size === 0) process.off('message', onNodeMetrics);
      nodeMetricsInFlight = undefined;
      if (text !== undefined) resolve(text);
      else reject(new Error(error ?? 'no metrics'));
    };
    nodeMetricsWaiting.set(id, done);
    // A channel that closes meanwhile is an error here, not an 'error' event on process.
    process.send!({ type: 'node-metrics', id }, undefined, {}, (err: Error | null) => err && done(undefined, err.message));
  });
  return nodeMetricsInFlight;
}

function onNodeMetrics(msg: { type?: string; id?: number; text?: string; error?: string }): void {
  if (msg?.type === 'node-metrics' && msg.id !== undefined) nodeMetricsWaiting.get(msg.id)?.(msg.text, msg.error);
}

/**
 * Answers the supervisor's metrics requests (`{type: 'metrics', id}`) with this process's
 * registry as JSON; the supervisor merges every component's into the node's /metrics.
 * `refresh` sets the gauges that are read off the component's state at scrape time.
 */
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
