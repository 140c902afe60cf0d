// Hostile or broken input on the client port: garbage bytes, HTTP/1, malformed protobuf
// bodies, oversize requests, over-long keys, unknown methods. After each, the node still
// serves, the data written before is intact, and no component has crashed. Where etcd
// answers, kvs must answer with the same gRPC code (and the same message where the message
// is etcd's own rather than its gRPC library's).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { encode } from '../shared/proto/index.js';
import { client, startEtcd, startKvs } from '../testkit/harness.js';
import { prng } from '../testkit/prng.js';
import { http2FrameTypes, rawExchange } from '../testkit/raw-socket.js';

function randomBytes(rnd: () => number, n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(rnd() * 256);
  return b;
}

const GOAWAY = 7;

interface CallResult {
  code: grpc.status;
  details: string;
}

/** One unary call with a raw request body (`body` may be a function: a custom serializer). */
function rawCall(ch: grpc.Client, path: string, body: Buffer | (() => Buffer)): Promise<CallResult> {
  const serialize = typeof body === 'function' ? body : () => body;
  return new Promise((resolve) => {
    ch.makeUnaryRequest(
      path,
      serialize,
      (b: Buffer) => b,
      null,
      new grpc.Metadata(),
      { deadline: Date.now() + 10_000 },
      (err: grpc.ServiceError | null) => resolve(err ? { code: err.code, details: err.details } : { code: grpc.status.OK, details: '' }),
    );
  });
}

const SEED = Array.from({ length: 20 }, (_, i) => [`seed/${String(i).padStart(2, '0')}`, `value-${i}-${'x'.repeat(i * 7)}`] as const);

test('bad input on the client port: kvs keeps serving, data intact, answers as etcd', async (t) => {
  const [kvs, etcd] = await Promise.all([startKvs(t), startEtcd(t)]);
  const nodes = { kvs, etcd } as const;
  const clients = { kvs: client(t, kvs.endpoint), etcd: client(t, etcd.endpoint) };
  const channels = {
    kvs: new grpc.Client(kvs.endpoint, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': -1 }),
    etcd: new grpc.Client(etcd.endpoint, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': -1 }),
  };
  t.after(() => Object.values(channels).forEach((c) => c.close()));
  for (const c of Object.values(clients)) for (const [k, v] of SEED) await c.put(k).value(v);
  const revisions = () => Promise.all(Object.values(clients).map(async (c) => Number((await c.get('seed/00').exec()).header.revision)));

  /** Both servers answer, with the seed data as written; kvs's components never restarted. */
  const intact = async (what: string): Promise<void> => {
    for (const [name, c] of Object.entries(clients)) {
      const got = await c.getAll().prefix('seed/').strings();
      assert.deepEqual(got, Object.fromEntries(SEED), `${name}: seed data after ${what}`);
      await c.put('probe').value(what);
      assert.equal(await c.get('probe').string(), what, `${name} serves after ${what}`);
    }
    const r = await kvs.ctl(['status', '--json']);
    assert.equal(r.exitCode, 0, r.stderr);
    for (const comp of JSON.parse(r.stdout).components as { name: string; restarts: number; state: string }[]) {
      assert.deepEqual([comp.state, comp.restarts], ['ready', 0], `${comp.name} after ${what}\n${kvs.output().slice(-4000)}`);
    }
  };
  /** The same raw call on both servers. */
  const both = async (path: string, body: Buffer): Promise<{ kvs: CallResult; etcd: CallResult }> => {
    const [k, e] = await Promise.all([rawCall(channels.kvs, path, body), rawCall(channels.etcd, path, body)]);
    return { kvs: k, etcd: e };
  };

  await t.test('garbage bytes on a raw TCP connection', async () => {
    const rnd = prng(1);
    const payloads: [string, Buffer, boolean][] = [
      ['64 KiB of random bytes', randomBytes(rnd, 64 * 1024), false],
      ['random bytes, then half-close', randomBytes(rnd, 100), true],
      ['the HTTP/2 preface, then random frames', Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), randomBytes(rnd, 4096)]), false],
      ['a frame header claiming 16 MiB', Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1])]), false],
      ['zeros', Buffer.alloc(1000), false],
    ];
    // (etcd is not compared here: its connection sniffer keeps some of these connections open,
    // waiting for a line end, rather than answering.)
    for (const [what, bytes, halfClose] of payloads) {
      const k = await rawExchange(kvs.endpoint, bytes, halfClose);
      assert.ok(k.closed, `kvs did not close the connection after ${what}`);
      if (bytes.subarray(0, 3).toString('latin1') === 'PRI') {
        // HTTP/2 that breaks the protocol: kvs says so (GOAWAY) and closes.
        const frames = http2FrameTypes(k.received);
        assert.equal(frames.at(-1), GOAWAY, `kvs's answer to ${what}: frames ${frames}`);
      } else {
        // Not HTTP/2, so HTTP/1 for the JSON gateway, which cannot parse it: 400 and close.
        assert.match(k.received.toString('latin1'), /^HTTP\/1\.1 400 Bad Request\r\n/, `kvs's answer to ${what}`);
      }
    }
    // Many at once.
    const rnd2 = prng(2);
    const many = await Promise.all(Array.from({ length: 50 }, () => rawExchange(kvs.endpoint, randomBytes(rnd2, 512))));
    assert.ok(many.every((r) => r.closed));
    await intact('garbage bytes');
  });

  await t.test('an HTTP/1 request is answered by the JSON gateway, as etcd answers it', async () => {
    const requests: [string, RegExp][] = [
      ['GET /version HTTP/1.1\r\nHost: kvs\r\nConnection: close\r\n\r\n', /^HTTP\/1\.1 200 OK\r\n[\s\S]*"etcdserver":"3\.4\./],
      ['GET /health HTTP/1.1\r\nHost: kvs\r\nConnection: close\r\n\r\n', /^HTTP\/1\.1 200 OK\r\n[\s\S]*\{"health":"true"\}/],
      ['POST /v3/kv/range HTTP/1.1\r\nHost: kvs\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 14\r\n\r\n{"key":"YQ=="}', /^HTTP\/1\.1 200 OK\r\n[\s\S]*"header":/],
      ['GET /v3/kv/range HTTP/1.1\r\nHost: kvs\r\nConnection: close\r\n\r\n', /^HTTP\/1\.1 405 Method Not Allowed\r\n/],
    ];
    for (const [req, answer] of requests) {
      for (const [name, endpoint] of [['kvs', kvs.endpoint], ['etcd', etcd.endpoint]]) {
        const r = await rawExchange(endpoint, Buffer.from(req));
        assert.ok(r.closed, `${name} did not close the connection after ${JSON.stringify(req)}`);
        assert.match(r.received.toString('latin1'), answer, `${name}: ${JSON.stringify(req)}`);
      }
    }
    await intact('HTTP/1 requests');
  });

  await t.test('gRPC calls whose protobuf body does not decode', async () => {
    // Bodies both protobuf decoders reject: a truncated length-delimited field, an end-group
    // tag with no group, a length running past the end.
    const bodies: [string, Buffer][] = [
      ['truncated field', Buffer.from([0x0a, 0x05, 0x61])],
      ['stray end-group tag', Buffer.from([0x0c])],
      ['length past the end', Buffer.from([0x12, 0x80, 0x80, 0x80, 0x80, 0x08, 0x01])],
    ];
    const methods = [
      '/etcdserverpb.KV/Range',
      '/etcdserverpb.KV/Put',
      '/etcdserverpb.KV/DeleteRange',
      '/etcdserverpb.KV/Txn',
      '/etcdserverpb.Maintenance/Status',
      '/etcdserverpb.Cluster/MemberList',
      '/etcdserverpb.Lease/LeaseGrant',
      '/etcdserverpb.Lease/LeaseRevoke',
      '/etcdserverpb.Lease/LeaseTimeToLive',
      '/etcdserverpb.Lease/LeaseLeases',
    ];
    for (const path of methods) {
      for (const [what, body] of bodies) {
        const r = await both(path, body);
        assert.equal(r.etcd.code, grpc.status.INTERNAL, `etcd ${path} ${what}: ${r.etcd.details}`);
        assert.equal(r.kvs.code, r.etcd.code, `kvs ${path} ${what}: ${r.kvs.code} ${r.kvs.details} (etcd: ${r.etcd.details})`);
      }
    }
    // For the writes kvs forwards undecoded, even the message is gRPC's unmarshalling error.
    const put = await both('/etcdserverpb.KV/Put', Buffer.from([0x0c]));
    assert.match(put.kvs.details, /^grpc: error unmarshalling request: /);
    assert.match(put.etcd.details, /^grpc: error unmarshalling request: /);
    await intact('undecodable bodies');
  });

  await t.test("an undecodable write fails alone, not the other clients' writes batched with it", async () => {
    for (const [name, ch] of Object.entries(channels)) {
      const good = client(t, nodes[name as keyof typeof nodes].endpoint);
      for (let round = 0; round < 3; round++) {
        const valid = Array.from({ length: 40 }, (_, i) => good.put(`batch/${round}/${i}`).value(String(i)).exec());
        const broken = Array.from({ length: 10 }, () => rawCall(ch, '/etcdserverpb.KV/Put', Buffer.from([0x0c])));
        const [ok, bad] = await Promise.all([Promise.allSettled(valid), Promise.all(broken)]);
        const failed = ok.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
        assert.deepEqual(failed, [], `${name}: valid puts failed next to undecodable ones`);
        assert.ok(bad.every((r) => r.code === grpc.status.INTERNAL), `${name}: ${JSON.stringify(bad)}`);
      }
      assert.equal(await good.getAll().prefix('batch/').count(), 120);
    }
    await intact('undecodable writes next to valid ones');
  });

  await t.test('random bytes as request bodies (custom serializer)', async () => {
    const rnd = prng(3);
    // Read-only methods and Put (which cannot remove data); DeleteRange and Txn are left out:
    // random bytes may well decode into a valid request that deletes the seed keys. Half the
    // bodies are pure noise, half are valid requests with a few bytes changed or cut off.
    const valid: Record<string, Buffer> = {
      '/etcdserverpb.KV/Range': encode('etcdserverpb.RangeRequest', { key: Buffer.from('seed/'), rangeEnd: Buffer.from('seed0'), limit: 5, sortOrder: 2, sortTarget: 3 }),
      '/etcdserverpb.KV/Put': encode('etcdserverpb.PutRequest', { key: Buffer.from('fuzz/key'), value: Buffer.from('a value, 0123456789'), prevKv: true }),
      '/etcdserverpb.Maintenance/Status': Buffer.alloc(0),
      '/etcdserverpb.Cluster/MemberList': Buffer.alloc(0),
      '/etcdserverpb.Lease/LeaseGrant': encode('etcdserverpb.LeaseGrantRequest', { TTL: 30, ID: 77 }),
      '/etcdserverpb.Lease/LeaseTimeToLive': encode('etcdserverpb.LeaseTimeToLiveRequest', { ID: 77, keys: true }),
      '/etcdserverpb.Lease/LeaseLeases': Buffer.alloc(0),
    };
    const methods = Object.keys(valid);
    const allowed = new Set([grpc.status.OK, grpc.status.INTERNAL, grpc.status.INVALID_ARGUMENT, grpc.status.OUT_OF_RANGE, grpc.status.NOT_FOUND, grpc.status.FAILED_PRECONDITION]);
    const seen = new Map<string, number>();
    const mutate = (b: Buffer): Buffer => {
      const m = Buffer.from(b);
      if (m.length === 0) return randomBytes(rnd, 1 + Math.floor(rnd() * 8));
      for (let n = 1 + Math.floor(rnd() * 3); n > 0; n--) m[Math.floor(rnd() * m.length)] = Math.floor(rnd() * 256);
      return rnd() < 0.3 ? m.subarray(0, Math.floor(rnd() * m.length)) : m;
    };
    for (let i = 0; i < 400; i++) {
      const path = methods[i % methods.length]!;
      const size = 1 + Math.floor(rnd() * 300);
      let sent: Buffer | undefined;
      const serializer = () => (sent = Math.floor(i / methods.length) % 2 ? mutate(valid[path]!) : randomBytes(rnd, size));
      const r = await rawCall(channels.kvs, path, serializer);
      assert.ok(allowed.has(r.code), `${path} with body ${sent?.toString('hex')}: ${grpc.status[r.code]} ${r.details}`);
      const k = `${path.split('/').pop()} ${grpc.status[r.code]}`;
      seen.set(k, (seen.get(k) ?? 0) + 1);
    }
    t.diagnostic([...seen].map(([k, n]) => `${n} x ${k}`).join(', '));
    await intact('random bodies');
  });

  await t.test('oversize requests', async () => {
    const before = await revisions();
    const put = (size: number) => encode('etcdserverpb.PutRequest', { key: Buffer.from('big'), value: Buffer.alloc(size, 0x62) });
    // Over --max-request-bytes (1.5 MiB) but under gRPC's limit: etcd's own error.
    const big = await both('/etcdserverpb.KV/Put', put(1.6 * 1024 * 1024));
    assert.deepEqual(big.etcd, { code: grpc.status.INVALID_ARGUMENT, details: 'etcdserver: request is too large' });
    assert.deepEqual(big.kvs, big.etcd);
    const txn = encode('etcdserverpb.TxnRequest', {
      success: [{ requestPut: { key: Buffer.from('big'), value: Buffer.alloc(1.6 * 1024 * 1024) } }],
    });
    const bigTxn = await both('/etcdserverpb.KV/Txn', txn);
    assert.deepEqual(bigTxn.kvs, bigTxn.etcd);
    assert.equal(bigTxn.kvs.code, grpc.status.INVALID_ARGUMENT);

    // Over gRPC's receive limit (max request bytes + 512 KiB): refused by gRPC itself.
    const huge = await both('/etcdserverpb.KV/Put', put(3 * 1024 * 1024));
    assert.equal(huge.etcd.code, grpc.status.RESOURCE_EXHAUSTED, huge.etcd.details);
    assert.equal(huge.kvs.code, grpc.status.RESOURCE_EXHAUSTED, huge.kvs.details);
    assert.deepEqual(huge.kvs, huge.etcd);
    assert.equal(huge.kvs.details, `grpc: received message larger than max (${3 * 1024 * 1024 + 10} vs. ${2 * 1024 * 1024})`);

    // Nothing was written.
    for (const c of Object.values(clients)) assert.equal(await c.get('big').exists(), false);
    assert.deepEqual(await revisions(), before, 'no revision was used by a refused request');
    await intact('oversize requests');
  });

  await t.test("keys longer than the store's key limit, in reads and compares", async () => {
    const long = (n: number): Buffer => Buffer.alloc(n, 0x61);
    const results: Record<string, unknown[]> = { kvs: [], etcd: [] };
    for (const [name, c] of Object.entries(clients)) {
      const out = results[name]!;
      const attempt = async (f: () => Promise<unknown>) => {
        try {
          out.push(await f());
        } catch (err) {
          out.push(`${(err as Error).constructor.name}: ${(err as Error).message}`);
        }
      };
      await c.put('a').value('short');
      await c.put(long(1978)).value('longest kvs allows');
      const keys = async (b: { keys(): Promise<string[]> }) => (await b.keys()).map((k) => k.length);
      await attempt(async () => (await c.get(long(1979)).exec()).count);
      await attempt(async () => (await c.get(long(8192)).exec()).count);
      await attempt(async () => (await c.get(long(1.6 * 1024 * 1024)).exec()).count);
      await attempt(() => keys(c.getAll().inRange({ start: long(5000), end: 'b' })));
      await attempt(() => keys(c.getAll().inRange({ start: 'a', end: long(5000) })));
      await attempt(() => keys(c.getAll().inRange({ start: long(1977), end: long(1979) })));
      await attempt(() => keys(c.getAll().prefix(long(3000))));
      // From a long key to the end of the key space (at its top, away from other tests' keys).
      await c.put(Buffer.from([0xfe, 0xff])).value('top');
      await attempt(async () => (await c.getAll().inRange({ start: Buffer.alloc(3000, 0xfe), end: Buffer.from([0]) }).exec()).count);
      await attempt(async () => (await c.if(long(8192), 'Version', '==', 0).then(c.get('a')).commit()).succeeded);
      await attempt(async () => (await c.if('a', 'Version', '>', 0).then(c.delete().inRange({ start: long(5000), end: long(6000) })).commit()).succeeded);
    }
    assert.deepEqual(results.kvs, results.etcd);
    await intact('over-long keys');
  });

  await t.test('a txn put with ignore_value on a key the same txn deleted (etcd 3.4 crashes on it)', async () => {
    // etcd's applier panics here (its pre-check saw the key, the delete before the put removed
    // it), so there is nothing to compare: kvs stays up and applies the put as a plain put.
    // Only a from-key delete gets past etcd's duplicate-key check to reach this case.
    await clients.kvs.put('zzign/k').value('v1');
    const txn = encode('etcdserverpb.TxnRequest', {
      success: [
        { requestDeleteRange: { key: Buffer.from('zzign/'), rangeEnd: Buffer.from([0]) } },
        { requestPut: { key: Buffer.from('zzign/k'), ignoreValue: true } },
      ],
    });
    const r = await rawCall(channels.kvs, '/etcdserverpb.KV/Txn', txn);
    assert.equal(r.code, grpc.status.OK, r.details);
    const kv = (await clients.kvs.get('zzign/k').exec()).kvs[0]!;
    assert.deepEqual([kv.value.toString(), kv.version], ['', '1']);
    await intact('a txn put with ignore_value after a delete of its key');
  });

  await t.test('unknown methods and services', async () => {
    // gRPC's own answers, as grpc-go gives them in etcd: UNIMPLEMENTED naming the unknown
    // service or method, and RESOURCE_EXHAUSTED for a path that is not /service/method.
    for (const path of ['/etcdserverpb.KV/NoSuchMethod', '/etcdserverpb.NoSuchService/Range', '/no.such.Service/Call', '/garbage']) {
      const r = await both(path, Buffer.alloc(0));
      assert.deepEqual(r.kvs, r.etcd, path);
    }
    const malformed = await both('/garbage', Buffer.alloc(0));
    assert.deepEqual(malformed.kvs, { code: grpc.status.RESOURCE_EXHAUSTED, details: 'malformed method name: "/garbage"' });
    await intact('unknown methods');
  });
});
