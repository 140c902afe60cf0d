// Automatic compaction (--auto-compact-*), run by storage. etcd's compactor package
// (periodic.go, revision.go) is the reference; the spec's rule 3 is the contract:
// - time mode samples the current revision every sample interval and compacts to the newest
//   sample taken at or before now - retention;
// - revision mode compacts to current - retain-revisions every interval, unless that is at or
//   below the compact revision (nothing to do) or below 1.
// A compaction is submitted to storage's own write queue like a client's Compact, so it is in
// the WAL (and replicated), and answered once the compact revision moved; the removal of the
// history follows in steps (mvcc/compaction.ts). A failed compaction (e.g. a client compacted
// further meanwhile) is logged and tried again at the next tick.
import type { AutoCompact } from '../../shared/config.js';
import type { Logger } from '../../shared/log.js';
import { encode } from '../../shared/proto/index.js';
import type { Engine } from './engine.js';
import { Op } from '../../shared/storage/ops.js';

export interface CompactorOptions {
  log: Logger;
  /** The store's current revision. */
  revision: () => number;
  /** The store's compact revision (0 before any compaction). */
  compactRevision: () => number;
  /** Submits a Compact to `rev` through the write queue; `done` gets its outcome. */
  compact: (rev: number, done: (r: { code: number; message: string }) => void) => void;
  /** Only the cluster's leader compacts (always true on a single node). */
  active?: () => boolean;
  /** The clock (tests move it). */
  now?: () => number;
}

interface Sample {
  at: number;
  revision: number;
}

export class Compactor {
  private readonly now: () => number;
  private readonly active: () => boolean;
  private samples: Sample[] = [];
  private inFlight = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(readonly mode: AutoCompact, private readonly opts: CompactorOptions) {
    this.now = opts.now ?? Date.now;
    this.active = opts.active ?? (() => true);
  }

  /** How often `tick` runs: the sample interval (time mode) or the check interval. */
  get intervalMs(): number {
    return this.mode.mode === 'time' ? this.mode.sampleIntervalMs : this.mode.intervalMs;
  }

  start(): void {
    if (this.timer) return;
    this.tick(); // time mode: the first sample is taken at start
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One period: samples (time mode), then compacts if due. Returns the revision it compacts to, if any. */
  tick(): number | undefined {
    const target = this.mode.mode === 'time' ? this.timeTarget(this.mode.retentionMs) : this.revisionTarget(this.mode.retainRevisions);
    if (target === undefined || this.inFlight || !this.active()) return undefined;
    this.inFlight = true;
    this.opts.compact(target, (r) => {
      this.inFlight = false;
      if (r.code === 0) {
        this.opts.log.info({ revision: target, mode: this.mode.mode }, `auto compaction: compacted to revision ${target}`);
        // Samples at or below it can never be a later target.
        this.samples = this.samples.filter((s) => s.revision > target);
      } else {
        this.opts.log.warn({ revision: target, mode: this.mode.mode, code: r.code, error: r.message }, `auto compaction: compacting to revision ${target} failed: ${r.message}`);
      }
    });
    return target;
  }

  /** Samples the revision; the newest sample at or before now - retention, if not compacted yet. */
  private timeTarget(retentionMs: number): number | undefined {
    const now = this.now();
    this.samples.push({ at: now, revision: this.opts.revision() });
    let due: Sample | undefined;
    let i = 0;
    for (; i < this.samples.length && this.samples[i]!.at <= now - retentionMs; i++) due = this.samples[i];
    // Older samples than the due one are never needed again.
    if (i > 1) this.samples.splice(0, i - 1);
    if (!due || due.revision <= this.opts.compactRevision()) return undefined;
    return due.revision;
  }

  private revisionTarget(retain: number): number | undefined {
    const target = this.opts.revision() - retain;
    if (target < 1 || target <= this.opts.compactRevision()) return undefined;
    return target;
  }
}

/** The compactor `mode` asks for (autoCompact(cfg) of the flags), on `engine`, started; undefined when automatic compaction is off. */
export function startAutoCompaction(mode: AutoCompact | undefined, engine: Engine, log: Logger, active?: () => boolean): Compactor | undefined {
  if (!mode) return undefined;
  const compactor = new Compactor(mode, {
    log,
    active,
    revision: () => engine.revision,
    compactRevision: () => engine.executor.compactRevision,
    compact: (revision, done) => engine.submit(Op.COMPACT, encode('etcdserverpb.CompactionRequest', { revision }), done),
  });
  log.info({ ...mode }, `auto compaction: ${mode.mode} mode, every ${compactor.intervalMs} ms`);
  compactor.start();
  return compactor;
}
