// A short seeded run of the port fuzzers (chaos/fuzz, docs/reliability.md#port-fuzzing): the
// client port of one node, in gRPC and then in HTTP/1.x (the JSON gateway), and the peer port
// of a one-node cluster (its leader; `npm run fuzz` fuzzes a three-node cluster's). The seed
// changes daily (printed: replay with `npm run fuzz -- --seed N --target T`, and `--case I` for
// one case). No component may restart, the data set must be unchanged on every node, and every
// connection must be answered or closed, also those node:http2 leaves open after its own error
// GOAWAY (both ports close those after an unanswered PING). The console on --metrics-addr gets
// HTTP/1.x cases too (chaos/fuzz/console-cases.ts): none of its actions may get through.
// The file keeps to about 45 s: a few seconds of cases per target, one node for both client-port
// targets and one cluster for both peer-port tests, and per-case deadlines as short as each
// port allows.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { service } from '../shared/proto/index.js';
import { EPOCH_HEADER } from '../services/peer/transport.js';
import { crashed, processes } from '../chaos/fuzz/oracle.js';
import { rawExchange } from '../testkit/raw-socket.js';
import { fuzz, summaryLine, type RunSummary } from '../chaos/fuzz/run.js';
import { CLOSE_DEADLINE_MS, clientPortTarget, consoleTarget, startTarget, type FuzzTarget } from '../chaos/fuzz/targets.js';
import { reservePort, startKvs } from '../testkit/harness.js';
import { daySeed } from '../chaos/fuzz/random.js';

const SEED = daySeed();

/** Seconds of cases per port (each connection's deadline: CLOSE_DEADLINE_MS). */
const SECONDS = { client: 6, peer: 5, http: 4, console: 4 } as const;
const MIN_CASES = 41;

async function fuzzRun(t: TestContext, target: FuzzTarget): Promise<RunSummary> {
  // At least MIN_CASES, however slow the cases a seed draws (seed 20261124's peer cases: 29 in 5 s).
  const summary = await fuzz(target, { seed: SEED, durationMs: SECONDS[target.kind] * 1000, minCases: MIN_CASES, answerMs: CLOSE_DEADLINE_MS[target.kind], concurrency: 6, log: (l) => t.diagnostic(l) });
  t.diagnostic(summaryLine(summary));
  assert.deepEqual(summary.crashes, [], summaryLine(summary));
  assert.deepEqual(summary.dataChanged, [], summaryLine(summary));
  assert.equal(summary.outcomes.hung, 0, summaryLine(summary));
  // Not even after node:http2's error GOAWAY: the PING probes close those.
  assert.deepEqual(summary.leftOpen, [], summaryLine(summary));
  assert.ok(summary.cases >= MIN_CASES, `only ${summary.cases} cases ran`);
  return summary;
}

test('client port (one node)', async (t) => {
  const node = await startKvs(t);
  // The bounds of exchanges.ts and shared/grpc/server.ts's sniff at their real values (10 s, 8 s), on
  // connections left alone while the cases run (nothing was cut before the fixes).
  const started = Date.now();
  const timed = (bytes: string) => rawExchange(node.endpoint, Buffer.from(bytes), false, 20_000).then((r) => ({ ...r, ms: Date.now() - started }));
  const stalled = Promise.all([timed('POST /v3/kv/range HTTP/1.1\r\nHost: kvs\r\n'), timed('')]);

  await t.test('port fuzzer, gRPC: no crash, no data change, every connection answered or closed', async (t) => {
    await fuzzRun(t, clientPortTarget(t, 'client', node));
  });

  await t.test('port fuzzer, JSON gateway over HTTP/1.x: the same; and a stalled request and a silent connection were cut meanwhile', async (t) => {
    await fuzzRun(t, clientPortTarget(t, 'http', node));
    const [headers, silent] = await stalled;
    assert.ok(headers!.closed && headers!.ms < 15_000, `a request stalled in its headers: closed ${headers!.closed} after ${headers!.ms} ms`);
    assert.match(headers!.received.toString('latin1'), /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.ok(silent!.closed && silent!.ms < 12_000, `a connection that sent nothing: closed ${silent!.closed} after ${silent!.ms} ms`);
  });

  await t.test('JSON bodies the HTTP target crashed the gateway with are refused, and the gateway stays up', async () => {
    const before = await processes(node);
    const post = async (path: string, body: string, version = '1.1') => {
      const r = await rawExchange(node.endpoint, Buffer.from(`POST ${path} HTTP/${version}\r\nHost: kvs\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`), false, 10_000);
      return r.received.toString('latin1');
    };
    // Nesting past Go's limit (json-text.ts; it overflowed the stack at about 4,000).
    assert.match(await post('/v3/kv/range', `{"key":${'['.repeat(20_000)}`), /^HTTP\/1\.1 400 [\s\S]*"message":"invalid character '\[' exceeded max depth","code":3\}/);
    assert.match(await post('/v3/watch', `{"create_request":${'{"a":'.repeat(10_001)}`), /^HTTP\/1\.1 500 [\s\S]*"message":"invalid character '\{' exceeded max depth"/);
    // A Txn nested deeper than the gateway reads (proto-json.ts: 99 messages, so that its
    // answer, one deeper, decodes), and the deepest it reads, answered.
    const txn = (depth: number) => {
      let s = `{"success":[{"request_put":{"key":"${Buffer.from('fuzz/nested').toString('base64')}"}}]}`;
      for (let i = 0; i < depth; i++) s = `{"success":[{"request_txn":${s}}]}`;
      return s;
    };
    assert.match(await post('/v3/kv/txn', txn(49)), /^HTTP\/1\.1 400 [\s\S]*"message":"kvs: the request nests messages more than 99 deep"/);
    assert.match(await post('/v3/kv/txn', txn(48)), /^HTTP\/1\.1 200 OK\r\n[\s\S]*"succeeded":true/);
    // A service's error answered to HTTP/1.0 (exchanges.ts: node threw at the Trailer header).
    assert.match(await post('/v3/auth/user/get', '{"name":"fuzz-nobody"}', '1.0'), /^HTTP\/1\.1 412 [\s\S]*"message":"etcdserver: user name not found"/);
    assert.deepEqual(crashed(before, await processes(node)), []);
  });
});

test('peer port (a one-node cluster)', async (t) => {
  const target = await startTarget(t, 'peer', 1);

  await t.test('port fuzzer: no crash, no data change, every connection answered or closed', async (t) => {
    await fuzzRun(t, target);
  });

  await t.test('a Follow Hello without a member is refused, and the peer process stays up', async () => {
    // Found by the port fuzzer: the leader's admit() read the member's node id from a Hello
    // that had none, threw, and the peer process exited.
    const before = await Promise.all(target.nodes.map(processes));
    const Peer = grpc.makeGenericClientConstructor(service('kvs.peer.Peer'), 'Peer');
    for (const endpoint of target.fuzzEndpoints) {
      const c = new Peer(endpoint, grpc.credentials.createInsecure()) as grpc.Client & Record<string, any>;
      const md = new grpc.Metadata();
      md.set(EPOCH_HEADER, target.epoch!);
      const stream = c.Follow(md, { deadline: Date.now() + 5000 });
      const ended = new Promise<grpc.ServiceError | undefined>((resolve) => {
        stream.on('error', resolve);
        stream.on('end', () => resolve(undefined));
        stream.on('data', () => {});
      });
      stream.write({ hello: { fromIndex: 1, term: 1 } });
      const err = await ended;
      c.close();
      assert.equal(err?.code, grpc.status.INVALID_ARGUMENT, String(err));
    }
    await new Promise((r) => setTimeout(r, 500));
    const after = await Promise.all(target.nodes.map(processes));
    assert.deepEqual(before.map((b, i) => crashed(b, after[i]!)), before.map(() => []));
  });
});

test('console on --metrics-addr (one node)', async (t) => {
  const port = await reservePort(t);
  const node = await startKvs(t, { args: ['--metrics-addr', `127.0.0.1:${port}`] });
  await t.test('port fuzzer, HTTP/1.x: no crash, no data change, no action accepted, every connection answered or closed', async (t) => {
    await fuzzRun(t, consoleTarget(node, `127.0.0.1:${port}`));
  });
});
