import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import net from 'node:net';
import path from 'node:path';
import { pino } from 'pino';
import { status, type MethodDefinition } from '@grpc/grpc-js';
import { service } from '../proto/index.js';
import { GrpcServer, type ServerCall } from './server.js';
import { serveBatchStream } from '../batch-link/serve.js';
import { STORAGE, storageLink } from '../batch-link/link.js';
import { CallError, DEFAULT_WINDOW, StreamChannel, UnixStreamChannel, type H2Stream } from './stream-channel.js';
import { MessageReader, frame } from './framing.js';
import { bindUnix } from './plumbing.js';
import { EtcdError } from '../errors.js';

const silent = pino({ level: 'silent' });

function socketPath(t: TestContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-h2-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 's.sock');
}

/** A Storage server whose Write stream answers each request with its own body (op 9: an error). */
async function echoStorage(socket: string): Promise<GrpcServer> {
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  server.addService(service('kvs.storage.Storage'), {
    Write(call: ServerCall<any, any>) {
      serveBatchStream(call, (op, body, done) => done(op === 9 ? { code: 9, message: 'refused' } : { body: Buffer.from(body), code: 0, message: '' }));
    },
  });
  await bindUnix(server, socket);
  return server;
}

/** A write link to `socket` on a channel of its own; both closed, and the server shut down, after the test. */
function writeLink(t: TestContext, socket: string, server: () => GrpcServer) {
  const channel = new UnixStreamChannel(socket);
  const link = storageLink(channel, silent, 'Write', 2000);
  t.after(async () => {
    link.close();
    channel.close();
    await server().shutdown(100);
  });
  return { channel, link };
}

test('MessageReader: whole messages, a prefix alone, a message across chunks, two in one chunk', () => {
  const got: string[] = [];
  const reader = new MessageReader(1 << 20, (m) => got.push(m.toString()), () => assert.fail('too large'));
  reader.push(frame(Buffer.from('one')));
  // A sender that writes the 5-byte prefix on its own (as writeMessage does for large messages):
  // the next chunk is that message, even when it looks like a whole message itself.
  const body = frame(Buffer.from('abc')); // 8 bytes: a valid frame of its own...
  const prefix = Buffer.from([0, 0, 0, 0, body.length]); // ...but here the body of a prefixed message
  reader.push(prefix);
  reader.push(body);
  const long = frame(Buffer.from('x'.repeat(1000)));
  reader.push(long.subarray(0, 3));
  reader.push(long.subarray(3, 700));
  reader.push(long.subarray(700));
  reader.push(Buffer.concat([frame(Buffer.from('a')), frame(Buffer.from('b'))]));
  assert.deepEqual(got, ['one', body.toString(), 'x'.repeat(1000), 'a', 'b']);
  let size = 0;
  new MessageReader(10, () => assert.fail('delivered'), (n) => (size = n)).push(frame(Buffer.alloc(11)));
  assert.equal(size, 11);
});

test('storage link on our HTTP/2 stream: small and large writes, errors, and a restarted server', async (t) => {
  const socket = socketPath(t);
  let server = await echoStorage(socket);
  const { link } = writeLink(t, socket, () => server);
  // Sizes around the point where a message's prefix is written apart from it (16 KiB), and 4 MiB.
  for (const n of [1, 16 * 1024 - 1, 16 * 1024, 16 * 1024 + 1, 4 << 20]) {
    const body = Buffer.alloc(n, n % 251);
    assert.ok((await link.call(1, body)).equals(body), `a ${n}-byte write comes back whole`);
  }
  // Many in one event-loop turn travel in one message and each gets its own answer.
  const many = await Promise.all(Array.from({ length: 200 }, (_, i) => link.call(1, Buffer.from(`w${i}`))));
  assert.deepEqual(many.map(String), Array.from({ length: 200 }, (_, i) => `w${i}`));
  await assert.rejects(link.call(9, Buffer.from('x')), (err: EtcdError) => err.code === 9 && err.message === 'refused');

  // The server goes away and comes back on the same socket: the link reconnects by itself. A
  // write the link sent before it saw the old connection go fails UNAVAILABLE (its outcome is
  // unknown, as for any client whose server went away); one retry, as clients do, gets through.
  await server.shutdown(100);
  server = await echoStorage(socket);
  let answer: Buffer | undefined;
  for (let attempt = 0; attempt < 3 && !answer; attempt++) {
    answer = await link.call(1, Buffer.from('after')).catch((err: EtcdError) => {
      assert.equal(err.code, 14);
      return undefined;
    });
  }
  assert.equal(String(answer), 'after');
});

test('a server-streaming call on our HTTP/2 stream: messages in order, then end; a cancel ends it as an error', async (t) => {
  const socket = socketPath(t);
  const server = new GrpcServer({ maxReceiveMessageLength: 1 << 20 });
  let cancelled: Promise<unknown> | undefined;
  server.addService(service('kvs.storage.Storage'), {
    Feed(call: ServerCall<any, any>) {
      for (let r = 1; r <= 3; r++) call.write({ revision: r, entries: [Buffer.alloc(20_000, r)] });
      // The second call stays open until its caller cancels it.
      if (cancelled) return call.end();
      cancelled = new Promise((resolve) => call.on('cancelled', resolve));
    },
  });
  await bindUnix(server, socket);
  const channel = new UnixStreamChannel(socket);
  t.after(async () => {
    channel.close();
    await server.shutdown(100);
  });
  const feed = STORAGE.Feed as MethodDefinition<object, { revision: unknown; entries: Uint8Array[] }>;
  const read = (call: H2Stream<object, { revision: unknown; entries: Uint8Array[] }>, n: number) =>
    new Promise<number[]>((resolve) => {
      const got: number[] = [];
      call.on('data', (m) => {
        assert.equal(m.entries[0]!.length, 20_000);
        if (got.push(Number(m.revision)) === n) resolve(got);
      });
    });

  const open = channel.stream(feed);
  open.write({});
  open.end();
  assert.deepEqual(await read(open, 3), [1, 2, 3]);
  const failed = once(open, 'error');
  open.cancel();
  await cancelled;
  assert.match(String((await failed)[0]), /Feed/);

  const ended = channel.stream(feed);
  ended.write({});
  ended.end();
  const done = once(ended, 'end');
  assert.deepEqual(await read(ended, 3), [1, 2, 3]);
  await done;
});

test('H2Stream.write calls back once the message left, and refuses a stream that has closed', async (t) => {
  const socket = socketPath(t);
  const server = await echoStorage(socket);
  const channel = new UnixStreamChannel(socket);
  t.after(async () => {
    channel.close();
    await server.shutdown(100);
  });
  const write = STORAGE.Write as MethodDefinition<object, { results: { body: Buffer }[] }>;
  const call = channel.stream(write);
  const answer = once(call, 'data');
  // A follower's storage sends its ACK this way and applies only after the callback.
  await new Promise<void>((resolve) => call.write({ requests: [{ id: 1, op: 1, body: Buffer.from('ack') }] }, resolve));
  assert.equal(String((await answer)[0].results[0]!.body), 'ack');
  const failed = once(call, 'error');
  call.cancel();
  await failed;
  let calledBack = false;
  assert.equal(call.write({ requests: [] }, () => (calledBack = true)), false);
  assert.equal(calledBack, false);
});

test('a write link and the feed on one connection: a feed message and the answers of the same turn leave in one socket write, as storage sends them', async (t) => {
  const socket = socketPath(t);
  const server = new GrpcServer({ maxReceiveMessageLength: 1 << 20 });
  let feedCall: ServerCall<any, any> | undefined;
  server.addService(service('kvs.storage.Storage'), {
    Feed(call: ServerCall<any, any>) {
      feedCall = call;
      call.write({ revision: 1, entries: [] });
    },
    // As storage's engine: the batch's feed message first, then its answers (shared/batch-link/serve.ts
    // sends those from a callback queued after).
    Write(call: ServerCall<any, any>) {
      let revision = 1;
      serveBatchStream(call, (_op, body, done) => {
        feedCall!.write({ revision: ++revision, entries: [Buffer.from(body)] });
        done({ body: Buffer.from(body), code: 0, message: '' });
      });
    },
  });
  await bindUnix(server, socket);
  const { channel, link } = writeLink(t, socket, () => server);
  const feed = channel.stream(STORAGE.Feed as MethodDefinition<object, { revision: unknown; entries: Uint8Array[] }>, DEFAULT_WINDOW);
  feed.on('error', () => {});
  const revisions: number[] = [];
  feed.on('data', (m) => revisions.push(Number(m.revision)));
  feed.write({});
  feed.end();
  assert.equal(String(await link.call(1, Buffer.from('first'))), 'first');

  // Writes of the server's sockets (an accepted socket has `server` set) while one write is served.
  const write = net.Socket.prototype.write;
  let serverWrites = 0;
  net.Socket.prototype.write = function (this: net.Socket, ...args: unknown[]) {
    if ((this as net.Socket & { server?: unknown }).server) serverWrites++;
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as typeof write;
  try {
    assert.equal(String(await link.call(1, Buffer.from('second'))), 'second');
  } finally {
    net.Socket.prototype.write = write;
  }
  assert.deepEqual(revisions, [1, 2, 3], 'the feed message came before the answer');
  assert.equal(serverWrites, 1, 'the feed message and the answer in one socket write');
});

test('StreamChannel: every call carries the channel\'s headers; a unary call is answered, and one left unanswered fails with DEADLINE_EXCEEDED', async (t) => {
  const socket = socketPath(t);
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  const seen: unknown[] = [];
  server.addService(service('kvs.peer.Peer'), {
    GetRevision(call: ServerCall<unknown, unknown>, cb: (err: null, r: unknown) => void) {
      seen.push(call.metadata.get('kvs-leader-epoch')[0]);
      if (seen.length === 1) cb(null, { index: 7, revision: 5, term: 2 }); // the second: never answered
    },
  });
  await bindUnix(server, socket);
  const channel = new StreamChannel(() => net.connect(socket), { headers: { 'kvs-leader-epoch': 'e1' } });
  t.after(async () => {
    channel.close();
    await server.shutdown(100);
  });
  const method = service('kvs.peer.Peer').GetRevision as MethodDefinition<object, { index: unknown; revision: unknown; term: unknown }>;
  const r = await channel.unary(method, {}, 2000);
  assert.deepEqual([Number(r.index), Number(r.revision), Number(r.term)], [7, 5, 2]);
  const started = performance.now();
  const err = await channel.unary(method, {}, 300).then(() => undefined, (e: CallError) => e);
  assert.ok(err instanceof CallError, 'the unanswered call failed');
  assert.equal(err.code, status.DEADLINE_EXCEEDED);
  assert.ok(performance.now() - started >= 290, 'not before its deadline');
  assert.deepEqual(seen, ['e1', 'e1']);
});

test('StreamChannel keepalive: a connection whose far end stops answering is closed, and its calls fail with UNAVAILABLE', async (t) => {
  // A far end that accepts and then says nothing (a host gone, a partition): TCP keeps the
  // connection open, so only the PING tells.
  const sockets: net.Socket[] = [];
  const silentServer = net.createServer((s) => sockets.push(s));
  await new Promise<void>((resolve) => silentServer.listen(0, '127.0.0.1', resolve));
  const port = (silentServer.address() as net.AddressInfo).port;
  const dial = () => net.connect({ host: '127.0.0.1', port });
  const probed = new StreamChannel(dial, { keepalive: { idleMs: 200, timeoutMs: 200 } });
  const unprobed = new StreamChannel(dial);
  t.after(() => {
    probed.close();
    unprobed.close();
    for (const s of sockets) s.destroy();
    silentServer.close();
  });
  const method = service('kvs.peer.Peer').Follow as MethodDefinition<object, object>;
  const call = probed.stream(method);
  const other = unprobed.stream(method);
  let otherFailed = false;
  other.on('error', () => (otherFailed = true));
  const [err] = (await once(call, 'error', { signal: AbortSignal.timeout(10_000) })) as [CallError];
  assert.equal(err.code, status.UNAVAILABLE);
  assert.equal(otherFailed, false, 'a channel without keepalive still waits: the PING closed it');
});
