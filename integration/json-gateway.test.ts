// The JSON gateway where the differential test against etcd cannot reach: on a cluster's
// followers (writes forwarded, reads linearizable, a watch that sees the leader's writes), a
// watcher that stops reading (bounded, cancelled as a slow gRPC watcher is), and clients that
// stall (cut after a bounded time) — with the node up and serving afterwards.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { startCluster, waitForLeader } from '../testkit/node-cluster.js';
import { client, startKvs, status } from '../testkit/harness.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString();

/** POST a JSON body and parse the JSON answer. */
async function post(endpoint: string, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`http://${endpoint}${path}`, { method: 'POST', body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

/** A streamed route's answers, one parsed line at a time. */
class Lines {
  private buf = '';
  private waiting: ((line: any) => void)[] = [];
  private ready: any[] = [];
  constructor(readonly res: http.IncomingMessage) {
    res.setEncoding('utf8');
    res.on('data', (s: string) => {
      this.buf += s;
      let nl;
      while ((nl = this.buf.indexOf('\n')) !== -1) {
        const line = JSON.parse(this.buf.slice(0, nl));
        this.buf = this.buf.slice(nl + 1);
        const w = this.waiting.shift();
        if (w) w(line);
        else this.ready.push(line);
      }
    });
  }
  next(): Promise<any> {
    if (this.ready.length) return Promise.resolve(this.ready.shift());
    return new Promise((resolve) => this.waiting.push(resolve));
  }
}

function openStream(endpoint: string, path: string, body: string): Promise<{ req: http.ClientRequest; lines: Lines }> {
  const [host, port] = endpoint.split(':');
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port: Number(port), path, method: 'POST' }, (res) => resolve({ req, lines: new Lines(res) }));
    req.on('error', reject);
    req.end(body);
  });
}

describe('JSON gateway on a cluster', () => {
  test('on a follower: writes are forwarded, reads see the leader’s writes, a watch sees writes made through the leader, leases work', async (t) => {
    const cluster = await startCluster(t, 3);
    const leader = await waitForLeader(cluster.nodes);
    const follower = cluster.nodes.find((n) => n !== leader)!;
    const watch = await openStream(follower.endpoint, '/v3/watch', JSON.stringify({ create_request: { key: b64('gw/'), range_end: b64('gw0') } }));
    assert.equal((await watch.lines.next()).result.created, true);

    const put = await post(follower.endpoint, '/v3/kv/put', { key: b64('gw/from-follower'), value: b64('f') });
    assert.equal(put.status, 200, JSON.stringify(put.json));
    // Linearizable on every node: the leader has it at once, and so does the other follower.
    for (const n of cluster.nodes) {
      const r = await post(n.endpoint, '/v3/kv/range', { key: b64('gw/from-follower') });
      assert.equal(unb64(r.json.kvs?.[0]?.value), 'f', n.id);
    }
    await leader.client.put('gw/from-leader').value('l');
    const seen = await post(follower.endpoint, '/v3/kv/range', { key: b64('gw/from-leader') });
    assert.equal(unb64(seen.json.kvs?.[0]?.value), 'l');
    const txn = await post(follower.endpoint, '/v3/kv/txn', {
      compare: [{ key: b64('gw/from-leader'), target: 'VALUE', result: 'EQUAL', value: b64('l') }],
      success: [{ request_put: { key: b64('gw/txn'), value: b64('t') } }],
    });
    assert.equal(txn.json.succeeded, true, JSON.stringify(txn.json));

    const keys: string[] = [];
    while (keys.length < 3) {
      const m = await watch.lines.next();
      for (const e of m.result.events ?? []) keys.push(unb64(e.kv.key));
    }
    assert.deepEqual(keys, ['gw/from-follower', 'gw/from-leader', 'gw/txn']);
    watch.req.destroy();

    const grant = await post(follower.endpoint, '/v3/lease/grant', { TTL: 30 });
    assert.equal(grant.status, 200, JSON.stringify(grant.json));
    const id = grant.json.ID as string;
    await post(follower.endpoint, '/v3/kv/put', { key: b64('gw/leased'), value: b64('x'), lease: id });
    const ka = await openStream(follower.endpoint, '/v3/lease/keepalive', JSON.stringify({ ID: id }));
    const kaLine = await ka.lines.next();
    assert.equal(kaLine.result.ID, id);
    assert.equal(kaLine.result.TTL, '30');
    const ttl = await post(follower.endpoint, '/v3/lease/timetolive', { ID: id, keys: true });
    assert.deepEqual(ttl.json.keys.map(unb64), ['gw/leased']);
    const revoke = await post(follower.endpoint, '/v3/lease/revoke', { ID: id });
    assert.equal(revoke.status, 200);
    const gone = await post(leader.endpoint, '/v3/kv/range', { key: b64('gw/leased') });
    assert.equal(gone.json.kvs, undefined);
  });
});

describe('JSON gateway: clients that misbehave', () => {
  test('a watcher that stops reading holds the gateway to bounded memory, and is served from history once it reads again', async (t) => {
    const node = await startKvs(t);
    const [host, port] = node.endpoint.split(':');
    // A raw socket that sends the watch and then reads nothing: the kernel's buffers fill, then
    // the response stream needs draining, and the hub holds the watcher back (no buffering),
    // as it does a slow gRPC watcher (docs/architecture.md, "Watch": slow watchers).
    const socket = net.connect(Number(port), host);
    t.after(() => socket.destroy());
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.pause();
    const body = JSON.stringify({ create_request: { key: b64('slow/'), range_end: b64('slow0') } });
    socket.write(`POST /v3/watch HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    const gateway = (await status(node)).components.find((c) => c.name === 'gateway')!;
    const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${gateway.pid}/status`, 'utf8'))![1]) * 1024;
    const before = rss();
    const etcd = client(t, node.endpoint);
    const value = Buffer.alloc(64 * 1024, 'v').toString();
    const PUTS = 1500; // 96 MiB of values, 128 MiB as JSON: more than any buffer should hold
    let peak = before;
    for (let i = 0; i < PUTS; i++) {
      await etcd.put(`slow/${i % 50}`).value(value);
      if (i % 100 === 0) peak = Math.max(peak, rss());
    }
    peak = Math.max(peak, rss());
    t.diagnostic(`gateway RSS ${(before / 2 ** 20).toFixed(0)} MiB before, ${(peak / 2 ** 20).toFixed(0)} MiB at most while the watcher did not read`);
    assert.ok(peak - before < 64 * 2 ** 20, `the gateway grew by ${((peak - before) / 2 ** 20).toFixed(0)} MiB`);
    // Reading again: the watcher catches up (from history), up to the last put.
    const lastRev = Number((await etcd.get('slow/0').exec()).header.revision);
    socket.resume();
    let text = '';
    let upTo = 0;
    await new Promise<void>((resolve, reject) => {
      socket.on('data', (d: Buffer) => {
        text += d.toString();
        for (const m of text.matchAll(/"mod_revision":"(\d+)"/g)) upTo = Math.max(upTo, Number(m[1]));
        text = text.slice(Math.max(0, text.length - 256)); // keep only a tail to match across chunks
        if (upTo >= lastRev) resolve();
      });
      socket.once('close', () => reject(new Error(`the watch ended at revision ${upTo} of ${lastRev}`)));
    });
    const st = await status(node);
    assert.ok(st.components.every((c) => c.state === 'ready' && c.restarts === 0), JSON.stringify(st.components));
  });

  test('a request whose headers or body stall is cut after a bounded time; pipelined requests are answered in order', async (t) => {
    const node = await startKvs(t);
    const [host, port] = node.endpoint.split(':');
    const connect = async () => {
      const s = net.connect(Number(port), host);
      await new Promise((resolve) => s.once('connect', resolve));
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => chunks.push(c));
      const closed = new Promise<number>((resolve) => s.once('close', () => resolve(performance.now())));
      return { s, closed, text: () => Buffer.concat(chunks).toString() };
    };
    // Headers that never end (slowloris), a body shorter than its Content-Length.
    const started = performance.now();
    const headers = await connect();
    headers.s.write('POST /v3/kv/range HTTP/1.1\r\nHost: x\r\n');
    const body = await connect();
    body.s.write('POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"key":');
    const headersCut = (await headers.closed) - started;
    t.diagnostic(`stalled headers cut after ${Math.round(headersCut)} ms`);
    assert.ok(headersCut < 20_000, `headers stalled ${headersCut} ms`);
    // Pipelining: two requests in one write, two answers in order, on a connection that stays.
    const pipe = await connect();
    const req = (k: string) => {
      const b = JSON.stringify({ key: b64(k) });
      return `POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nContent-Length: ${b.length}\r\n\r\n${b}`;
    };
    pipe.s.write(req('a') + req('b') + `GET /version HTTP/1.0\r\n\r\n`);
    await pipe.closed; // HTTP/1.0 without keep-alive: closed after its answer
    const answers = pipe.text().split('HTTP/1.1 200 OK').length - 1;
    assert.equal(answers, 3, pipe.text());
    assert.match(pipe.text(), /"etcdserver":/);
    const bodyCut = (await body.closed) - started;
    t.diagnostic(`stalled body cut after ${Math.round(bodyCut)} ms`);
    assert.ok(bodyCut < 45_000, `body stalled ${bodyCut} ms`);
    const r = await post(node.endpoint, '/v3/kv/range', { key: b64('a') });
    assert.equal(r.status, 200);
  });
});
