import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter, getEventListeners } from 'node:events';
import type { ServerCall } from '../../../shared/grpc/server.js';
import { callSignal } from './services.js';

type Call = ServerCall;

test("a call's signal fires on cancel and on the gateway's stop, and leaves no listener on the stop signal", () => {
  const stopping = new AbortController();
  // Many unary calls (which never emit 'close'), each released when answered.
  for (let i = 0; i < 50; i++) callSignal(new EventEmitter() as unknown as Call, stopping.signal).release();
  // A stream releases on 'close'.
  const stream = new EventEmitter();
  callSignal(stream as unknown as Call, stopping.signal);
  stream.emit('close');
  assert.equal(getEventListeners(stopping.signal, 'abort').length, 0);

  const cancelled = new EventEmitter();
  const a = callSignal(cancelled as unknown as Call, stopping.signal);
  cancelled.emit('cancelled');
  assert.equal(a.signal.aborted, true, 'a client cancel aborts the call');

  const open = callSignal(new EventEmitter() as unknown as Call, stopping.signal);
  stopping.abort();
  assert.equal(open.signal.aborted, true, 'the gateway stop aborts an open call');
  assert.equal(callSignal(new EventEmitter() as unknown as Call, stopping.signal).signal.aborted, true, 'a call after the stop is aborted at once');
});
