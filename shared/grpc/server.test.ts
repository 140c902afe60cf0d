import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { createRequire } from 'node:module';
import * as grpc from '@grpc/grpc-js';
import { service } from '../proto/index.js';
import { GrpcServer, ServerCall, encodeGrpcMessage, parseTimeout, type UnaryCallback } from './server.js';

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

// ---------------------------------------------------------------- a client's GOAWAY, frame by frame

// hpack.js (a dependency, see authority.ts): the client's side of the HPACK tables.
const hpack = createRequire(import.meta.url)('hpack.js') as {
  compressor: { create(o: { table: { size: number } }): { write(f: { name: string; value: string }[]): void; read(): Buffer | null } };
  decompressor: { create(o: { table: { size: number } }): { write(b: Buffer): void; execute(): void; read(): { name: string; value: string } | null } };
};

function h2frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const [DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY] = [0x0, 0x1, 0x3, 0x4, 0x7];
const [END_STREAM, END_HEADERS, ACK] = [0x1, 0x4, 0x1];

function goawayFrame(code: number): Buffer {
  const p = Buffer.alloc(8);
  p.writeUInt32BE(0, 0); // last-stream-id: the client accepts no stream of the server's (there are none)
  p.writeUInt32BE(code, 4);
  return h2frame(GOAWAY, 0, 0, p);
}

/** The HEADERS frame of a gRPC call to `path` on `stream` (no END_STREAM). */
function requestHeaders(enc: ReturnType<typeof hpack.compressor.create>, stream: number, path: string, contentType = 'application/grpc'): Buffer {
  enc.write([
    { name: ':method', value: 'POST' },
    { name: ':scheme', value: 'http' },
    { name: ':path', value: path },
    { name: ':authority', value: '127.0.0.1' },
    { name: 'content-type', value: contentType },
    { name: 'te', value: 'trailers' },
  ]);
  const block: Buffer[] = [];
  for (let c = enc.read(); c; c = enc.read()) block.push(c);
  return h2frame(HEADERS, END_HEADERS, stream, Buffer.concat(block));
}

/** A Range request on `stream` (HEADERS, then its one message with END_STREAM). */
function rangeRequest(enc: ReturnType<typeof hpack.compressor.create>, stream: number): Buffer {
  const msg = Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x01, 0x6b]); // RangeRequest{key: "k"}
  return Buffer.concat([requestHeaders(enc, stream, '/etcdserverpb.KV/Range'), h2frame(DATA, END_STREAM, stream, msg)]);
}

/** A raw HTTP/2 client connection: what the server sent, frame by frame, headers decoded. */
async function rawClient(t: TestContext, port: number) {
  const socket = net.connect(port, '127.0.0.1');
  t.after(() => socket.destroy());
  await once(socket, 'connect');
  const dec = hpack.decompressor.create({ table: { size: 4096 } });
  const frames: { type: number; flags: number; stream: number; headers?: Record<string, string>; code?: number; last?: number }[] = [];
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 9 && pending.length >= 9 + pending.readUIntBE(0, 3)) {
      const len = pending.readUIntBE(0, 3);
      const f = { type: pending[3]!, flags: pending[4]!, stream: pending.readUInt32BE(5) & 0x7fffffff, payload: pending.subarray(9, 9 + len) };
      pending = pending.subarray(9 + len);
      const out: (typeof frames)[number] = { type: f.type, flags: f.flags, stream: f.stream };
      if (f.type === HEADERS) {
        dec.write(f.payload);
        dec.execute();
        out.headers = {};
        for (let h = dec.read(); h; h = dec.read()) out.headers[h.name] = h.value;
      }
      if (f.type === RST_STREAM) out.code = f.payload.readUInt32BE(0);
      if (f.type === GOAWAY) [out.last, out.code] = [f.payload.readUInt32BE(0), f.payload.readUInt32BE(4)];
      if (f.type === SETTINGS && !(f.flags & ACK)) socket.write(h2frame(SETTINGS, ACK, 0));
      frames.push(out);
    }
  });
  return { socket, frames, enc: hpack.compressor.create({ table: { size: 4096 } }) };
}

/** A server whose KV.Range answers `answer` (by default count 7); resolves with its port. */
async function rangeServer(t: TestContext, answer: object = { count: 7 }): Promise<number> {
  const server = new GrpcServer({ maxReceiveMessageLength: 1024 });
  server.addService(service('etcdserverpb.KV'), { Range: (_call: ServerCall, cb: UnaryCallback<object>) => cb(null, answer) });
  const port = await server.listen('127.0.0.1:0');
  t.after(() => server.shutdown(100));
  return port;
}

test("requests that arrive with the client's GOAWAY are served, then the session closes", async (t) => {
  const port = await rangeServer(t);

  const c = await rawClient(t, port);
  // What node's http2 client (so grpc-js) sends for requests made in the same turn as
  // session.close(): its GOAWAY first (nghttp2 sends control frames before new streams),
  // then the requests' HEADERS and DATA, in one write.
  c.socket.write(Buffer.concat([PREFACE, h2frame(SETTINGS, 0, 0), goawayFrame(0), rangeRequest(c.enc, 1), rangeRequest(c.enc, 3)]));
  // Served: each stream's answer ends with grpc-status 0; nothing is refused. Then the server
  // closes the session (its GOAWAY names both streams as processed) and the connection.
  await once(c.socket, 'close');
  for (const stream of [1, 3]) {
    assert.deepEqual(
      c.frames.filter((f) => f.stream === stream).map((f) => [f.type, f.headers?.['grpc-status'] ?? f.code]),
      [
        [HEADERS, undefined],
        [DATA, undefined],
        [HEADERS, '0'],
      ],
      `stream ${stream}: ${JSON.stringify(c.frames)}`,
    );
  }
  const goaways = c.frames.filter((f) => f.type === GOAWAY);
  assert.ok(goaways.length > 0);
  for (const g of goaways) assert.deepEqual([g.code, g.last], [0, 3]);
});

test('a GOAWAY with an error code from the client ends the session at once, refusing what came with it', async (t) => {
  const server = new GrpcServer({ maxReceiveMessageLength: 1024 });
  server.addService(service('etcdserverpb.KV'), { Range: (_call: ServerCall, cb: UnaryCallback<object>) => cb(null, {}) });
  const port = await server.listen('127.0.0.1:0');
  t.after(() => server.shutdown(100));
  const c = await rawClient(t, port);
  c.socket.write(Buffer.concat([PREFACE, h2frame(SETTINGS, 0, 0), goawayFrame(2 /* INTERNAL_ERROR */), rangeRequest(c.enc, 1)]));
  await once(c.socket, 'close');
  assert.deepEqual(c.frames.filter((f) => f.stream === 1 && f.type === HEADERS), []);
});

test('streams the client resets in the same read as their HEADERS do not take the server down', async (t) => {
  // Found by the port fuzzer (chaos/fuzz) under node:http2: node emitted 'stream' a tick after
  // the read, by when the RST_STREAM that followed had destroyed the stream, and respond() on
  // it threw in the gateway (an uncaught exception: the process exited). Our session answers a
  // stream the router refuses as its HEADERS are read, before the reset behind them.
  const port = await rangeServer(t);
  const c = await rawClient(t, port);
  const headers = (stream: number, path: string, contentType?: string) => requestHeaders(c.enc, stream, path, contentType);
  const cancel = (stream: number) => h2frame(RST_STREAM, 0, stream, Buffer.from([0, 0, 0, 8]));
  c.socket.write(
    Buffer.concat([
      PREFACE,
      h2frame(SETTINGS, 0, 0),
      headers(1, '/etcdserverpb.KV/NoSuchMethod'), // refused by the router
      cancel(1),
      headers(3, '/etcdserverpb.KV/Range', 'text/plain'), // not gRPC: HTTP 415
      cancel(3),
      rangeRequest(c.enc, 5), // served
    ]),
  );
  while (!c.frames.some((f) => f.stream === 5 && f.headers?.['grpc-status'] !== undefined)) await once(c.socket, 'data');
  // At most their immediate answers (the refusal, the 415), each one HEADERS that ends the stream.
  for (const f of c.frames.filter((f) => f.stream === 1 || f.stream === 3)) {
    assert.ok(f.type === HEADERS ? f.flags & END_STREAM : f.type === RST_STREAM, JSON.stringify(f));
  }
  assert.equal(c.frames.find((f) => f.stream === 1 && f.type === HEADERS)?.headers?.['grpc-status'], String(grpc.status.UNIMPLEMENTED));
});

// ---------------------------------------------------------------- our HTTP/2 session, frame by frame

const [PING, WINDOW_UPDATE, CONTINUATION] = [0x6, 0x8, 0x9];
const PADDED = 0x8;

function u32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v);
  return b;
}

test('PINGs are answered with their payload; a request in HEADERS + CONTINUATION with padding and a URL authority is served', async (t) => {
  const port = await rangeServer(t);
  const c = await rawClient(t, port);
  const pings: Buffer[] = [];
  c.socket.on('data', (chunk: Buffer) => {
    const i = chunk.indexOf(Buffer.from([0, 0, 8, PING, 1]));
    if (i >= 0) pings.push(chunk.subarray(i + 9, i + 17));
  });
  c.enc.write([
    { name: ':method', value: 'POST' },
    { name: ':scheme', value: 'http' },
    { name: ':path', value: '/etcdserverpb.KV/Range' },
    { name: ':authority', value: 'http://127.0.0.1:2379' }, // etcdctl's URL endpoints
    { name: 'content-type', value: 'application/grpc' },
  ]);
  const block = Buffer.concat([...(function* () { for (let b = c.enc.read(); b; b = c.enc.read()) yield b; })()]);
  const cut = Math.floor(block.length / 2);
  const padded = Buffer.concat([Buffer.from([3]), block.subarray(0, cut), Buffer.alloc(3)]);
  const msg = Buffer.from([0, 0, 0, 0, 3, 0x0a, 0x01, 0x6b]);
  c.socket.write(
    Buffer.concat([
      PREFACE,
      h2frame(SETTINGS, 0, 0),
      h2frame(PING, 0, 0, Buffer.from('kvs-ping')),
      h2frame(HEADERS, PADDED, 1, padded),
      h2frame(CONTINUATION, END_HEADERS, 1, block.subarray(cut)),
      h2frame(DATA, END_STREAM, 1, msg),
    ]),
  );
  while (!c.frames.some((f) => f.stream === 1 && f.headers?.['grpc-status'] !== undefined)) await once(c.socket, 'data');
  assert.equal(c.frames.find((f) => f.stream === 1 && f.headers?.['grpc-status'])?.headers?.['grpc-status'], '0');
  assert.deepEqual(pings.map(String), ['kvs-ping']);
});

test("an answer larger than the client's window waits for its WINDOW_UPDATEs, then arrives whole", async (t) => {
  const value = { key: Buffer.from('k'), value: Buffer.alloc(100_000, 7), createRevision: 1, modRevision: 1, version: 1 };
  const port = await rangeServer(t, { kvs: [value], count: 1 });
  const c = await rawClient(t, port);
  const got: Buffer[] = [];
  let raw = Buffer.alloc(0);
  c.socket.on('data', (chunk: Buffer) => {
    raw = Buffer.concat([raw, chunk]);
    while (raw.length >= 9 && raw.length >= 9 + raw.readUIntBE(0, 3)) {
      const len = raw.readUIntBE(0, 3);
      if (raw[3] === DATA) got.push(raw.subarray(9, 9 + len));
      raw = raw.subarray(9 + len);
    }
  });
  const settings = Buffer.concat([Buffer.from([0, 4]), u32(1000)]); // INITIAL_WINDOW_SIZE 1,000
  c.socket.write(Buffer.concat([PREFACE, h2frame(SETTINGS, 0, 0, settings), rangeRequest(c.enc, 1)]));
  const received = () => got.reduce((n, b) => n + b.length, 0);
  while (received() < 1000) await once(c.socket, 'data');
  // The stream's window is spent: nothing more until the client opens it.
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(received(), 1000);
  assert.equal(c.frames.filter((f) => f.stream === 1 && f.headers?.['grpc-status'] !== undefined).length, 0);
  c.socket.write(h2frame(WINDOW_UPDATE, 0, 1, u32(200_000))); // the stream's window
  while (received() < 65_535) await once(c.socket, 'data'); // the connection's is spent too
  c.socket.write(h2frame(WINDOW_UPDATE, 0, 0, u32(200_000)));
  while (!c.frames.some((f) => f.stream === 1 && f.headers?.['grpc-status'] !== undefined)) await once(c.socket, 'data');
  const body = Buffer.concat(got);
  assert.equal(body.readUInt32BE(1), body.length - 5);
  assert.ok(body.length > 100_000);
});

test('a protocol error ends the connection with a GOAWAY naming it; so does a request of HTTP/1.1', async (t) => {
  const port = await rangeServer(t);
  const c = await rawClient(t, port);
  c.socket.write(Buffer.concat([PREFACE, h2frame(SETTINGS, 0, 0), h2frame(DATA, 0, 0, Buffer.from('x'))]));
  await once(c.socket, 'close');
  assert.deepEqual(c.frames.filter((f) => f.type === GOAWAY).map((f) => f.code), [1 /* PROTOCOL_ERROR */]);
  const h1 = await rawClient(t, port);
  h1.socket.write('GET / HTTP/1.1\r\nHost: kvs\r\n\r\n');
  await once(h1.socket, 'close');
  assert.deepEqual(h1.frames.map((f) => [f.type, f.code]), [[SETTINGS, undefined], [GOAWAY, 1]]);
});

test('with another HTTP beside it, a plaintext connection that never shows its protocol is closed; one that does is handed over', async (t) => {
  // Neither HTTP/2's idle probe nor the HTTP/1 server's bounds apply before the first bytes
  // decide: a connection that sent nothing, or only "P", was kept until the client left.
  const handed: net.Socket[] = [];
  const server = new GrpcServer({ maxReceiveMessageLength: 1024, otherHttp: { connection: (s) => void handed.push(s), stream: () => {}, sniffTimeoutMs: 300 } });
  const port = await server.listen('127.0.0.1:0');
  const clients: net.Socket[] = [];
  t.after(async () => {
    for (const s of [...handed, ...clients]) s.destroy();
    await server.shutdown(100);
  });
  const open = (bytes: string) => {
    const socket = net.connect(port, '127.0.0.1', () => bytes && socket.write(bytes));
    clients.push(socket);
    socket.on('error', () => {});
    const closed = new Promise<number>((resolve) => {
      const started = Date.now();
      socket.on('close', () => resolve(Date.now() - started));
    });
    return { socket, closed };
  };
  for (const bytes of ['', 'P', 'PO']) {
    const ms = await Promise.race([open(bytes).closed, new Promise<number>((r) => setTimeout(() => r(Infinity), 3000))]);
    assert.ok(ms < 3000, `a connection that sent ${JSON.stringify(bytes)} was not closed`);
  }
  const h1 = open('POST / HTTP/1.1\r\n');
  const h2 = open('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  h2.socket.on('data', () => {});
  await new Promise((r) => setTimeout(r, 800));
  assert.equal(handed.length, 1, 'the HTTP/1 connection went to the other side');
  assert.ok(!h1.socket.destroyed && !h2.socket.destroyed, 'decided connections are not cut by the sniffing timeout');
  h1.socket.destroy();
  h2.socket.destroy();
});
