// The gateway's floor under its own bugs: a throw in any event of a request (here, from the
// exchange itself, after the body was read) answers that request 500 INTERNAL and leaves the
// process up. The port fuzzer found throws of this kind that exited the gateway (each fixed
// where it lay); this checks the net beneath them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GrpcServer } from '../../../shared/grpc/server.js';
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
    readable: async () => {},
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

function gateway(server: GrpcServer, readable: () => Promise<void> = async () => {}): JsonGateway {
  return new JsonGateway({ server, maxMessageBytes: 1 << 20, version: { etcdserver: 'x', etcdcluster: 'x' }, metrics: async () => '', authEnabled: () => false, clientCertAuth: false, readable });
}

test('an answer that does not become JSON fails its request with 500, it does not hang', () => {
  const server = new GrpcServer({ maxReceiveMessageLength: 1 << 20 });
  // A handler answering with bytes that are no RangeResponse (a length running past the end).
  server.addService(service('etcdserverpb.KV'), { range: (_call: unknown, cb: (e: null, r: Buffer) => void) => cb(null, Buffer.from([0x0a, 0x7f])) });
  const ex = new FakeExchange();
  gateway(server).handle(ex);
  ex.send('{"key":"YQ=="}');
  assert.equal(ex.status, 500);
  assert.equal(JSON.parse(ex.body).code, 13);
});

test('GET /health asks the node whether it can serve a linearizable read, within a second', async () => {
  const server = new GrpcServer({ maxReceiveMessageLength: 1 << 20 });
  const probe = async (readable: () => Promise<void>) => {
    const ex = new FakeExchange();
    ex.method = 'GET';
    ex.url = '/health';
    gateway(server, readable).handle(ex);
    for (let i = 0; i < 300 && !ex.closed; i++) await new Promise((r) => setTimeout(r, 10));
    return [ex.status, ex.body];
  };
  assert.deepEqual(await probe(async () => {}), [200, '{"health":"true"}']);
  assert.deepEqual(await probe(() => Promise.reject(new Error('no leader'))), [503, '{"health":"false"}']);
  // No answer within a second (a follower cut off from its leader) is unhealthy too.
  assert.deepEqual(await probe(() => new Promise(() => {})), [503, '{"health":"false"}']);
});
