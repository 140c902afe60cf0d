// The gateway's floor under its own bugs: a throw in any event of a request (here, from the
// exchange itself, after the body was read) answers that request 500 INTERNAL and leaves the
// process up. The port fuzzer found throws of this kind that exited the gateway (each fixed
// where it lay); this checks the net beneath them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GrpcServer } from '../../../shared/grpc/http2-server.js';
import { service } from '../../../shared/proto/index.js';
import { JsonGateway, type HttpExchange } from './gateway.js';

class FakeExchange implements HttpExchange {
  method = 'POST';
  url = '/v3/kv/range';
  peer = '127.0.0.1:1';
  commonName = undefined;
  secure = false;
  closed = false;
  needDrain = false;
  status = 0;
  body = '';
  private data: ((c: Buffer) => void)[] = [];
  private ends: (() => void)[] = [];
  /** Throws once the body is read: a transport that breaks under the gateway. */
  header(name: string): string | undefined {
    if (this.ended && name === 'authorization') throw new Error('the exchange broke');
    return undefined;
  }
  private ended = false;
  onData(fn: (c: Buffer) => void) {
    this.data.push(fn);
  }
  onEnd(fn: () => void) {
    this.ends.push(fn);
  }
  onClose() {}
  onDrain() {}
  onBodyError() {}
  discardBody() {}
  respond(status: number) {
    this.status = status;
  }
  write(chunk: string) {
    this.body += chunk;
    return true;
  }
  end(chunk?: string) {
    this.body += chunk ?? '';
    this.closed = true;
  }
  send(body: string) {
    for (const fn of this.data) fn(Buffer.from(body));
    this.ended = true;
    for (const fn of this.ends) fn();
  }
}

test('a throw in a later event of a request answers it 500 INTERNAL, and nothing escapes', () => {
  const server = new GrpcServer({ maxReceiveMessageLength: 1 << 20 });
  let called = false;
  server.addService(service('etcdserverpb.KV'), { range: (_call: unknown, cb: (e: null, r: object) => void) => ((called = true), cb(null, {})) });
  const logged: string[] = [];
  const gw = new JsonGateway({
    server,
    maxMessageBytes: 1 << 20,
    version: { etcdserver: 'x', etcdcluster: 'x' },
    metrics: async () => '',
    authEnabled: () => false,
    clientCertAuth: false,
    log: { error: (obj) => logged.push(JSON.stringify(obj)) },
  });
  const ex = new FakeExchange();
  gw.handle(ex);
  assert.doesNotThrow(() => ex.send('{"key":"YQ=="}'));
  assert.equal(called, false);
  assert.equal(ex.status, 500);
  assert.deepEqual(JSON.parse(ex.body), { error: 'kvs: internal error: the exchange broke', message: 'kvs: internal error: the exchange broke', code: 13 });
  assert.equal(logged.length, 1);
});
