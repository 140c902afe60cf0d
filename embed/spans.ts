// The embedded node's spans, with the spec's names (docs/observability.md): one per write
// (kvs.put, kvs.create, kvs.update, kvs.delete, kvs.delete_if_revision, kvs.txn, kvs.compact)
// and one per linearizable read (kvs.get, kvs.exists, kvs.list, kvs.count), children of the
// caller's active context. A write's span is the parent of the engine's kvs.wal.append, as the
// gateway's is for `kvs run`. Keys are never recorded: `kvs.key_scope` carries keyScope(key).
import { context, SpanStatusCode, type Attributes, type Span } from '@opentelemetry/api';
import type { Tracing } from '../shared/tracing.js';
import { keyScope, type WriteKind } from '../shared/mvcc/write-kind.js';

export const ATTR_KEY_SCOPE = 'kvs.key_scope';

export type ReadKind = 'get' | 'exists' | 'list' | 'count';

export class Spans {
  constructor(private readonly tracing: Tracing) {}

  /** `fn` inside the span of a write; it gets the traceparent to hand to the engine. */
  async write<T>(kind: WriteKind, key: Uint8Array | undefined, fn: (traceParent: string | undefined) => Promise<T>): Promise<T> {
    const span = this.start(`kvs.${kind}`, key);
    return ending(span, fn(this.tracing.traceParent(span)));
  }

  /** `fn` inside the span of a linearizable read (it covers the wait for the leader's revision). */
  async read<T>(kind: ReadKind, key: Uint8Array, fn: () => Promise<T>): Promise<T> {
    return ending(this.start(`kvs.${kind}`, key), fn());
  }

  private start(name: string, key: Uint8Array | undefined): Span {
    const scope = key && key.length > 0 ? keyScope(key) : '';
    const attributes: Attributes | undefined = scope ? { [ATTR_KEY_SCOPE]: scope } : undefined;
    return this.tracing.tracer.startSpan(name, { attributes }, context.active());
  }
}

async function ending<T>(span: Span, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
    throw err;
  } finally {
    span.end();
  }
}
