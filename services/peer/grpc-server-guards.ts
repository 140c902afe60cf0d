// Guards around grpc-js's server (1.14) for the peer port, against input the port fuzzer found
// it mishandles (docs/reliability.md, "Port fuzzing"). They depend on grpc-js internals, as
// transport.ts's `_createSecureConnector` does: the names are checked when a guard is installed,
// so a grpc-js upgrade that renames them fails at start (and in the tests), not silently.
import type http2 from 'node:http2';
import type * as grpc from '@grpc/grpc-js';

/** The grpc-js Server methods a stream's first handling goes through (server.js, 1.14). */
interface StreamEntry {
  _verifyContentType(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): boolean;
  _respondWithError(err: unknown, stream: http2.ServerHttp2Stream, channelzSessionInfo?: unknown): void;
}

/**
 * A stream reset by the client in the same read as its HEADERS is already destroyed when node
 * emits 'stream' (a tick after it read the HEADERS). grpc-js's stream handler then calls
 * `stream.respond()` on it, for a content type that is not gRPC (`_verifyContentType`) or a
 * path it has no handler for (`_respondWithError`), and `respond()` throws
 * ERR_HTTP2_INVALID_STREAM out of the 'stream' event: the peer process exits. kvs's own server
 * has the same check (shared/grpc/http2-server.ts, onStream).
 *
 * The two methods are shadowed on this Server instance (grpc-js's handler calls them through
 * `this`): for a destroyed or closed stream they answer nothing, which is all such a stream is
 * owed; `_verifyContentType` returning false makes the handler stop there. Any other stream
 * goes through grpc-js's own methods unchanged. A handled path on a destroyed stream is not
 * affected: grpc-js's call objects check the stream before writing.
 */
export function guardEarlyResetStreams(server: grpc.Server): void {
  const s = server as unknown as StreamEntry;
  const verify = internal(s, '_verifyContentType');
  const respondWithError = internal(s, '_respondWithError');
  const gone = (stream: http2.ServerHttp2Stream) => stream.destroyed || stream.closed;
  s._verifyContentType = (stream, headers) => !gone(stream) && verify.call(s, stream, headers);
  s._respondWithError = (err, stream, info) => {
    if (!gone(stream)) respondWithError.call(s, err, stream, info);
  };
}

/** A grpc-js Server method by name, or an error naming what this guard needs. */
function internal<K extends keyof StreamEntry>(s: StreamEntry, name: K): StreamEntry[K] {
  const fn = s[name];
  if (typeof fn !== 'function') throw new Error(`@grpc/grpc-js: Server.${name} is gone; services/peer/grpc-server-guards.ts needs updating for this version`);
  return fn;
}
