// Tracing end to end: a real `kvs run` exporting over OTLP/gRPC to a receiver in this test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { client, localObjectStore, onCleanup, pollUntil, startKvs, type Ctx, type KvsNode } from '../testkit/harness.js';
import { startOtlpReceiver, type ExportedSpan, type OtlpReceiver } from './otlp-receiver.js';
import { num, service } from '../shared/proto/index.js';

const WRITE_SPANS = ['kvs.put', 'kvs.create', 'kvs.update', 'kvs.delete', 'kvs.delete_if_revision', 'kvs.txn', 'kvs.compact'];
const READ_SPANS = ['kvs.get', 'kvs.exists', 'kvs.list', 'kvs.count'];
const SPAN_NAMES = new Set([...WRITE_SPANS, ...READ_SPANS, 'kvs.wal.append']);
const EQUAL = 0;
const MOD = 2;
const SPAN_KIND_SERVER = 2;
const STATUS_ERROR = 2;

/** A client's own span, sent as W3C traceparent metadata. */
function clientSpan(): { traceId: string; spanId: string; metadata: grpc.Metadata } {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  const metadata = new grpc.Metadata();
  metadata.set('traceparent', `00-${traceId}-${spanId}-01`);
  return { traceId, spanId, metadata };
}

type Unary = (req: object, metadata: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: any) => void) => void;
type RawClient = grpc.Client & Record<string, Unary>;

/** A plain grpc-js client of an etcd service, which can send any metadata. */
function rawClient(t: Ctx, endpoint: string, name: string): (method: string, req: object, metadata?: grpc.Metadata) => Promise<any> {
  const Ctor = grpc.makeGenericClientConstructor(service(name), name);
  const c = new Ctor(endpoint, grpc.credentials.createInsecure()) as unknown as RawClient;
  onCleanup(t, () => c.close());
  return (method, req, metadata = new grpc.Metadata()) =>
    new Promise((resolve, reject) => c[method]!.call(c, req, metadata, (err, res) => (err ? reject(err) : resolve(res))));
}

function tracingEnv(receiver: OtlpReceiver, extra: Record<string, string> = {}): Record<string, string> {
  // Exported promptly (the default batch delay is 5 s).
  return { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_BSP_SCHEDULE_DELAY: '20', ...extra };
}

/** Both components logged that tracing is on, naming the endpoint. */
async function tracingClaims(node: KvsNode, endpoint: string): Promise<void> {
  await pollUntil('both components to log that tracing is on', async () => {
    const lines = node.output().split('\n').filter((l) => l.includes('tracing is on') && l.includes(endpoint));
    const components = new Set(lines.map((l) => (JSON.parse(l) as { component: string }).component));
    return components.has('gateway') && components.has('storage') ? true : undefined;
  }, 10_000);
}

const byTrace = (spans: ExportedSpan[], traceId: string) => spans.filter((s) => s.traceId === traceId);
/** The write span a client span caused, and the kvs.wal.append spans under it. */
function writeOf(spans: ExportedSpan[], c: { traceId: string; spanId: string }): { span?: ExportedSpan; wal: ExportedSpan[] } {
  const span = byTrace(spans, c.traceId).find((s) => s.parentSpanId === c.spanId);
  const wal = span ? byTrace(spans, c.traceId).filter((s) => s.name === 'kvs.wal.append' && s.parentSpanId === span.spanId) : [];
  return { span, wal };
}

test('writes and linearizable reads are traced across the gateway → storage hop, without keys', async (t) => {
  const receiver = await startOtlpReceiver(t);
  // The protocol variable is not consulted: OTLP/gRPC regardless.
  const node = await startKvs(t, { env: tracingEnv(receiver, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' }) });
  await tracingClaims(node, receiver.endpoint);
  const kv = rawClient(t, node.endpoint, 'etcdserverpb.KV');
  const lease = rawClient(t, node.endpoint, 'etcdserverpb.Lease');
  const etcd = client(t, node.endpoint);
  // Every key (and value) carries this token; it must appear nowhere in what is exported.
  const secret = `leaf-${randomBytes(6).toString('hex')}`;
  const key = (name: string) => Buffer.from(`/registry/pods/${secret}-${name}`);
  const value = Buffer.from(`value-${secret}`);

  // A write without client context: a root span, and its WAL append under it.
  await etcd.put(key('root').toString()).value(value);
  const root = (await receiver.until('the root put and its WAL append', (spans) => {
    const put = spans.find((s) => s.name === 'kvs.put' && s.parentSpanId === '');
    return !!put && spans.some((s) => s.name === 'kvs.wal.append' && s.parentSpanId === put.spanId);
  })).find((s) => s.name === 'kvs.put' && s.parentSpanId === '')!;
  assert.equal(root.kind, SPAN_KIND_SERVER);
  assert.equal(root.attributes['kvs.key_scope'], '/registry/pods');
  assert.equal(root.attributes['rpc.grpc.status_code'], 0);
  assert.equal(root.service, 'kvs');
  const rootWal = receiver.spans.find((s) => s.name === 'kvs.wal.append' && s.parentSpanId === root.spanId)!;
  assert.equal(rootWal.traceId, root.traceId, 'the WAL append is in the write trace');
  assert.equal(rootWal.attributes['kvs.batch_size'], 1);
  assert.equal(rootWal.service, 'kvs');

  // Writes with the client's traceparent, several at once (one group commit may take them all):
  // each write span is the child of its client span, and has its own WAL append child.
  const puts = Array.from({ length: 6 }, () => clientSpan());
  const first = await Promise.all(puts.map((c, i) => kv('Put', { key: key(`p${i}`), value }, c.metadata)));
  const created = clientSpan();
  await kv('Txn', { compare: [{ result: EQUAL, target: MOD, key: key('c'), modRevision: 0 }], success: [{ requestPut: { key: key('c'), value } }] }, created.metadata);
  const updated = clientSpan();
  const rev = num(first[0].header.revision);
  await kv('Txn', { compare: [{ result: EQUAL, target: MOD, key: key('p0'), modRevision: rev }], success: [{ requestPut: { key: key('p0'), value } }], failure: [{ requestRange: { key: key('p0') } }] }, updated.metadata);
  const guarded = clientSpan();
  const rev1 = num(first[1].header.revision);
  await kv('Txn', { compare: [{ result: EQUAL, target: MOD, key: key('p1'), modRevision: rev1 }], success: [{ requestDeleteRange: { key: key('p1') } }], failure: [{ requestRange: { key: key('p1') } }] }, guarded.metadata);
  const otherTxn = clientSpan();
  await kv('Txn', { success: [{ requestPut: { key: key('t1'), value } }, { requestPut: { key: key('t2'), value } }] }, otherTxn.metadata);
  const deleted = clientSpan();
  const del = await kv('DeleteRange', { key: key('p2') }, deleted.metadata);
  const compacted = clientSpan();
  await kv('Compact', { revision: num(del.header.revision) }, compacted.metadata);
  const failed = clientSpan();
  await assert.rejects(kv('Put', { key: key('leased'), value, lease: 424242 }, failed.metadata), (err: grpc.ServiceError) => err.code === grpc.status.NOT_FOUND);

  const writes: [string, ReturnType<typeof clientSpan>][] = [
    ...puts.map((c) => ['kvs.put', c] as [string, typeof c]),
    ['kvs.create', created],
    ['kvs.update', updated],
    ['kvs.delete_if_revision', guarded],
    ['kvs.txn', otherTxn],
    ['kvs.delete', deleted],
    ['kvs.compact', compacted],
  ];
  const spans = await receiver.until('every write span with its WAL append', (all) =>
    writes.every(([, c]) => writeOf(all, c).wal.length > 0) && !!writeOf(all, failed).span,
  );
  for (const [name, c] of writes) {
    const { span, wal } = writeOf(spans, c);
    assert.equal(span!.name, name, `the write span of ${name}`);
    assert.equal(span!.traceId, c.traceId);
    assert.equal(span!.statusCode, 0, `${name} succeeded`);
    assert.equal(span!.attributes['kvs.key_scope'], name === 'kvs.compact' ? undefined : '/registry/pods', `kvs.key_scope of ${name}`);
    assert.equal(wal.length, 1, `${name} has one kvs.wal.append child`);
    const size = wal[0]!.attributes['kvs.batch_size'];
    assert.ok(typeof size === 'number' && size >= 1, `kvs.batch_size of ${name}: ${size}`);
  }
  const failedSpan = writeOf(spans, failed).span!;
  assert.equal(failedSpan.name, 'kvs.put');
  assert.equal(failedSpan.statusCode, STATUS_ERROR);
  assert.equal(failedSpan.attributes['rpc.grpc.status_code'], grpc.status.NOT_FOUND);

  // Reads: a span for linearizable ones only, named by their shape.
  const reads: [string | undefined, object][] = [
    ['kvs.get', { key: key('p0') }],
    ['kvs.exists', { key: key('p0'), keysOnly: true }],
    ['kvs.list', { key: key(''), rangeEnd: Buffer.from('/registry/pods0') }],
    ['kvs.count', { key: key(''), rangeEnd: Buffer.from('/registry/pods0'), countOnly: true }],
    [undefined, { key: key('p0'), serializable: true }],
  ];
  const readSpans: ReturnType<typeof clientSpan>[] = [];
  for (const [, req] of reads) {
    const c = clientSpan();
    readSpans.push(c);
    await kv('Range', req, c.metadata);
  }
  // No span for lease calls and watches either.
  const leaseCall = clientSpan();
  await lease('LeaseGrant', { TTL: 60 }, leaseCall.metadata);
  const watcher = await etcd.watch().key(key('w').toString()).create();
  const event = new Promise((resolve) => watcher.once('put', resolve));
  const last = clientSpan();
  await kv('Put', { key: key('w'), value }, last.metadata);
  await event;
  await watcher.cancel();
  // Spans are exported in the order they end: once the last write's are in, so are the reads'.
  const all = await receiver.until('the last write span with its WAL append', (s) => writeOf(s, last).wal.length > 0);
  reads.forEach(([name, req], i) => {
    const got = byTrace(all, readSpans[i]!.traceId);
    if (!name) return assert.deepEqual(got, [], `no span for ${JSON.stringify(req)}`);
    assert.equal(got.length, 1, `one span for ${name}`);
    assert.equal(got[0]!.name, name);
    assert.equal(got[0]!.parentSpanId, readSpans[i]!.spanId);
    assert.equal(got[0]!.attributes['kvs.key_scope'], '/registry/pods');
  });
  assert.deepEqual(byTrace(all, leaseCall.traceId), [], 'no span for a lease call');
  for (const s of all) assert.ok(SPAN_NAMES.has(s.name), `unexpected span ${s.name}`);

  // Keys (and values) never leave the process.
  const exported = Buffer.concat(receiver.requests);
  assert.ok(exported.length > 0);
  assert.equal(exported.indexOf(secret), -1, 'a key was exported');
});

test('spans still queued are exported at a graceful stop; bad OTEL_* values are warnings and the defaults', async (t) => {
  const receiver = await startOtlpReceiver(t);
  const node = await startKvs(t, {
    env: tracingEnv(receiver, { OTEL_BSP_SCHEDULE_DELAY: '600000', OTEL_TRACES_SAMPLER: 'no-such-sampler', OTEL_BSP_MAX_QUEUE_SIZE: 'lots', OTEL_SERVICE_NAME: 'kvs-under-test' }),
  });
  await tracingClaims(node, receiver.endpoint);
  const warnings = node.output().split('\n').filter((l) => l.includes('"level":40') && l.includes('opentelemetry: '));
  assert.ok(warnings.some((l) => l.includes('unknown OTEL_TRACES_SAMPLER value')), node.output());
  assert.ok(warnings.some((l) => l.includes('OTEL_BSP_MAX_QUEUE_SIZE')), node.output());
  const kv = rawClient(t, node.endpoint, 'etcdserverpb.KV');
  const c = clientSpan();
  await kv('Put', { key: Buffer.from('/a/b/c'), value: Buffer.from('v') }, c.metadata);
  assert.equal(receiver.requests.length, 0, 'nothing exported before the 10-minute batch delay');
  const exit = await node.stop();
  assert.equal(exit.code, 0, node.output().slice(-4000));
  const { span, wal } = writeOf(receiver.spans, c);
  assert.equal(span?.name, 'kvs.put', 'the write span was flushed at stop');
  assert.equal(span.service, 'kvs-under-test');
  assert.equal(span.attributes['kvs.key_scope'], '/a/b');
  assert.equal(wal.length, 1, 'the WAL span was flushed at stop');
  assert.equal(wal[0]!.service, 'kvs-under-test');
});

test('with an object store (sync upload) the WAL span is still the child of the write span', async (t) => {
  const receiver = await startOtlpReceiver(t);
  const node = await startKvs(t, { env: tracingEnv(receiver), objectStore: await localObjectStore(t) });
  const kv = rawClient(t, node.endpoint, 'etcdserverpb.KV');
  const c = clientSpan();
  await kv('Put', { key: Buffer.from('/a/b/uploaded'), value: Buffer.from('v') }, c.metadata);
  const spans = await receiver.until('the write span with its WAL append', (all) => writeOf(all, c).wal.length > 0);
  const { span, wal } = writeOf(spans, c);
  assert.equal(span!.name, 'kvs.put');
  assert.equal(wal.length, 1);
  assert.equal(wal[0]!.attributes['kvs.batch_size'], 1);
});

test('OTEL_TRACES_SAMPLER=always_off exports nothing', async (t) => {
  const receiver = await startOtlpReceiver(t);
  const node = await startKvs(t, { env: tracingEnv(receiver, { OTEL_TRACES_SAMPLER: 'always_off' }) });
  await tracingClaims(node, receiver.endpoint);
  const kv = rawClient(t, node.endpoint, 'etcdserverpb.KV');
  await client(t, node.endpoint).put('/a/b/off').value('v');
  await kv('Put', { key: Buffer.from('/a/b/off2'), value: Buffer.from('v') }, clientSpan().metadata);
  await kv('Range', { key: Buffer.from('/a/b/off') });
  // A graceful stop flushes whatever was recorded: nothing.
  assert.equal((await node.stop()).code, 0);
  assert.equal(receiver.requests.length, 0);
});

test('without an endpoint there is no tracing, and no claim of it', async (t) => {
  // An empty endpoint is no endpoint (as for the exporter).
  const node = await startKvs(t, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: '', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '' } });
  const etcd = client(t, node.endpoint);
  await etcd.put('/a/b/k').value('v');
  assert.equal(await etcd.get('/a/b/k').string(), 'v');
  assert.equal((await node.stop()).code, 0);
  assert.doesNotMatch(node.output(), /tracing|opentelemetry/i);
});
