// The serving side of a batch stream (kvs.storage.WriteBatch in, WriteResultBatch out):
// storage's Write and Lease streams, and in cluster mode the peer agent's Forward streams.
// Each request goes to `handle`; the answers ready in one event-loop turn go back in one
// message (a message on an open stream costs a few microseconds, a unary call hundreds).
import * as grpc from '@grpc/grpc-js';
import { num, type Long } from '../proto/index.js';

/** traceParent: decoded as '' when the caller sent none (tracing off). */
export interface BatchRequest { id: unknown; op: number; body: Uint8Array; authRevision?: number | Long; traceParent: string }
export interface BatchResult { body?: Buffer; code: number; message: string }
export type BatchHandler = (op: number, body: Uint8Array, done: (r: BatchResult) => void, authRevision: number, traceParent: string) => void;

/** A served bidi call: grpc-js's ServerDuplexStream (the peer agent) or our own ServerCall (storage). */
export interface BatchCall {
  sendMetadata(metadata: grpc.Metadata): void;
  write(message: { results: unknown[] }): boolean;
  end(): void;
  readonly writable: boolean;
  readonly destroyed: boolean;
  on(event: 'data', listener: (batch: { requests: BatchRequest[] }) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
}

/**
 * Serves one stream; `onError` runs when it fails. `onFlush` (stage tracing only) runs after
 * each message of answers is handed to the stream.
 */
export function serveBatchStream(call: BatchCall, handle: BatchHandler, onError: (err: Error) => void = () => {}, onFlush?: () => void): void {
  // Tells the caller at once that the stream reached a live server.
  call.sendMetadata(new grpc.Metadata());
  let out: { id: unknown; body?: Buffer; code: number; message: string }[] = [];
  let flushScheduled = false;
  const flush = () => {
    flushScheduled = false;
    const results = out;
    out = [];
    if (!call.writable || call.destroyed) return;
    call.write({ results });
    onFlush?.();
  };
  call.on('data', (batch: { requests: BatchRequest[] }) => {
    for (const req of batch.requests) {
      const id = req.id;
      handle(req.op, req.body, (r) => {
        out.push({ id, body: r.body, code: r.code, message: r.message });
        if (!flushScheduled) {
          flushScheduled = true;
          process.nextTick(flush);
        }
      }, num(req.authRevision), req.traceParent);
    }
  });
  call.on('end', () => call.end());
  call.on('error', onError);
}
