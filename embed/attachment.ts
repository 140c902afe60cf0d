// What the object store (embed/object-store.ts) and the cluster role (embed/cluster.ts) plug
// into open() with; open.ts says when each hook runs. Not part of the package's API: its types
// reach into the storage engine.
import type { Logger } from '../shared/log.js';
import type { Tracing } from '../shared/tracing.js';
import type { EngineOptions } from '../services/storage/engine.js';
import type { ResolvedOptions } from './check-options.js';
import type { Host } from './host.js';

/** What the object store and the cluster role plug into open() with (when each hook runs: the top of open.ts). */
export interface Attachment {
  /** Before the engine opens: engine options this attachment needs (merged in order). */
  prepare?(ctx: { options: ResolvedOptions; log: Logger; tracing: Tracing }): Promise<EngineOptions | void>;
  /** Once the engine is open, before open() resolves. */
  start?(host: Host): Promise<void>;
  /** At close() (and when open() fails after prepare), before the engine closes; in reverse order. A prepare that throws cleans up itself. */
  stop?(): Promise<void>;
}

