// The fsync counter read from a Prometheus exposition (bench/fsyncs.ts): the named counter's
// series summed, not another metric that shares its prefix; a scrape that fails is null.
import assert from 'node:assert/strict';
import http from 'node:http';
import type net from 'node:net';
import { test } from 'node:test';
import { freePorts } from '../testkit/loopback.js';
import { counterValue, scrapeFsyncs } from './fsyncs.js';

const EXPOSITION = `# HELP etcd_disk_wal_fsync_duration_seconds The latency distributions of fsync called by WAL.
# TYPE etcd_disk_wal_fsync_duration_seconds histogram
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.001"} 3
etcd_disk_wal_fsync_duration_seconds_bucket{le="+Inf"} 7
etcd_disk_wal_fsync_duration_seconds_sum 0.0123
etcd_disk_wal_fsync_duration_seconds_count 7
etcd_disk_wal_fsync_duration_seconds_count_extra 100
`;

test('counterValue: the named series summed; another metric with the same prefix is not it; absent is undefined', () => {
  assert.equal(counterValue(EXPOSITION, 'etcd_disk_wal_fsync_duration_seconds_count'), 7);
  assert.equal(counterValue('kvs_wal_fsync_duration_seconds_count{a="1"} 2\nkvs_wal_fsync_duration_seconds_count{a="2"} 3\n', 'kvs_wal_fsync_duration_seconds_count'), 5);
  assert.equal(counterValue(EXPOSITION, 'kvs_wal_fsync_duration_seconds_count'), undefined);
});

test('scrapeFsyncs: sums the members; null when one is not listening, answers an error, or lacks the counter', async (t) => {
  const server = http.createServer((req, res) => {
    if (req.url === '/metrics') res.end(EXPOSITION);
    else if (req.url === '/empty') res.end('# nothing\n');
    else res.writeHead(500).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const base = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  assert.equal(await scrapeFsyncs('etcd', [`${base}/metrics`, `${base}/metrics`]), 14);
  const [closed] = await freePorts(1);
  assert.equal(await scrapeFsyncs('etcd', [`${base}/metrics`, `http://127.0.0.1:${closed}/metrics`]), null);
  assert.equal(await scrapeFsyncs('etcd', [`${base}/broken`]), null);
  assert.equal(await scrapeFsyncs('etcd', [`${base}/empty`]), null);
  assert.equal(await scrapeFsyncs('kvs', [`${base}/metrics`]), null);
});
