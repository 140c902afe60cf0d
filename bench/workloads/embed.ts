// embed-seq-put / embed-seq-get / embed-par-put: a node embedded in a program (the package's
// main export, embed/) against etcd over gRPC. No client port and no process hop: an embedded
// put costs the engine's group commit and its fsync, a get a read of LMDB. Trials, not a timed
// phase of the load generator: for kvs each trial runs bench/embed-trial.ts, a program that
// embeds a node on a fresh temp directory, in a session of its own as the servers the bench
// starts are (docs/perf/scheduling-group.md; the kvs server the suite starts stays idle); for
// etcd it drives the etcd server from this process (1 or 16 connections, as the load
// generator's clients would).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { encode } from '../../shared/proto/index.js';
import { KvClient } from '../../testkit/kv-client.js';
import { open, type Node } from '../../embed/index.js';
import { REPO_ROOT } from '../servers.js';
import { key, randomIndex, value } from '../keys.js';
import { median } from '../stats.js';
import { PARALLEL, fmt, type MeasureTarget, type Workload, type WorkloadOptions } from '../workload.js';

/** Keys the get workload reads from (written first, by each trial). */
const GET_KEYS = 1000;
const WARMUP_MS = 300;

export interface Side {
  /** One operation of worker `w` (0 ≤ w < workers). */
  op(w: number): Promise<unknown>;
  close(): Promise<void>;
}

/** Ops per second of `workers` loops of `op` over `ms`, after a short warm-up. */
export async function timed(side: Side, workers: number, ms: number): Promise<number> {
  const loop = async (w: number, until: number, count: { n: number }) => {
    while (performance.now() < until) {
      await side.op(w);
      count.n++;
    }
  };
  const warm = { n: 0 };
  const warmEnd = performance.now() + WARMUP_MS;
  await Promise.all(Array.from({ length: workers }, (_, w) => loop(w, warmEnd, warm)));
  const count = { n: 0 };
  const start = performance.now();
  await Promise.all(Array.from({ length: workers }, (_, w) => loop(w, start + ms, count)));
  return count.n / ((performance.now() - start) / 1000);
}

async function embeddedNode(): Promise<{ node: Node; close(): Promise<void> }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-bench-embed-'));
  const node = await open({ dataDir: dir });
  return {
    node,
    async close() {
      await node.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function etcdClients(target: MeasureTarget, n: number): Promise<KvClient[]> {
  const clients = Array.from({ length: n }, () => new KvClient(target.kv.endpoint));
  await Promise.all(clients.map((c) => c.connect()));
  return clients;
}

export type Kind = 'put' | 'get';

const areaOf = (kind: Kind) => (kind === 'get' ? 'embed-get' : 'embed-put');
const spaceOf = (kind: Kind, opts: WorkloadOptions) => (kind === 'get' ? GET_KEYS : opts.preloadKeys);

/** The embedded side (bench/embed-trial.ts runs it): a node on a fresh temp directory. */
export async function embeddedSide(kind: Kind, workers: number, opts: WorkloadOptions): Promise<Side> {
  const values = Array.from({ length: workers }, () => value(opts.valueBytes));
  const [area, space] = [areaOf(kind), spaceOf(kind, opts)];
  const { node, close } = await embeddedNode();
  if (kind === 'get') for (let i = 0; i < GET_KEYS; i++) await node.put(key(area, i), values[0]!);
  const op = kind === 'put' ? (w: number) => node.put(key(area, randomIndex(space)), values[w]!) : () => node.get(key(area, randomIndex(space)));
  return { op, close };
}

/** One trial of the embedded side in a program of its own, in a session of its own; its ops/s. */
async function embeddedTrial(kind: Kind, workers: number, ms: number, opts: WorkloadOptions): Promise<number> {
  const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'bench', 'embed-trial.js'), JSON.stringify({ kind, workers, ms, opts })], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  if (code !== 0) throw new Error(`bench/embed-trial exited with ${code}: ${err.trim().split('\n').pop()}`);
  return (JSON.parse(out) as { opsPerSec: number }).opsPerSec;
}

async function etcdSide(kind: Kind, target: MeasureTarget, workers: number, opts: WorkloadOptions): Promise<Side> {
  const values = Array.from({ length: workers }, () => value(opts.valueBytes));
  const [area, space] = [areaOf(kind), spaceOf(kind, opts)];
  const clients = await etcdClients(target, workers);
  if (kind === 'get') for (let i = 0; i < GET_KEYS; i++) await clients[0]!.put(key(area, i), values[0]!);
  const serializableGet = (kv: KvClient) => kv.call('/etcdserverpb.KV/Range', encode('etcdserverpb.RangeRequest', { key: key(area, randomIndex(space)), serializable: true }));
  const op = kind === 'put' ? (w: number) => clients[w]!.put(key(area, randomIndex(space)), values[w]!) : (w: number) => serializableGet(clients[w]!);
  return {
    op,
    async close() {
      for (const c of clients) c.close();
    },
  };
}

function embedWorkload(name: string, kind: Kind, workers: number, summary: string): Workload {
  return {
    name,
    summary,
    clients: 0,
    preload: false,
    async trial(target, opts) {
      const ms = opts.quick ? 1000 : 3000;
      if (target.system === 'kvs') {
        const opsPerSec = await embeddedTrial(kind, workers, ms, opts);
        return { numbers: { opsPerSec }, note: `${fmt.int(opsPerSec)} ops/s embedded` };
      }
      const s = await etcdSide(kind, target, workers, opts);
      try {
        const opsPerSec = await timed(s, workers, ms);
        return { numbers: { opsPerSec }, note: `${fmt.int(opsPerSec)} ops/s over gRPC` };
      } finally {
        await s.close();
      }
    },
    summarize: (trials) => ({ opsPerSec: median(trials.map((t) => t.opsPerSec!)) }),
    metrics: [{ key: 'opsPerSec', label: 'ops/s', format: (v) => `${fmt.int(v)} ops/s (median of trials)`, better: 'higher' }],
  };
}

export const embedSeqPut = embedWorkload('embed-seq-put', 'put', 1, 'kvs: serial put() of a node embedded in a program (own session); etcd: serial Put over gRPC (1 client)');
export const embedSeqGet = embedWorkload('embed-seq-get', 'get', 1, `kvs: serial get() of an embedded node (${GET_KEYS} keys); etcd: serial serializable Range of one key over gRPC`);
export const embedParPut = embedWorkload('embed-par-put', 'put', PARALLEL, `kvs: ${PARALLEL} concurrent put() loops on an embedded node; etcd: Put by ${PARALLEL} clients (own connections)`);
