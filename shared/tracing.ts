// Tracing over OTLP/gRPC (docs/observability.md#tracing). Off unless an OTLP endpoint is
// set in the environment: then nothing of the SDK is even loaded, no provider exists, and
// `startTracing` returns undefined, which callers turn into their untraced code paths once, at
// setup. On: this process (gateway or storage) runs its own NodeSDK with the OTLP gRPC exporter
// behind a batch span processor, the sampler from OTEL_TRACES_SAMPLER(_ARG), and no
// instrumentations: the only spans are kvs's own.
import type { Context, DiagLogger, Span, Tracer } from '@opentelemetry/api';
import type { Logger } from './log.js';

export interface Tracing {
  readonly tracer: Tracer;
  /**
   * The W3C traceparent that makes a span the parent of storage's spans
   * (`WriteRequest.trace_parent`), or undefined for a span that is not sampled.
   */
  traceParent(span: Span): string | undefined;
  /** The context whose parent is a traceparent received on the storage hop. */
  fromTraceParent(traceParent: string): Context;
}

/** The endpoint tracing sends to, as the exporter reads it (the traces-specific one first). */
export function tracingEndpoint(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || undefined;
}

/** The spec's default service name; OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) wins. */
export const DEFAULT_SERVICE_NAME = 'kvs';

/** The OTLP gRPC exporter's own default. */
const DEFAULT_ENDPOINT = 'http://localhost:4317';

/** Flushing spans at stop never holds the component's graceful stop longer than this. */
const SHUTDOWN_WAIT_MS = 3000;

let running: { shutdown(): Promise<void>; log: Logger } | undefined;

/**
 * Starts tracing if an OTLP endpoint is set. Never throws: a configuration the SDK refuses is
 * logged as a warning and tracing stays off (bad values it can default, it defaults, warning).
 */
export async function startTracing(log: Logger): Promise<Tracing | undefined> {
  const endpoint = tracingEndpoint();
  if (!endpoint) return undefined;
  try {
    return await start(log, endpoint);
  } catch (err) {
    log.warn({ err }, 'tracing could not start; it stays off');
    return undefined;
  }
}

async function start(log: Logger, endpoint: string): Promise<Tracing | undefined> {
  const [api, core, { NodeSDK }, { OTLPTraceExporter }] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/core'),
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/exporter-trace-otlp-grpc'),
  ]);
  // The SDK reports bad OTEL_* values through its diagnostic logger: into ours, as warnings.
  api.diag.setLogger(diagToLog(log), { logLevel: api.DiagLogLevel.WARN, suppressOverrideMessage: true });
  const logLevel = core.diagLogLevelFromString(process.env.OTEL_LOG_LEVEL);
  if (logLevel !== undefined) api.diag.setLogger(diagToLog(log), { logLevel, suppressOverrideMessage: true });
  if (core.getBooleanFromEnv('OTEL_SDK_DISABLED')) {
    log.info('tracing is off: OTEL_SDK_DISABLED is set');
    return undefined;
  }
  let exporter;
  try {
    // Reads the endpoint, headers, TLS, timeout and compression from OTEL_EXPORTER_OTLP_*; the
    // protocol variables are not consulted: this is the gRPC exporter.
    exporter = new OTLPTraceExporter();
  } catch (err) {
    log.warn({ err, endpoint }, `the OTLP endpoint is not usable; sending to the exporter's default, ${DEFAULT_ENDPOINT}`);
    exporter = new OTLPTraceExporter({ url: DEFAULT_ENDPOINT });
    endpoint = DEFAULT_ENDPOINT;
  }
  // The SDK's constructor would replace our diagnostic logger by a console one (plain text
  // among the JSON log lines) when OTEL_LOG_LEVEL is set; it does not see it, ours applies it.
  const logLevelVar = process.env.OTEL_LOG_LEVEL;
  delete process.env.OTEL_LOG_LEVEL;
  let sdk;
  try {
    sdk = new NodeSDK({
      traceExporter: exporter,
      serviceName: serviceName(),
      // Traces only: no metric readers or log exporters from OTEL_METRICS_/OTEL_LOGS_EXPORTER.
      metricReaders: [],
      logRecordProcessors: [],
      instrumentations: [],
    });
  } finally {
    if (logLevelVar !== undefined) process.env.OTEL_LOG_LEVEL = logLevelVar;
  }
  sdk.start();
  running = { shutdown: () => sdk.shutdown(), log };
  log.info({ endpoint }, `tracing is on: sending spans over OTLP/gRPC to ${endpoint}`);

  return tracingOver(api.trace.getTracer('kvs'));
}

/**
 * Tracing with `tracer`: the SDK's above, or the provider of a program that embeds a node
 * (embed/open.ts). The storage hop always carries W3C trace context (its proto field is a
 * traceparent), whatever OTEL_PROPAGATORS chooses for clients.
 */
export async function tracingOver(tracer: Tracer): Promise<Tracing> {
  const [api, core] = await Promise.all([import('@opentelemetry/api'), import('@opentelemetry/core')]);
  const w3c = new core.W3CTraceContextPropagator();
  return {
    tracer,
    traceParent(span) {
      if (!span.isRecording()) return undefined;
      const carrier: { traceparent?: string } = {};
      w3c.inject(api.trace.setSpan(api.ROOT_CONTEXT, span), carrier, api.defaultTextMapSetter);
      return carrier.traceparent;
    },
    fromTraceParent(traceParent) {
      return w3c.extract(api.ROOT_CONTEXT, { traceparent: traceParent }, api.defaultTextMapGetter);
    },
  };
}

/** Flushes and stops the SDK, if tracing is on (a component's graceful stop). */
export async function stopTracing(): Promise<void> {
  const sdk = running;
  if (!sdk) return;
  running = undefined;
  let timer: NodeJS.Timeout | undefined;
  const waited = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), SHUTDOWN_WAIT_MS)));
  try {
    const how = await Promise.race([sdk.shutdown(), waited]);
    if (how === 'timeout') sdk.log.warn(`tracing: spans not exported within ${SHUTDOWN_WAIT_MS} ms of stopping are dropped`);
  } catch (err) {
    sdk.log.warn({ err }, 'tracing: exporting the last spans failed');
  } finally {
    clearTimeout(timer);
  }
}

function serviceName(): string | undefined {
  const named = process.env.OTEL_SERVICE_NAME?.trim();
  if (named) return named;
  // Left to the SDK, which reads OTEL_RESOURCE_ATTRIBUTES.
  if (/(^|,)\s*service\.name\s*=/.test(process.env.OTEL_RESOURCE_ATTRIBUTES ?? '')) return undefined;
  return DEFAULT_SERVICE_NAME;
}

function diagToLog(log: Logger): DiagLogger {
  const fields = (args: unknown[]) => (args.length ? { details: args.map((a) => (a instanceof Error ? a.message : String(a))) } : {});
  // Errors too are warnings here: tracing failing (a collector away) does not fail kvs.
  const warn = (msg: string, ...args: unknown[]) => log.warn(fields(args), `opentelemetry: ${msg}`);
  return {
    error: warn,
    warn,
    info: (msg, ...args) => log.info(fields(args), `opentelemetry: ${msg}`),
    debug: (msg, ...args) => log.debug(fields(args), `opentelemetry: ${msg}`),
    verbose: (msg, ...args) => log.trace(fields(args), `opentelemetry: ${msg}`),
  };
}
