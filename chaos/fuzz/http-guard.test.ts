// The HTTP target's scratch guard: a connection is judged by the requests node's parser reads
// from it, with their bodies as the gateway converts them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { closeHttpGuard, connectionStaysInScratch } from './http-guard.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const req = (path: string, body: string) => `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
const put = (key: string) => `{"key":"${b64(key)}"}`;

test('the guard passes what writes only in the scratch prefix, as the gateway would read it', async (t) => {
  t.after(closeHttpGuard);
  const cases: [string, string, boolean][] = [
    ['a put in scratch', req('/v3/kv/put', put('fuzz/a')), true],
    ['a put outside', req('/v3/kv/put', put('seed/00')), false],
    ['a put outside on the beta path, with a query', req('/v3beta/kv/put?x=1', put('seed/00')), false],
    ['a put outside, pipelined after a read', req('/v3/kv/range', '{}') + req('/v3/kv/put', put('other')), false],
    ['a put outside in chunks', `POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"k\r\n${(put('other').length - 3).toString(16)}\r\n${put('other').slice(3)}\r\n0\r\n\r\n`, false],
    ['a put outside, cut by a short Content-Length', `POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n${put('other')}`, true],
    ['a put outside that never completes', `POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n${put('other')}`, true],
    ['a put outside in a body past a long Content-Length, with the next request in it', `POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: ${put('other').length + 40}\r\n\r\n${put('other')}${req('/v3/kv/range', '{}')}`, false],
    ['an empty put (key "")', req('/v3/kv/put', ''), false],
    ['a compaction', req('/v3/kv/compaction', '{"revision":"1"}'), false],
    ['auth enable', req('/v3/auth/enable', '{}'), false],
    ['a user outside the scratch names', req('/v3/auth/user/add', '{"name":"root","password":"x"}'), false],
    ['a user inside', req('/v3/auth/user/add', '{"name":"fuzz-u","password":"x"}'), true],
    ['an empty lock (it locks /<lease>)', req('/v3/lock/lock', '{}'), false],
    ['a put by GET (refused)', 'GET /v3/kv/put HTTP/1.1\r\nHost: x\r\n\r\n', true],
    ['a delete from scratch to the end', req('/v3/kv/deleterange', `{"key":"${b64('fuzz/')}","range_end":"AA=="}`), false],
    ['a delete past scratch, camelCase', req('/v3/kv/deleterange', `{"key":"${b64('fuzz/')}","rangeEnd":"${b64('zzz')}"}`), false],
    ['a put outside in a nested Txn', req('/v3/kv/txn', `{"success":[{"request_txn":{"success":[{"request_put":${put('x')}}]}}]}`), false],
    ['a put that does not read', req('/v3/kv/put', put('x').slice(0, -1)), true],
    ['the first value only: a second one is not read', req('/v3/kv/put', `${put('fuzz/a')} ${put('x')}`), true],
    ['HTTP/2', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', true],
  ];
  for (const [what, bytes, safe] of cases) assert.equal(await connectionStaysInScratch(Buffer.from(bytes, 'latin1')), safe, what);
});
