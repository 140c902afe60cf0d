// The Storage service on <data-dir>/run/storage.sock: a long-lived bidi stream of write
// batches (one message per caller event-loop turn), answered per group-commit drain, and a
// second stream of the same shape for lease keep-alives and queries, which never write.
import { service } from '../../shared/proto/index.js';
import { serveBatchStream, type BatchHandler, type BatchRequest } from '../../shared/batch-link/serve.js';
import { GrpcServer, type ServerCall, type UnaryCallback } from '../../shared/grpc/server.js';
import type { Engine } from './engine.js';
import { subscribeFeed } from './feed.js';
import type { Logger } from '../../shared/log.js';
import { dbSizes } from '../../shared/mvcc/tables.js';
import { Stage, stages } from '../../shared/stages.js';

interface WriteBatch { requests: BatchRequest[] }

export interface StorageServer {
  server: GrpcServer;
  /** Ends every write stream (callers reconnect to the next storage process). */
  endStreams(): void;
}

export function storageServer(engine: Engine, log: Logger): StorageServer {
  // Our own gRPC server on node:http2 (as the client port's), not grpc-js's: a message on this
  // hop costs about half the CPU and latency (`npm run hop`, docs/perf/hop-costs.md). Its callers
  // (the gateway's and the peer agent's write links, the gateway's feed) are our own as well
  // (shared/grpc/stream-channel.ts); any gRPC client can call it.
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  const streams = new Set<ServerCall<any, any>>();
  // Stage tracing: the answers of a Write message leave in the turn after their batch was
  // applied (nothing applies in between), so the applied index names the batch they answer.
  const trace = stages;
  const answersSent = trace && (() => trace.stamp(Stage.STORAGE_ANSWER_SENT, engine.appliedIndex));
  const serveBatches = (call: ServerCall<WriteBatch, any>, handle: BatchHandler, onFlush?: () => void) => {
    streams.add(call);
    call.on('close', () => streams.delete(call));
    serveBatchStream(call, handle, (err) => log.debug({ err }, 'storage stream closed'), onFlush);
  };
  server.addService(service('kvs.storage.Storage'), {
    Write(call: ServerCall<WriteBatch, any>) {
      serveBatches(call, (op, body, done, authRevision, traceParent) => engine.submit(op, body, done, authRevision, traceParent), answersSent);
    },
    Lease(call: ServerCall<WriteBatch, any>) {
      serveBatches(call, (op, body, done) => engine.lessor.call(op, body, done));
    },
    Feed(call: ServerCall<{ quiet?: boolean }, any>) {
      streams.add(call);
      const sub = subscribeFeed(engine, call);
      call.on('drain', () => sub.drained());
      call.on('data', (req: { quiet?: boolean }) => sub.setQuiet(req.quiet === true));
      const done = () => {
        sub.close();
        streams.delete(call);
      };
      call.on('cancelled', done);
      call.on('close', done);
      call.on('error', (err) => log.debug({ err }, 'feed stream closed'));
    },
    Status(_call: ServerCall<unknown, unknown>, cb: UnaryCallback<unknown>) {
      // LMDB's high-water mark: with a writable memory map the file's length is the map size.
      const { dbSize } = dbSizes(engine.db);
      cb(null, {
        revision: engine.revision,
        compactRevision: engine.executor.compactRevision,
        clusterId: engine.identity.clusterId,
        memberId: engine.identity.memberId,
        raftTerm: engine.identity.raftTerm,
        dbSize,
      });
    },
  });
  return {
    server,
    endStreams() {
      for (const call of streams) call.end();
      streams.clear();
    },
  };
}
