import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { service } from '../proto/index.js';
import { GrpcServer, type ServerCall } from './server.js';
import { serveBatchStream } from '../batch-link/serve.js';
import { storageLink } from '../batch-link/link.js';
import { inProcessChannel } from './memory-pipe.js';

const silent = pino({ level: 'silent' });

function echoStorage(): GrpcServer {
  const server = new GrpcServer({ maxReceiveMessageLength: 2 ** 31 - 1 });
  server.addService(service('kvs.storage.Storage'), {
    Write(call: ServerCall<any, any>) {
      serveBatchStream(call, (op, body, done) => done(op === 9 ? { code: 9, message: 'refused' } : { body: Buffer.from(body), code: 0, message: '' }));
    },
  });
  return server;
}

test('in-process channel: a write link to a server in this process, large messages, errors, and the server shut down', async () => {
  const server = echoStorage();
  // The link's and the server's timers are unref'd, as in a process that serves: keep this one up.
  const alive = setInterval(() => {}, 1000);
  const channel = inProcessChannel(server);
  const link = storageLink(channel, silent, 'Write', 300);
  for (const n of [1, 16 * 1024 + 1, 4 << 20]) {
    const body = Buffer.alloc(n, n % 251);
    assert.ok((await link.call(1, body)).equals(body), `a ${n}-byte write comes back whole`);
  }
  const many = await Promise.all(Array.from({ length: 100 }, (_, i) => link.call(1, Buffer.from(`w${i}`))));
  assert.deepEqual(many.map(String), Array.from({ length: 100 }, (_, i) => `w${i}`));
  await assert.rejects(link.call(9, Buffer.from('x')), /refused/);
  // The server gone: the pipe closes as a socket would, and a write that cannot be sent fails.
  await server.shutdown(100);
  await assert.rejects(link.call(1, Buffer.from('after')), /unavailable|not available|storage/i);
  link.close();
  channel.close();
  clearInterval(alive);
});
