// The node's HTTP observability endpoints (--metrics-addr), end to end: a real node, real
// clients, and a real Prometheus (Debian's `prometheus`) scraping it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { client, etcdctl, freePort, localObjectStore, objectStoreArgs, onCleanup, pollUntil, runCommand, startKvs, startProcess, tempDir, KVS_BIN, REPO_ROOT, type Ctx } from '../testkit/harness.js';
import { SPEC_METRIC_NAMES } from '../shared/metrics.js';
import { get, samples, scrape, value, type Sample } from '../testkit/metrics-scrape.js';

const PROMETHEUS_BIN = '/usr/bin/prometheus';

async function metricsNode(t: Ctx, args: string[] = []) {
  const addr = `127.0.0.1:${await freePort()}`;
  const node = await startKvs(t, { args: ['--metrics-addr', addr, ...args] });
  return { node, addr };
}

test('/metrics has every metric of the spec, with values the writes imply; a real Prometheus scrapes it', async (t) => {
  const { node, addr } = await metricsNode(t);
  const etcd = client(t, node.endpoint);

  // Writes of every kind, as Kubernetes and plain clients make them.
  for (let i = 0; i < 3; i++) await etcd.put(`/registry/pods/p${i}`).value('v');
  await etcd.if('/registry/cm/a', 'Mod', '==', 0).then(etcd.put('/registry/cm/a').value('1')).commit(); // create
  await etcd.if('/registry/cm/b', 'Mod', '==', 0).then(etcd.put('/registry/cm/b').value('1')).commit(); // create
  const rev = Number((await etcd.get('/registry/cm/a').exec()).kvs[0]!.mod_revision);
  await etcd.if('/registry/cm/a', 'Mod', '==', rev).then(etcd.put('/registry/cm/a').value('2')).else(etcd.get('/registry/cm/a')).commit(); // update
  const revB = Number((await etcd.get('/registry/cm/b').exec()).kvs[0]!.mod_revision);
  await etcd.if('/registry/cm/b', 'Mod', '==', revB).then(etcd.delete().key('/registry/cm/b')).else(etcd.get('/registry/cm/b')).commit(); // guarded delete
  await etcd.delete().key('/registry/pods/p0'); // DeleteRange
  await etcd.if('x', 'Value', '==', 'y').then(etcd.put('x').value('z')).commit(); // another txn
  const put = await etcdctl(node.endpoint, ['put', 'missing', '--ignore-value']); // an error
  assert.notEqual(put.exitCode, 0);
  const head = Number((await etcd.get('/registry/pods/p1').exec()).header.revision);
  assert.equal((await etcdctl(node.endpoint, ['compact', String(head - 1)])).exitCode, 0);
  // Two client watches open now.
  const w1 = await etcd.watch().prefix('/registry/').create();
  const w2 = await etcd.watch().key('x').create();
  onCleanup(t, () => Promise.all([w1.cancel(), w2.cancel()]));

  const res = await get(addr, '/metrics');
  assert.equal(res.status, 200);
  for (const name of SPEC_METRIC_NAMES) {
    assert.match(res.body, new RegExp(`^# HELP ${name} \\S`, 'm'), `HELP of ${name}`);
    assert.match(res.body, new RegExp(`^# TYPE ${name} (counter|gauge|histogram)$`, 'm'), `TYPE of ${name}`);
  }
  const all = samples(res.body);
  // The spec's labels only: no component label on kvs_* however many processes count.
  for (const s of all.filter((x) => x.name.startsWith('kvs_'))) assert.ok(!('component' in s.labels), `${s.name} has a component label`);
  for (const c of ['supervisor', 'storage', 'gateway']) assert.ok(value(all, 'process_cpu_seconds_total', { component: c }) !== undefined, `process metrics of ${c}`);
  const writes = (op: string) => value(all, 'kvs_writes_total', { op });
  assert.deepEqual(
    { put: writes('put'), create: writes('create'), update: writes('update'), delete: writes('delete'), txn: writes('txn'), compact: writes('compact') },
    { put: 3, create: 2, update: 1, delete: 2, txn: 1, compact: 1 },
  );
  assert.equal(value(all, 'kvs_write_errors_total', { op: 'put' }), 1);
  assert.equal(value(all, 'kvs_write_duration_seconds_count', { op: 'put' }), 3);
  assert.equal(value(all, 'kvs_current_revision'), head);
  assert.equal(value(all, 'kvs_compact_revision'), head - 1);
  assert.equal(value(all, 'kvs_watch_active'), 2);
  assert.equal(value(all, 'kvs_watch_active_prefixes'), 1);
  assert.equal(value(all, 'kvs_role', { role: 'single' }), 1);
  assert.equal(value(all, 'kvs_role', { role: 'leader' }), 0);

  // A real Prometheus scrapes the node and sees the same values.
  const dir = await tempDir(t, 'kvs-prometheus-');
  const config = path.join(dir, 'prometheus.yml');
  fs.writeFileSync(config, `global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: kvs\n    static_configs:\n      - targets: ['${addr}']\n`);
  const promAddr = `127.0.0.1:${await freePort()}`;
  const prom = await startProcess(t, PROMETHEUS_BIN, [`--config.file=${config}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=${promAddr}`, '--log.level=warn']);
  const query = async (q: string): Promise<number | undefined> => {
    try {
      const r = await get(promAddr, `/api/v1/query?query=${encodeURIComponent(q)}`);
      const result = JSON.parse(r.body).data?.result ?? [];
      return result.length === 1 ? Number(result[0].value[1]) : undefined;
    } catch {
      return undefined; // not up yet
    }
  };
  const seen = await pollUntil(
    `Prometheus to scrape the node (output: ${prom.output().slice(-2000)})`,
    async () => ((await query('up{job="kvs"}')) === 1 && (await query('kvs_writes_total{op="put"}')) !== undefined ? true : undefined),
    60_000,
  );
  assert.ok(seen);
  assert.equal(await query('kvs_writes_total{op="put"}'), 3);
  assert.equal(await query('kvs_writes_total{op="create"}'), 2);
  assert.equal(await query('kvs_current_revision'), head);
  assert.equal(await query('kvs_watch_active'), 2);
  assert.equal(await query('kvs_role{role="single"}'), 1);
  assert.ok((await query('sum(process_resident_memory_bytes{component="storage"})'))! > 0);
  // Every query of the Grafana dashboard is valid PromQL on the node's metrics, and those over
  // kvs_* series that exist now return data.
  const dashboard = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'docs/grafana/kvs-dashboard.json'), 'utf8'));
  const exprs: string[] = [];
  const walk = (panels: { panels?: unknown[]; targets?: { expr?: string }[] }[] = []) => {
    for (const p of panels) {
      walk(p.panels as typeof panels);
      for (const target of p.targets ?? []) if (target.expr) exprs.push(target.expr);
    }
  };
  walk(dashboard.panels);
  assert.ok(exprs.length >= 10, `dashboard queries: ${exprs.length}`);
  for (const expr of exprs) {
    const r = await get(promAddr, `/api/v1/query?query=${encodeURIComponent(expr.replaceAll('$instance', '.*'))}`);
    const body = JSON.parse(r.body);
    assert.equal(body.status, 'success', `${expr}: ${r.body}`);
  }
  const current = JSON.parse((await get(promAddr, `/api/v1/query?query=${encodeURIComponent('kvs_current_revision{instance=~".*"}')}`)).body);
  assert.equal(current.data.result.length, 1);

  // More writes move the counter by exactly that many.
  for (let i = 0; i < 5; i++) await etcd.put(`k${i}`).value('v');
  await pollUntil('Prometheus to see 8 puts', async () => ((await query('kvs_writes_total{op="put"}')) === 8 ? true : undefined), 30_000);
});

test('group commit metrics: kvs_write_batch_size counts every write request once, kvs_wal_fsync_duration_seconds one fdatasync per batch that wrote', async (t) => {
  // A fresh node without leases, auth or automatic compaction: the test's puts are the only
  // requests that reach storage's write queue, so the sums below are exact. How the burst is
  // split into batches depends on timing, so only bounds are asserted for it.
  const { node, addr } = await metricsNode(t);
  const etcd = client(t, node.endpoint);
  const N = 20;
  const M = 200;
  const delta = (from: Sample[], to: Sample[], name: string, labels: Record<string, string> = {}) => {
    const a = value(from, name, labels);
    const b = value(to, name, labels);
    assert.ok(a !== undefined && b !== undefined, `${name} ${JSON.stringify(labels)} is exposed`);
    return b - a;
  };
  const histogram = (from: Sample[], to: Sample[], name: string) => ({
    count: delta(from, to, `${name}_count`),
    sum: delta(from, to, `${name}_sum`),
    le: (le: string) => delta(from, to, `${name}_bucket`, { le }),
  });
  const consistent = (all: Sample[], name: string) => {
    // Cumulative buckets never decrease, and +Inf is the count.
    const buckets = all.filter((s) => s.name === `${name}_bucket`);
    assert.ok(buckets.length > 1, `${name} buckets`);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i]!.value >= buckets[i - 1]!.value, `${name} buckets are cumulative`);
    assert.equal(buckets.at(-1)!.labels.le, '+Inf');
    assert.equal(buckets.at(-1)!.value, value(all, `${name}_count`));
  };

  const before = await scrape(addr);
  // Serial puts: each is alone in its batch (the next is sent once the previous is answered),
  // and each appends one record, so one batch of 1 and one fdatasync per put.
  for (let i = 0; i < N; i++) await etcd.put(`serial-${i}`).value('v');
  const serial = await scrape(addr);
  const serialBatches = histogram(before, serial, 'kvs_write_batch_size');
  assert.deepEqual({ count: serialBatches.count, sum: serialBatches.sum, ones: serialBatches.le('1') }, { count: N, sum: N, ones: N });
  assert.equal(delta(before, serial, 'kvs_wal_fsync_duration_seconds_count'), N);

  // A burst of concurrent puts: every request is in exactly one batch; at most one fdatasync
  // per batch, at least one in all.
  await Promise.all(Array.from({ length: M }, (_, i) => etcd.put(`burst-${i}`).value('v')));
  const after = await scrape(addr);
  const burst = histogram(serial, after, 'kvs_write_batch_size');
  assert.equal(burst.sum, M);
  assert.ok(burst.count >= 1 && burst.count <= M, `burst batches: ${burst.count}`);
  const fsyncs = delta(serial, after, 'kvs_wal_fsync_duration_seconds_count');
  assert.ok(fsyncs >= 1 && fsyncs <= burst.count, `burst fsyncs: ${fsyncs}, batches: ${burst.count}`);

  // Over the whole run: requests = the puts storage counted as writes; fsyncs <= batches <= requests.
  const all = histogram(before, after, 'kvs_write_batch_size');
  assert.equal(all.sum, N + M);
  assert.equal(all.sum, delta(before, after, 'kvs_writes_total', { op: 'put' }));
  const allFsyncs = delta(before, after, 'kvs_wal_fsync_duration_seconds_count');
  assert.ok(allFsyncs >= 1 && allFsyncs <= all.count && all.count <= all.sum, `fsyncs ${allFsyncs}, batches ${all.count}, requests ${all.sum}`);
  consistent(after, 'kvs_write_batch_size');
  consistent(after, 'kvs_wal_fsync_duration_seconds');
  // etcd's fsync buckets are all there (1 ms x 2^k, to 8.192 s), so the two histograms compare bucket for bucket.
  for (let k = 0; k < 14; k++) assert.ok(value(after, 'kvs_wal_fsync_duration_seconds_bucket', { le: String(0.001 * 2 ** k) }) !== undefined, `bucket le=${0.001 * 2 ** k}`);
});

test('/healthz and /readyz: 503 with the reason while the node restores and replays, and while storage restarts; then 200', async (t) => {
  // A node whose restore takes a while: a prefix with many uploaded WAL records past its checkpoint.
  const store = await localObjectStore(t);
  const first = await startKvs(t, { objectStore: store, args: ['--checkpoint-interval', '1h'] });
  const etcd = client(t, first.endpoint);
  // The first checkpoint is taken soon after a fresh prefix starts; the writes come after it.
  await pollUntil('the first checkpoint', async () => (fs.existsSync(path.join(store.root, store.bucket)) && (await first.ctl(['status'])).stdout.includes('checkpoint at revision') ? true : undefined), 30_000);
  for (let i = 0; i < 40; i++) await Promise.all(Array.from({ length: 250 }, (_, j) => etcd.put(`key-${i}-${j}`).value('x'.repeat(100))));
  await first.stop();

  // The same prefix into an empty data directory: probe from before the supervisor listens.
  const addr = `127.0.0.1:${await freePort()}`;
  const probes: { status: number; body: string }[] = [];
  let probing = true;
  const prober = (async () => {
    while (probing) {
      try {
        const r = await get(addr, '/readyz');
        if (probes.at(-1)?.body !== r.body) probes.push(r);
      } catch {
        // not listening yet
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  })();
  const node = await startKvs(t, { objectStore: store, args: ['--metrics-addr', addr] });
  await pollUntil('readyz 200', async () => ((await get(addr, '/readyz')).status === 200 ? true : undefined), 60_000);
  probing = false;
  await prober;
  const notReady = probes.filter((p) => p.status === 503);
  assert.ok(notReady.length > 0, `no 503 seen during the restore: ${JSON.stringify(probes)}`);
  assert.ok(notReady.some((p) => /archiver is starting|storage is starting/.test(p.body)), JSON.stringify(notReady));
  for (const p of notReady) assert.match(p.body, /^[^\n]+\n$/, 'one line');
  assert.equal(probes.at(-1)!.status, 200);
  assert.equal((await get(addr, '/healthz')).status, 200);
  assert.equal(Number((await client(t, node.endpoint).get('key-39-249').exec()).kvs.length), 1);

  // Storage killed: not ready until it is back.
  const storagePid = JSON.parse((await node.ctl(['status', '--json'])).stdout).components.find((c: { name: string }) => c.name === 'storage').pid;
  process.kill(storagePid, 'SIGKILL');
  const during = await pollUntil('readyz 503 after the storage kill', async () => {
    const r = await get(addr, '/readyz');
    return r.status === 503 ? r.body : undefined;
  }, 10_000);
  assert.match(during, /^storage is (restarting|starting)/);
  await pollUntil('readyz 200 again', async () => ((await get(addr, '/readyz')).status === 200 ? true : undefined), 30_000);
  assert.equal((await node.ctl(['status'])).stdout.split('\n')[0]!.startsWith('node ready'), true);
});

test('/readyz is 503 while storage refuses writes for lack of disk space, 200 once space is back', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root, to mount a small tmpfs as the data directory');
  const dir = await tempDir(t, 'kvs-small-fs-');
  const mounted = await runCommand('mount', ['-t', 'tmpfs', '-o', 'size=256m', 'tmpfs', dir]);
  if (mounted.exitCode !== 0) return t.skip(`cannot mount a tmpfs here: ${mounted.stderr.trim()}`);
  onCleanup(t, () => runCommand('umount', ['-l', dir]));
  const dataDir = path.join(dir, 'data');
  const addr = `127.0.0.1:${await freePort()}`;
  const node = await startKvs(t, { dataDir, args: ['--metrics-addr', addr] });
  assert.equal((await get(addr, '/readyz')).status, 200);
  // Fill the filesystem to below storage's 64 MiB floor.
  const free = () => { const s = fs.statfsSync(dir); return s.bavail * s.bsize; };
  const filler = path.join(dir, 'filler');
  fs.writeFileSync(filler, Buffer.alloc(free() - 32 * 1024 * 1024));
  const reason = await pollUntil('readyz 503 on a full disk', async () => {
    const r = await get(addr, '/readyz');
    return r.status === 503 ? r.body : undefined;
  }, 10_000);
  assert.match(reason, /storage refuses writes: .* free/);
  const put = await etcdctl(node.endpoint, ['put', 'k', 'v']);
  assert.notEqual(put.exitCode, 0);
  assert.match(put.stderr, /refuses writes/);
  fs.rmSync(filler);
  await pollUntil('readyz 200 once space is back', async () => ((await get(addr, '/readyz')).status === 200 ? true : undefined), 10_000);
  assert.equal((await etcdctl(node.endpoint, ['put', 'k', 'v'])).exitCode, 0);
});

test('bad input: an occupied or malformed --metrics-addr refuses to start, as does an unknown flag on any command; unknown paths and methods get 404/405', async (t) => {
  const busy = net.createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => busy.once('listening', resolve));
  onCleanup(t, () => new Promise((resolve) => busy.close(resolve)));
  const port = (busy.address() as net.AddressInfo).port;
  const dataDir = await tempDir(t, 'kvs-busy-');
  const occupied = await runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', dataDir, '--listen', `127.0.0.1:${await freePort()}`, '--metrics-addr', `127.0.0.1:${port}`], { timeoutMs: 20_000 });
  assert.equal(occupied.exitCode, 2);
  assert.equal(occupied.stderr, `kvs: --metrics-addr 127.0.0.1:${port}: address already in use\n`);
  const malformed = await runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', dataDir, '--metrics-addr', 'localhost'], { timeoutMs: 20_000 });
  assert.equal(malformed.exitCode, 2);
  assert.equal(malformed.stderr, 'kvs: --metrics-addr must be host:port, got "localhost"\n');

  // The other observability flags: one line naming the flag and the value, exit code 2.
  const refused: [string[], string][] = [
    [['--auto-compact-mode', 'daily'], 'kvs: --auto-compact-mode must be time or revision, got "daily"\n'],
    [['--auto-compact-retention', '1h'], 'kvs: --auto-compact-retention needs --auto-compact-mode time\n'],
    [['--auto-compact-mode', 'time', '--auto-compact-retention', 'a week'], 'kvs: --auto-compact-retention must be a duration such as 500ms, 30s or 10m, got "a week"\n'],
    [['--log-format', 'xml'], 'kvs: --log-format must be json or pretty, got "xml"\n'],
    [['--metrics-adr', '127.0.0.1:1'], 'kvs: unknown flag --metrics-adr (did you mean --metrics-addr?); `kvs <command> --help` lists the flags\n'],
  ];
  for (const [args, stderr] of refused) {
    const r = await runCommand(process.execPath, [KVS_BIN, 'run', '--data-dir', dataDir, ...args], { timeoutMs: 20_000 });
    assert.deepEqual([r.exitCode, r.stderr], [2, stderr], args.join(' '));
  }
  // Every command refuses a flag it does not know, before doing anything, naming the closest one.
  const unknown = (flag: string, near?: string) => `kvs: unknown flag ${flag}${near ? ` (did you mean ${near}?)` : ''}; \`kvs <command> --help\` lists the flags\n`;
  for (const [args, stderr] of [
    [['run', '--data-dir', dataDir, '--auth-enabld'], unknown('--auth-enabld', '--auth-enabled')],
    [['component', 'gateway', '--data-dir', dataDir, '--client-tls-certs', 'x'], unknown('--client-tls-certs', '--client-tls-cert')],
    [['ctl', 'status', '--data-dir', dataDir, '--jsn'], unknown('--jsn', '--json')],
    [['restore', '--data-dir', dataDir, '--s3-bukcet', 'b'], unknown('--s3-bukcet', '--s3-bucket')],
    [['status', '--s3-prefx', 'p/'], unknown('--s3-prefx', '--s3-prefix')],
    [['gc', '--kepp', '3'], unknown('--kepp', '--keep')],
    [['local-cluster', '--nodez', '3'], unknown('--nodez', '--nodes')],
    [['restore-point', '--zzz'], unknown('--zzz')],
  ] as [string[], string][]) {
    const r = await runCommand(process.execPath, [KVS_BIN, ...args], { timeoutMs: 20_000 });
    assert.deepEqual([r.exitCode, r.stderr], [2, stderr], args.join(' '));
  }

  const { node, addr } = await metricsNode(t);
  assert.equal((await get(addr, '/nope')).status, 404);
  assert.equal((await get(addr, '/metrics', { method: 'POST', body: 'x' })).status, 405);
  assert.equal((await get(addr, '/readyz', { method: 'DELETE' })).status, 405);
  assert.equal((await get(addr, '/readyz?verbose=1')).status, 200);
  // Garbage on the socket: the connection is answered or closed, the node keeps serving.
  await new Promise<void>((resolve) => {
    const s = net.connect(Number(addr.split(':')[1]), '127.0.0.1', () => s.end('\x00\x01garbage\r\n\r\n'));
    s.on('close', () => resolve());
    s.on('error', () => resolve());
    s.resume();
  });
  assert.equal((await get(addr, '/healthz')).status, 200);
  assert.equal((await etcdctl(node.endpoint, ['put', 'still', 'up'])).exitCode, 0);
});

test('a SIGTERM to the whole process group stops the node quietly: no component is restarted', async (t) => {
  const store = await localObjectStore(t);
  const node = await startKvs(t, { args: objectStoreArgs(store) });
  await etcdctl(node.endpoint, ['put', 'a', 'b']);
  process.kill(-node.pid, 'SIGTERM');
  const exit = await node.stop();
  assert.equal(exit.code, 0);
  assert.doesNotMatch(node.output(), /exited unexpectedly|restarting|crash-looping/);
  assert.match(node.output(), /kvs stopped/);
});
