// The gateway's spans (only while tracing is on): one per client write (kvs.put, kvs.delete,
// kvs.compact, and the Txn shapes of shared/mvcc/write-kind.ts) and one per linearizable
// Range (kvs.get, kvs.exists, kvs.list, kvs.count). A client's trace context in its gRPC
// metadata (W3C `traceparent` by default; OTEL_PROPAGATORS) becomes the span's parent.
// Keys are never recorded: `kvs.key_scope` carries keyScope(key).
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, propagation, type Attributes, type Span, type TextMapGetter } from '@opentelemetry/api';
import type { Metadata } from '@grpc/grpc-js';
import type { ServerCall, StatusLike, UnaryCallback } from '../../shared/grpc/server.js';
import type { Tracing } from '../../shared/tracing.js';
import { decode } from '../../shared/proto/index.js';
import { classifyTxn, keyScope, type Classified } from '../../shared/mvcc/write-kind.js';
import { Op } from '../../shared/storage/ops.js';

export const ATTR_KEY_SCOPE = 'kvs.key_scope';
/** OpenTelemetry's semantic convention for a gRPC call's status code. */
export const ATTR_GRPC_STATUS = 'rpc.grpc.status_code';

export type ReadKind = 'get' | 'exists' | 'list' | 'count';

interface RangeShape { key?: Uint8Array; rangeEnd?: Uint8Array; serializable?: boolean; keysOnly?: boolean; countOnly?: boolean }
interface KeyOnly { key?: Uint8Array }

/**
 * The span of a Range: none for a serializable one. count_only → count; a range (range_end
 * set, a prefix included) → list; one key with keys_only → exists; one key → get.
 */
export function readKind(r: RangeShape): ReadKind | undefined {
  if (r.serializable) return undefined;
  if (r.countOnly) return 'count';
  if (r.rangeEnd && r.rangeEnd.length > 0) return 'list';
  return r.keysOnly ? 'exists' : 'get';
}

/** What a write is, from the client's undecoded request (decoded here only because tracing is on). */
export function writeKind(op: number, body: Uint8Array): Classified {
  try {
    switch (op) {
      case Op.PUT:
        return { kind: 'put', key: decode<KeyOnly>('etcdserverpb.PutRequest', body).key };
      case Op.DELETE_RANGE:
        return { kind: 'delete', key: decode<KeyOnly>('etcdserverpb.DeleteRangeRequest', body).key };
      case Op.TXN:
        return classifyTxn(decode('etcdserverpb.TxnRequest', body));
    }
  } catch {
    // Not a valid message: storage refuses it (INTERNAL); the span still says what was asked.
  }
  return { kind: op === Op.PUT ? 'put' : op === Op.DELETE_RANGE ? 'delete' : op === Op.TXN ? 'txn' : 'compact' };
}

const metadataGetter: TextMapGetter<Metadata> = {
  get(carrier, key) {
    const values = carrier.get(key);
    return values.length ? values.map(String) : undefined;
  },
  keys: (carrier) => Object.keys(carrier.getMap()),
};

export class GatewaySpans {
  constructor(private readonly tracing: Tracing) {}

  /** Starts the span of a client write, child of the client's trace context if it sent one. */
  write(call: ServerCall<Buffer, unknown>, op: number): Span {
    const { kind, key } = writeKind(op, call.request);
    return this.start(`kvs.${kind}`, call, key);
  }

  /** The traceparent for storage (WriteRequest.trace_parent): kvs.wal.append's parent. */
  traceParent(span: Span): string | undefined {
    return this.tracing.traceParent(span);
  }

  /** `cb`, ending `span` first with the call's outcome. */
  ending<T>(span: Span, cb: UnaryCallback<T>): UnaryCallback<T> {
    return (err, value, written) => {
      end(span, err);
      cb(err, value, written);
    };
  }

  /** A Range handler whose linearizable calls get a span. */
  range<Req extends RangeShape, Res>(handler: (call: ServerCall<Req, Res>, cb: UnaryCallback<Res>) => void) {
    return (call: ServerCall<Req, Res>, cb: UnaryCallback<Res>): void => {
      const kind = readKind(call.request);
      if (!kind) return handler(call, cb);
      handler(call, this.ending(this.start(`kvs.${kind}`, call, call.request.key), cb));
    };
  }

  private start(name: string, call: ServerCall<unknown, unknown>, key: Uint8Array | undefined): Span {
    const parent = propagation.extract(ROOT_CONTEXT, call.metadata, metadataGetter);
    const scope = key && key.length > 0 ? keyScope(key) : '';
    const attributes: Attributes | undefined = scope ? { [ATTR_KEY_SCOPE]: scope } : undefined;
    return this.tracing.tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent);
  }
}

function end(span: Span, err: StatusLike | null | undefined): void {
  const code = err ? (typeof err.code === 'number' ? err.code : 2 /* UNKNOWN */) : 0;
  span.setAttribute(ATTR_GRPC_STATUS, code);
  if (err) span.setStatus({ code: SpanStatusCode.ERROR, message: err.details ?? err.message });
  span.end();
}
