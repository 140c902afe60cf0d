// kvs.wal.append: the group commit's WAL append, as a child of each client write span it
// covers. One append serves a whole batch, and a span has one parent, so every request of the
// batch that came with a trace parent (the gateway's write span, over the storage hop) gets its
// own kvs.wal.append span over the same append. Only while tracing is on.
import type { Span } from '@opentelemetry/api';
import { SpanStatusCode } from '@opentelemetry/api';
import type { Tracing } from '../../shared/tracing.js';

/** WAL records (one per request that changed something) written by the append. */
export const ATTR_BATCH_SIZE = 'kvs.batch_size';
export const WAL_APPEND = 'kvs.wal.append';

interface Traced {
  /** W3C traceparent of the write span; empty or absent when the caller sent none. */
  traceParent?: string;
}

export class WalSpans {
  constructor(private readonly tracing: Tracing) {}

  /** Starts the spans of an append of `records` WAL records for `batch`; undefined if no request is traced. */
  begin(batch: readonly Traced[], records: number): Span[] | undefined {
    let spans: Span[] | undefined;
    for (const p of batch) {
      if (!p.traceParent) continue;
      const parent = this.tracing.fromTraceParent(p.traceParent);
      (spans ??= []).push(this.tracing.tracer.startSpan(WAL_APPEND, { attributes: { [ATTR_BATCH_SIZE]: records } }, parent));
    }
    return spans;
  }

  /** Runs the (synchronous) append `fn` inside the batch's spans. */
  around<T>(batch: readonly Traced[], records: number, fn: () => T): T {
    const spans = this.begin(batch, records);
    let result: T;
    try {
      result = fn();
    } catch (err) {
      endWalSpans(spans, err);
      throw err;
    }
    endWalSpans(spans);
    return result;
  }
}

/** Ends the spans, as failed if `err` is given. */
export function endWalSpans(spans: Span[] | undefined, err?: unknown): void {
  if (!spans) return;
  for (const span of spans) {
    if (err !== undefined) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
    }
    span.end();
  }
}
