import { test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { trace } from '@opentelemetry/api';
import { startTracing, tracingEndpoint } from './tracing.js';

test('the traces endpoint wins over the general one; blank is unset', () => {
  assert.equal(tracingEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4317', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:4317' }), 'http://b:4317');
  assert.equal(tracingEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4317', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: ' ' }), 'http://a:4317');
  assert.equal(tracingEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: '' }), undefined);
  assert.equal(tracingEndpoint({}), undefined);
});

test('without an endpoint no provider is created and nothing is logged', async () => {
  const saved = { a: process.env.OTEL_EXPORTER_OTLP_ENDPOINT, b: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT };
  delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  delete process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  try {
    const lines: string[] = [];
    const log = pino({ level: 'trace' }, { write: (l: string) => void lines.push(l) });
    assert.equal(await startTracing(log), undefined);
    assert.deepEqual(lines, []);
    // The API's global provider is still its no-op: spans are non-recording.
    assert.equal(trace.getTracer('t').startSpan('s').isRecording(), false);
  } finally {
    if (saved.a !== undefined) process.env.OTEL_EXPORTER_OTLP_ENDPOINT = saved.a;
    if (saved.b !== undefined) process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = saved.b;
  }
});
