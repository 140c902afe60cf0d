// The peer port's listener against broken HTTP/2 (found by the port fuzzer when the port ran on
// grpc-js, docs/reliability.md#port-fuzzing): a Peer server behind listenPeer, as
// services/peer/main.ts makes it, fed raw frames.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { service } from '../../shared/proto/index.js';
import type { Logger } from '../../shared/log.js';
import { Flag, FrameType, PREFACE, frame, grpcHeaders, grpcMessage, headerBlock, rstStream, settings } from '../../testkit/h2-frames.js';
import { http2Frames, rawExchange } from '../../testkit/raw-socket.js';
import { GrpcServer, IDLE_PROBE_MS, PROBE_TICK_MS, PROBE_TIMEOUT_MS, type UnaryCallback } from '../../shared/grpc/server.js';
import { listenPeer, peerCredentials } from './transport.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {} } as unknown as Logger;

/** A plaintext peer port whose Peer.GetRevision answers; resolves with its address. */
async function peerPort(t: TestContext): Promise<string> {
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  server.addService(service('kvs.peer.Peer'), { GetRevision: (_call: unknown, cb: UnaryCallback<unknown>) => cb(null, {}) });
  const listener = await listenPeer(server, '127.0.0.1:0', peerCredentials({}, quiet), 'n1', quiet);
  t.after(() => {
    listener.close();
    void server.shutdown(0);
  });
  return `127.0.0.1:${listener.port}`;
}

/** The HEADERS of a call to `path` on `stream` (END_HEADERS, no END_STREAM). */
function headers(stream: number, path: string, contentType = 'application/grpc'): Buffer {
  const h = grpcHeaders(path, '127.0.0.1').map(([k, v]): [string, string] => [k, k === 'content-type' ? contentType : v]);
  return frame(FrameType.HEADERS, Flag.END_HEADERS, stream, headerBlock(h));
}

test('streams reset in the same read as their HEADERS do not throw in the peer process, and the next one is served', async (t) => {
  // Found on grpc-js's server: node emitted 'stream' a tick after it read the HEADERS, the
  // RST_STREAM read with them had destroyed the stream by then, and grpc-js called respond()
  // on it for a content type that is not gRPC and for a path it does not serve: an uncaught
  // exception, the peer process exited. Kept for the server the port runs on now.
  const thrown: Error[] = [];
  const onUncaught = (err: Error) => thrown.push(err);
  process.on('uncaughtException', onUncaught);
  t.after(() => process.off('uncaughtException', onUncaught));
  const endpoint = await peerPort(t);
  const cancel = (stream: number) => rstStream(stream, 8 /* CANCEL */);
  const r = await rawExchange(
    endpoint,
    Buffer.concat([
      PREFACE,
      settings([]),
      headers(1, '/kvs.peer.Peer/NoSuch'), // UNIMPLEMENTED
      cancel(1),
      headers(3, '/kvs.peer.Peer/GetRevision', 'text/plain'), // HTTP 415
      cancel(3),
      headers(5, '/kvs.peer.Peer/GetRevision'), // served
      frame(FrameType.DATA, Flag.END_STREAM, 5, grpcMessage(Buffer.alloc(0))),
    ]),
    300,
  );
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(thrown.map((e) => e.message), []);
  const frames = http2Frames(r.received);
  // Ours answers each stream as its HEADERS are read, before the RST_STREAM behind them (its
  // status, then a reset of the half the client left open): frames on a stream its client is
  // resetting are allowed (RFC 9113 5.1, "closed").
  for (const f of frames.filter((f) => f.stream === 1 || f.stream === 3)) assert.ok(f.type === FrameType.HEADERS || f.type === FrameType.RST_STREAM, `frame type ${f.type}`);
  assert.ok(frames.some((f) => f.stream === 5 && f.type === FrameType.HEADERS && f.flags & Flag.END_STREAM), 'stream 5 was answered');
});

test('broken connections are closed: a protocol error at once, a preface never finished by the idle probe', async (t) => {
  // Found on grpc-js's server: node's http2 answered some protocol errors with GOAWAY and then
  // neither read nor closed the socket, and a connection that sent half a preface was not
  // closed either. Ours closes the first after its GOAWAY, and PINGs the second, which does
  // not answer, until it destroys it (shared/grpc/server.ts, the idle probe).
  const endpoint = await peerPort(t);
  const keepalive = IDLE_PROBE_MS + PROBE_TIMEOUT_MS + 2 * PROBE_TICK_MS;
  const cases = {
    'CONTINUATION without HEADERS': Buffer.concat([PREFACE, settings([]), frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, headerBlock([['x', 'y']]))]),
    'half a preface': PREFACE.subarray(0, 10),
  };
  await Promise.all(
    Object.entries(cases).map(async ([name, bytes]) => {
      const started = performance.now();
      // The client never half-closes: the server has to close on its own.
      const r = await rawExchange(endpoint, bytes, false, keepalive + 3000);
      assert.ok(r.closed, `${name}: left open`);
      assert.ok(performance.now() - started < keepalive + 2000, `${name}: closed after ${performance.now() - started} ms`);
    }),
  );
});
