// A load-generator process: runs some of a workload's clients (each with its own gRPC
// connection) as told by the main process over IPC, and sends back the latency of every
// request that started in the measured window.
import { performance } from 'node:perf_hooks';
import { BENCH_PASSWORD, BENCH_USER } from './auth.js';
import { KvClient, type ClientKind } from '../testkit/kv-client.js';
import { DATA_AREA, key, value } from './keys.js';
import type { FromWorker, PreloadRequest, RunRequest, ToWorker } from './protocol.js';
import { workload } from './workloads/index.js';
import type { Op } from './workload.js';

function send(msg: FromWorker): void {
  process.send!(msg);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function connectAll(kind: ClientKind, endpoints: string[], n: number, first = 0): Promise<KvClient[]> {
  const clients = Array.from({ length: n }, (_, i) => new KvClient(endpoints[(first + i) % endpoints.length]!, kind));
  await Promise.all(clients.map((c) => c.connect()));
  return clients;
}

async function preload(req: PreloadRequest): Promise<void> {
  const clients = await connectAll(req.client, [req.endpoint], req.clients);
  let next = req.from;
  try {
    await Promise.all(
      clients.map(async (c) => {
        const v = value(req.valueBytes);
        while (next < req.to) {
          const from = next;
          next = Math.min(req.to, from + req.batch);
          const pairs: [Buffer, Buffer][] = [];
          for (let i = from; i < next; i++) pairs.push([key(DATA_AREA, i), v]);
          await c.putMany(pairs);
        }
      }),
    );
  } finally {
    for (const c of clients) c.close();
  }
  send({ type: 'preloaded', keys: req.to - req.from });
}

async function run(req: RunRequest): Promise<void> {
  const w = workload(req.workload);
  if (!w.op) throw new Error(`workload ${w.name} has no timed phase`);
  const clients = await Promise.all(
    req.clientIds.map(async (id) => ({ id, kv: (await connectAll(req.client, req.endpoints, 1, id))[0]! })),
  );
  // Preallocated; doubled in the rare case it fills up.
  let lat = new Float64Array(1 << 20);
  let n = 0;
  let bytes = 0;
  let errors = 0;
  let firstError: string | undefined;
  const origin = performance.timeOrigin;
  const measureFrom = req.measureAt - origin;
  const end = req.endAt - origin;
  if (w.auth) {
    // Each client logs in once, before the timed phase (a bcrypt check on the server each).
    try {
      await Promise.all(clients.map(({ kv }) => kv.authenticate(BENCH_USER, BENCH_PASSWORD)));
      if (Date.now() > req.measureAt) throw new Error(`${w.name}: the clients' logins lasted into the measured window`);
    } catch (err) {
      for (const c of clients) c.kv.close();
      throw err;
    }
  }
  await sleep(req.startAt - Date.now());
  const ops: Op[] = [];
  try {
    await Promise.all(
      clients.map(async ({ id, kv }) => {
        const op = w.op!({ kv, client: id, clients: req.totalClients, opts: req.opts, value: value(req.opts.valueBytes) });
        ops.push(op);
        for (;;) {
          const t0 = performance.now();
          if (t0 >= end) return;
          try {
            const res = await op();
            if (t0 >= measureFrom) {
              if (n === lat.length) {
                const bigger = new Float64Array(lat.length * 2);
                bigger.set(lat);
                lat = bigger;
              }
              lat[n++] = performance.now() - t0;
              bytes += res.length;
            }
          } catch (err) {
            if (t0 >= measureFrom) errors++;
            firstError ??= (err as Error).message;
            await sleep(10); // a failing server must not turn this into a busy loop
          }
        }
      }),
    );
  } finally {
    for (const op of ops) op.close?.();
    for (const c of clients) c.kv.close();
  }
  const relogins = clients.reduce((r, c) => r + c.kv.relogins, 0);
  send({ type: 'result', latencies: lat.slice(0, n), bytes, errors, ...(firstError ? { firstError } : {}), ...(relogins ? { relogins } : {}) });
}

process.on('message', (msg: ToWorker) => {
  const job = msg.type === 'preload' ? preload(msg) : run(msg);
  job.catch((err: Error) => send({ type: 'failed', message: err.stack ?? err.message }));
});
process.on('disconnect', () => process.exit(0));
send({ type: 'ready' });
