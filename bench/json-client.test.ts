// The JSON workloads' client (bench/json-client.ts): a 200 with a JSON body resolves; any other
// status, or a 200 whose body is not JSON, rejects (so the load generator counts an error, not
// throughput); requests from one client share one keep-alive connection.
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { test } from 'node:test';
import { JsonClient } from './json-client.js';

test('JsonClient: 200 + JSON resolves; another status or a body that is not JSON rejects; one connection for all', async (t) => {
  const sockets = new Set<net.Socket>();
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    sockets.add(req.socket);
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      bodies.push(`${req.method} ${req.url} ${req.headers['content-type']} ${body}`);
      if (req.url === '/ok') res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"header":{"revision":"2"}}');
      else if (req.url === '/text') res.writeHead(200).end('not json');
      else res.writeHead(400, { 'Content-Type': 'application/json' }).end('{"error":"bad","code":3}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const c = new JsonClient(`127.0.0.1:${(server.address() as net.AddressInfo).port}`);
  t.after(() => c.close());

  const { raw, json } = await c.post('/ok', '{"key":"Zm9v"}');
  assert.deepEqual(json, { header: { revision: '2' } });
  assert.equal(raw.toString(), '{"header":{"revision":"2"}}');
  await assert.rejects(c.post('/bad', '{}'), /POST \/bad: HTTP 400: \{"error":"bad"/);
  await assert.rejects(c.post('/text', '{}'), /POST \/text: the 200 answer is not JSON/);
  await c.post('/ok', '{}');
  assert.equal(sockets.size, 1, 'every request on one keep-alive connection');
  assert.equal(bodies[0], 'POST /ok application/json {"key":"Zm9v"}');
});
