// An OTLP/gRPC trace receiver for the tracing tests: a grpc-js server implementing
// opentelemetry.proto.collector.trace.v1.TraceService/Export on a free port. It keeps every
// request's raw bytes (to search them for things that must never be exported) and the spans,
// decoded with integration/otlp/trace-service.proto.
import { EventEmitter } from 'node:events';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { REPO_ROOT, onCleanup, type Ctx } from '../testkit/harness.js';

export interface ExportedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, string | number | boolean>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
  statusMessage: string;
  /** service.name of the exporting process's resource. */
  service: string;
}

export interface OtlpReceiver {
  /** http://127.0.0.1:PORT, for OTEL_EXPORTER_OTLP_ENDPOINT. */
  readonly endpoint: string;
  /** Every span received so far. */
  readonly spans: ExportedSpan[];
  /** Export requests received so far, as they came on the wire. */
  readonly requests: Buffer[];
  /** Resolves with the spans once `done(spans)` holds; fails after `timeoutMs`. */
  until(what: string, done: (spans: ExportedSpan[]) => boolean, timeoutMs?: number): Promise<ExportedSpan[]>;
}

const PROTO = path.join(REPO_ROOT, 'integration', 'otlp', 'trace-service.proto');
const SERVICE = 'opentelemetry.proto.collector.trace.v1';

interface KeyValue { key: string; value?: { stringValue?: string; boolValue?: boolean; intValue?: protobuf.Long | number; doubleValue?: number } }
interface DecodedSpan { traceId: Uint8Array; spanId: Uint8Array; parentSpanId: Uint8Array; name: string; kind: number; attributes: KeyValue[]; status?: { message: string; code: number } }
interface ExportRequest { resourceSpans: { resource?: { attributes: KeyValue[] }; scopeSpans: { spans: DecodedSpan[] }[] }[] }

export async function startOtlpReceiver(t: Ctx): Promise<OtlpReceiver> {
  const root = protobuf.loadSync(PROTO);
  const Request = root.lookupType(`${SERVICE}.ExportTraceServiceRequest`);
  const spans: ExportedSpan[] = [];
  const requests: Buffer[] = [];
  const received = new EventEmitter();
  const server = new grpc.Server();
  const definition: grpc.ServiceDefinition = {
    Export: {
      path: `/${SERVICE}.TraceService/Export`,
      requestStream: false,
      responseStream: false,
      requestDeserialize: (b: Buffer) => b,
      requestSerialize: (b: Buffer) => b,
      // An empty ExportTraceServiceResponse: full success.
      responseSerialize: () => Buffer.alloc(0),
      responseDeserialize: (b: Buffer) => b,
    },
  };
  server.addService(definition, {
    Export(call: grpc.ServerUnaryCall<Buffer, unknown>, cb: grpc.sendUnaryData<unknown>) {
      requests.push(call.request);
      const req = Request.toObject(Request.decode(call.request), { defaults: true, longs: Number }) as ExportRequest;
      for (const rs of req.resourceSpans) {
        const service = String(attributes(rs.resource?.attributes ?? [])['service.name'] ?? '');
        for (const ss of rs.scopeSpans) for (const s of ss.spans) spans.push(flatten(s, service));
      }
      cb(null, {});
      received.emit('export');
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  onCleanup(t, () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())));
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    requests,
    until(what, done, timeoutMs = 30_000) {
      if (done(spans)) return Promise.resolve(spans);
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!done(spans)) return;
          finish();
          resolve(spans);
        };
        const timer = setTimeout(() => {
          finish();
          reject(new Error(`${what}: not exported within ${timeoutMs} ms; spans so far: ${JSON.stringify(spans.map((s) => s.name))}`));
        }, timeoutMs);
        const finish = () => {
          clearTimeout(timer);
          received.off('export', check);
        };
        received.on('export', check);
      });
    },
  };
}

function flatten(s: DecodedSpan, service: string): ExportedSpan {
  const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
  return {
    traceId: hex(s.traceId),
    spanId: hex(s.spanId),
    parentSpanId: hex(s.parentSpanId),
    name: s.name,
    kind: s.kind,
    attributes: attributes(s.attributes),
    statusCode: s.status?.code ?? 0,
    statusMessage: s.status?.message ?? '',
    service,
  };
}

function attributes(kvs: KeyValue[]): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of kvs) {
    if (!value) continue;
    if (value.stringValue !== undefined) out[key] = value.stringValue;
    else if (value.intValue !== undefined) out[key] = Number(value.intValue);
    else if (value.doubleValue !== undefined) out[key] = value.doubleValue;
    else if (value.boolValue !== undefined) out[key] = value.boolValue;
  }
  return out;
}
