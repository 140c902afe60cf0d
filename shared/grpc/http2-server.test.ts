import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import * as grpc from '@grpc/grpc-js';
import { service } from '../proto/index.js';
import { GrpcServer, ServerCall, encodeGrpcMessage, parseTimeout, type UnaryCallback } from './http2-server.js';

const KV = grpc.makeGenericClientConstructor(service('etcdserverpb.KV'), 'KV');
const Watch = grpc.makeGenericClientConstructor(service('etcdserverpb.Watch'), 'Watch');
type AnyClient = grpc.Client & Record<string, any>;

async function serve(t: TestContext, impls: Record<string, Record<string, unknown>>, max = 1024): Promise<string> {
  const server = new GrpcServer({ maxReceiveMessageLength: max });
  for (const [name, impl] of Object.entries(impls)) server.addService(service(name), impl);
  const port = await server.listen('127.0.0.1:0');
  t.after(() => server.shutdown(100));
  return `127.0.0.1:${port}`;
}

function connect(t: TestContext, Ctor: grpc.ServiceClientConstructor, addr: string, opts: grpc.ChannelOptions = {}): AnyClient {
  const c = new Ctor(addr, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1, ...opts }) as AnyClient;
  t.after(() => c.close());
  return c;
}

function unary(c: AnyClient, method: string, req: object, opts: grpc.CallOptions = {}): Promise<{ err: grpc.ServiceError | null; res: any }> {
  return new Promise((resolve) => c[method](req, opts, (err: grpc.ServiceError | null, res: any) => resolve({ err, res })));
}

test('grpc-timeout and grpc-message encodings', () => {
  assert.equal(parseTimeout('150m'), 150);
  assert.equal(parseTimeout('2S'), 2000);
  assert.equal(parseTimeout('1H'), 3_600_000);
  assert.equal(parseTimeout('500u'), 0.5);
  assert.equal(parseTimeout('123456789S'), undefined, 'at most 8 digits');
  assert.equal(parseTimeout('10x'), undefined);
  assert.equal(parseTimeout(undefined), undefined);
  assert.equal(encodeGrpcMessage('etcdserver: key not found'), 'etcdserver: key not found');
  assert.equal(encodeGrpcMessage('100% café\n'), '100%25 caf%C3%A9%0A');
});

test('unary calls: answers, error statuses (percent-encoded details), thrown handlers, unknown methods, oversize requests', async (t) => {
  const addr = await serve(t, {
    'etcdserverpb.KV': {
      Range(call: ServerCall<{ key: Uint8Array }>, cb: UnaryCallback<object>) {
        const key = Buffer.from(call.request.key).toString();
        if (key === 'fail') return cb({ code: grpc.status.FAILED_PRECONDITION, details: 'nope: 100% café' });
        if (key === 'throw') throw new Error('boom');
        cb(null, { count: 7, kvs: [{ key: call.request.key, value: Buffer.from(String(call.metadata.get('x-tag')[0] ?? '')) }] });
      },
    },
  });
  const c = connect(t, KV, addr);
  const md = new grpc.Metadata();
  md.set('x-tag', 'from-metadata');
  const ok = await new Promise<any>((resolve, reject) => c.Range({ key: Buffer.from('k') }, md, (err: Error | null, res: unknown) => (err ? reject(err) : resolve(res))));
  assert.equal(Number(ok.count), 7);
  assert.equal(Buffer.from(ok.kvs[0].value).toString(), 'from-metadata');

  const failed = await unary(c, 'Range', { key: Buffer.from('fail') });
  assert.equal(failed.err?.code, grpc.status.FAILED_PRECONDITION);
  assert.equal(failed.err?.details, 'nope: 100% café');

  const thrown = await unary(c, 'Range', { key: Buffer.from('throw') });
  assert.deepEqual([thrown.err?.code, thrown.err?.details], [grpc.status.UNKNOWN, 'kvs: boom']);

  const missing = await unary(c, 'Put', { key: Buffer.from('k') });
  assert.deepEqual([missing.err?.code, missing.err?.details], [grpc.status.UNIMPLEMENTED, 'unknown method Put for service etcdserverpb.KV']);

  const big = await unary(c, 'Range', { key: Buffer.alloc(2000) });
  assert.equal(big.err?.code, grpc.status.RESOURCE_EXHAUSTED);
  assert.equal(big.err?.details, 'grpc: received message larger than max (2003 vs. 1024)');

  // The server goes on.
  assert.equal((await unary(c, 'Range', { key: Buffer.from('k') })).err, null);
});

test('a gzip-compressed request is decompressed, and one that inflates past the limit is refused', async (t) => {
  const addr = await serve(t, {
    'etcdserverpb.KV': {
      Range(call: ServerCall<{ key: Uint8Array }>, cb: UnaryCallback<object>) {
        cb(null, { count: call.request.key.length });
      },
    },
  });
  const c = connect(t, KV, addr, { 'grpc.default_compression_algorithm': 2 /* gzip */ });
  const small = await unary(c, 'Range', { key: Buffer.alloc(900, 0x61) });
  assert.equal(small.err, null);
  assert.equal(Number(small.res.count), 900);
  // ~5 KB of one byte compresses to a few dozen bytes; inflated it is over the 1 KiB limit.
  const bomb = await unary(c, 'Range', { key: Buffer.alloc(5000, 0x61) });
  assert.equal(bomb.err?.code, grpc.status.RESOURCE_EXHAUSTED, bomb.err?.details);
});

test("a call's deadline ends it with DEADLINE_EXCEEDED and tells the handler it was cancelled", async (t) => {
  let cancelled!: () => void;
  const sawCancel = new Promise<void>((resolve) => (cancelled = resolve));
  const addr = await serve(t, {
    'etcdserverpb.KV': {
      Range(call: ServerCall) {
        call.on('cancelled', () => cancelled()); // and never answers
      },
    },
  });
  const c = connect(t, KV, addr);
  const r = await unary(c, 'Range', { key: Buffer.from('k') }, { deadline: Date.now() + 200 });
  assert.equal(r.err?.code, grpc.status.DEADLINE_EXCEEDED);
  await sawCancel;
  // A deadline beyond node's timer range (30 days) is not cut short: the call is still
  // running when the client gives up on it.
  const far = c.Range({ key: Buffer.from('k') }, { deadline: Date.now() + 30 * 24 * 3600 * 1000 }, () => {});
  const early = await Promise.race([once(far, 'status').then(() => 'ended'), new Promise((r) => setTimeout(r, 300, 'running'))]);
  far.cancel();
  assert.equal(early, 'running');
});

test('bidi streams: flow control with drain, half-close, an error status after messages, client cancel', async (t) => {
  const events: string[] = [];
  let closed!: () => void;
  const sawClose = new Promise<void>((resolve) => (closed = resolve));
  const addr = await serve(t, {
    'etcdserverpb.Watch': {
      Watch(call: ServerCall<{ createRequest?: { key: Uint8Array } }, object>) {
        let mode = '';
        call.on('cancelled', () => events.push(`${mode} cancelled`));
        call.on('close', () => {
          events.push(`${mode} close`);
          if (mode === 'idle') closed();
        });
        call.on('data', async (req) => {
          mode = Buffer.from(req.createRequest?.key ?? []).toString();
          if (mode === 'flood') {
            // 200 responses of 64 KiB: far beyond the HTTP/2 windows, so writes must wait for drain.
            let waited = 0;
            for (let i = 0; i < 200; i++) {
              const ok = call.write({ watchId: i, events: [{ kv: { key: Buffer.from('k'), value: Buffer.alloc(64 * 1024) } }] });
              if (!ok) {
                waited++;
                await once(call, 'drain');
              }
            }
            call.write({ watchId: 1000, cancelReason: `waited ${waited > 0}` });
          }
          if (mode === 'idle') call.write({ created: true });
          if (mode === 'fail') {
            call.write({ watchId: 1 });
            call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'going away' });
          }
        });
        // grpc-js's cancel() half-closes before its RST_STREAM: only the flood call ends on
        // the client's half-close; the idle one (as a Watch) lives until the client cancels.
        call.on('end', () => mode === 'flood' && call.end());
      },
    },
  });
  const c = connect(t, Watch, addr);

  const flood = c.Watch() as grpc.ClientDuplexStream<object, any>;
  const ids: number[] = [];
  let last: any;
  flood.on('data', (m: any) => {
    ids.push(Number(m.watchId));
    last = m;
  });
  flood.write({ createRequest: { key: Buffer.from('flood') } });
  while (ids.length < 201) await once(flood, 'data');
  assert.deepEqual(ids.slice(0, 200), [...Array(200).keys()]);
  assert.equal(last.cancelReason, 'waited true');
  flood.end();
  const status = (await once(flood, 'status')) as [grpc.StatusObject];
  assert.equal(status[0].code, grpc.status.OK);

  const failing = c.Watch() as grpc.ClientDuplexStream<object, any>;
  const got: number[] = [];
  failing.on('data', (m: any) => got.push(Number(m.watchId)));
  failing.write({ createRequest: { key: Buffer.from('fail') } });
  const [err] = (await once(failing, 'error')) as [grpc.ServiceError];
  assert.deepEqual([err.code, err.details, got], [grpc.status.UNAVAILABLE, 'going away', [1]]);

  const cancelling = c.Watch() as grpc.ClientDuplexStream<object, any>;
  cancelling.on('error', () => {});
  cancelling.write({ createRequest: { key: Buffer.from('idle') } });
  await once(cancelling, 'data');
  cancelling.cancel();
  await sawClose;
  assert.deepEqual(events.filter((e) => e.startsWith('idle')), ['idle cancelled', 'idle close']);
  assert.deepEqual(events.filter((e) => e.endsWith('cancelled')), ['idle cancelled'], 'calls that ended with a status were not cancelled');
});

test('shutdown lets an answered call finish and cuts a stream that never ends after the grace period', async (t) => {
  const server = new GrpcServer({ maxReceiveMessageLength: 1024 });
  // A stream that answers its first request and then never ends by itself.
  server.addService(service('etcdserverpb.Watch'), { Watch: (call: ServerCall) => call.on('data', () => call.write({ created: true })) });
  const port = await server.listen('127.0.0.1:0');
  const c = connect(t, Watch, `127.0.0.1:${port}`);
  const stream = c.Watch() as grpc.ClientDuplexStream<object, any>;
  stream.write({});
  const ended = once(stream, 'error');
  await once(stream, 'data');
  await server.shutdown(200);
  const [err] = (await ended) as [grpc.ServiceError];
  assert.notEqual(err.code, grpc.status.OK);
});

test('a handler that answers after its client went away does not take the server down', async (t) => {
  let answer!: () => void;
  const answered = new Promise<void>((resolve) => (answer = resolve));
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const addr = await serve(t, {
    'etcdserverpb.KV': {
      Range(call: ServerCall, cb: UnaryCallback<object>) {
        started();
        // Answers (OK, then an error) once the client's cancel has arrived.
        call.on('cancelled', () =>
          setImmediate(() => {
            cb(null, { count: 1 });
            cb({ code: grpc.status.INTERNAL, details: 'late' });
            answer();
          }),
        );
      },
      Put(_call: ServerCall, cb: UnaryCallback<object>) {
        cb(null, {});
      },
    },
  });
  const c = connect(t, KV, addr);
  const call = c.Range({ key: Buffer.from('k') }, () => {});
  await running;
  call.cancel();
  await answered;
  assert.equal((await unary(c, 'Put', { key: Buffer.from('k') })).err, null);
});
