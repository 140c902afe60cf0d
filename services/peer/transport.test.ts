// The peer port's listener against broken HTTP/2 (found by the port fuzzer, docs/reliability.md
// "Port fuzzing"): a Peer server behind listenPeer, as services/peer/main.ts makes it, fed raw
// frames.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { service } from '../../shared/proto/index.js';
import type { Logger } from '../../shared/log.js';
import { Flag, FrameType, PREFACE, frame, grpcHeaders, grpcMessage, headerBlock, rstStream, settings } from '../../chaos/fuzz/h2-frames.js';
import { http2Frames, rawExchange } from '../../chaos/fuzz/raw-socket.js';
import { PEER_SERVER_OPTIONS, listenPeer, peerCredentials } from './transport.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {} } as unknown as Logger;

/** A plaintext peer port whose Peer.GetRevision answers; resolves with its address. */
async function peerPort(t: TestContext): Promise<string> {
  const server = new grpc.Server(PEER_SERVER_OPTIONS);
  server.addService(service('kvs.peer.Peer'), { GetRevision: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}) });
  const listener = await listenPeer(server, '127.0.0.1:0', peerCredentials({}, quiet), 'n1', quiet);
  t.after(() => {
    listener.close();
    server.forceShutdown();
  });
  return `127.0.0.1:${listener.port}`;
}

/** The HEADERS of a call to `path` on `stream` (END_HEADERS, no END_STREAM). */
function headers(stream: number, path: string, contentType = 'application/grpc'): Buffer {
  const h = grpcHeaders(path, '127.0.0.1').map(([k, v]): [string, string] => [k, k === 'content-type' ? contentType : v]);
  return frame(FrameType.HEADERS, Flag.END_HEADERS, stream, headerBlock(h));
}

test('streams reset in the same read as their HEADERS get no answer, and the peer process does not throw', async (t) => {
  // Node emits 'stream' a tick after it read the HEADERS; the RST_STREAM read with them has
  // destroyed the stream by then, and grpc-js's server called respond() on it for a content
  // type that is not gRPC and for a path it does not serve: an uncaught exception, the peer
  // process exited (grpc-server-guards.ts).
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
      headers(1, '/kvs.peer.Peer/NoSuch'), // _respondWithError: UNIMPLEMENTED
      cancel(1),
      headers(3, '/kvs.peer.Peer/GetRevision', 'text/plain'), // _verifyContentType: HTTP 415
      cancel(3),
      headers(5, '/kvs.peer.Peer/GetRevision'), // served
      frame(FrameType.DATA, Flag.END_STREAM, 5, grpcMessage(Buffer.alloc(0))),
    ]),
    300,
  );
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(thrown.map((e) => e.message), []);
  const frames = http2Frames(r.received);
  assert.deepEqual(frames.filter((f) => f.stream === 1 || f.stream === 3), []);
  assert.ok(frames.some((f) => f.stream === 5 && f.type === FrameType.HEADERS && f.flags & Flag.END_STREAM), 'stream 5 was answered');
});

test('connections node:http2 stops reading are closed: after its error GOAWAY, and a preface never finished', async (t) => {
  // Node's http2 answers some protocol errors with GOAWAY and then neither reads nor closes
  // the socket; a connection that sends half a preface is not closed either. The Peer server's
  // keepalive PING goes unanswered on both, and it destroys them (PEER_SERVER_OPTIONS).
  const endpoint = await peerPort(t);
  const keepalive = Number(PEER_SERVER_OPTIONS['grpc.keepalive_time_ms']) + Number(PEER_SERVER_OPTIONS['grpc.keepalive_timeout_ms']);
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
