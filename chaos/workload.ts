// The chaos workload: client workers on every node, recording what they see for chaos/check.
//
// Register workers do linearizable gets, puts and compare-and-swap Txns on a few keys. Each key
// slot moves on to a fresh key once its history is a few hundred operations long or has
// collected many unknown outcomes, which keeps every key cheap to check (docs/reliability.md).
// Append workers put a fresh key under a set's prefix per append; the final read of the prefix
// tells which acknowledged appends survived (checkAppendSet).
//
// The clients are testkit/kv-client.ts's h2 channel: one HTTP/2 connection per worker, no
// retries. A client that retries on its own could report a CAS that took effect as failed
// (its retry finding the new value), which would make the history lie. Every error on a write
// is an unknown outcome: even `no leader` or `leader changed` can come after the entry reached
// a follower that later leads and applies it (docs/cluster.md, staged entries).
import type { KvOperation, AppendAttempt } from './check/index.js';
import { KvClient } from '../testkit/kv-client.js';
import { decode, encode } from '../shared/proto/index.js';
import { service } from '../shared/proto/index.js';

const TXN = service('etcdserverpb.KV').Txn!.path;
const OP_DEADLINE_MS = 2000;
/** Pause after an error, so a refused connection does not turn into a busy loop. */
const ERROR_BACKOFF_MS = 150;
const KEYS = 3;
const MAX_OPS_PER_KEY = 250;
const MAX_UNKNOWN_PER_KEY = 12;
const SETS = 3;

export interface WorkloadStats {
  ok: number;
  /** Reads that failed (no effect, by definition). */
  failed: number;
  /** Writes whose outcome is unknown. */
  unknown: number;
}

interface Slot {
  gen: number;
  ops: number;
  unknown: number;
}

const now = (): bigint => process.hrtime.bigint();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class Workload {
  readonly history: KvOperation[] = [];
  readonly appends: AppendAttempt[] = [];
  readonly stats: WorkloadStats = { ok: 0, failed: 0, unknown: 0 };
  /** Monotonic times (ns) at which a write was acknowledged, in order; for recovery figures. */
  readonly acks: bigint[] = [];
  /** Call and acknowledgement times of each append, by set prefix + value (to place a lost one). */
  readonly appendTimes = new Map<string, { call: bigint; ret?: bigint }>();
  private readonly slots: Slot[] = Array.from({ length: KEYS }, () => ({ gen: 0, ops: 0, unknown: 0 }));
  private readonly keysUsed = new Set<string>();
  private stopping = false;
  private readonly running: Promise<void>[] = [];
  private readonly clients: KvClient[] = [];

  constructor(
    private readonly rand: () => number,
    /** A label for this run's keys, so runs on one store never share a key. */
    private readonly runId: string,
  ) {}

  /** Starts `registerWorkers` register workers and one append worker per endpoint. */
  start(endpoints: readonly string[], registerWorkers: number): void {
    endpoints.forEach((endpoint, n) => {
      for (let w = 0; w < registerWorkers; w++) this.running.push(this.registerWorker(`n${n + 1}.r${w}`, this.client(endpoint)));
      this.running.push(this.appendWorker(`n${n + 1}.a`, this.client(endpoint)));
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.running);
    for (const c of this.clients) c.close();
  }

  private client(endpoint: string): KvClient {
    const c = new KvClient(endpoint);
    this.clients.push(c);
    return c;
  }

  private key(slot: number): string {
    const k = `chaos/${this.runId}/reg/${slot}/${this.slots[slot]!.gen}`;
    this.keysUsed.add(k);
    return k;
  }

  private retire(slot: number, unknown: boolean): void {
    const s = this.slots[slot]!;
    s.ops++;
    if (unknown) s.unknown++;
    if (s.ops >= MAX_OPS_PER_KEY || s.unknown >= MAX_UNKNOWN_PER_KEY) this.slots[slot] = { gen: s.gen + 1, ops: 0, unknown: 0 };
  }

  private async registerWorker(name: string, c: KvClient): Promise<void> {
    let seq = 0;
    const lastSeen = new Map<string, string | null>();
    while (!this.stopping) {
      const slot = Math.floor(this.rand() * KEYS);
      const key = this.key(slot);
      const r = this.rand();
      const value = `${name}.${seq++}`;
      let ok: boolean;
      if (r < 0.4) {
        ok = await this.get(c, name, key, lastSeen);
      } else if (r < 0.7) {
        ok = await this.write(name, key, { f: 'put', value }, async () => {
          await c.put(Buffer.from(key), Buffer.from(value), OP_DEADLINE_MS);
          return {};
        });
      } else {
        const expected = lastSeen.has(key) ? lastSeen.get(key)! : null;
        ok = await this.write(name, key, { f: 'cas', expected, value }, async () => {
          const res = decode('etcdserverpb.TxnResponse', await c.call(TXN, casRequest(key, expected, value), OP_DEADLINE_MS));
          if (res.succeeded) lastSeen.set(key, value);
          return { succeeded: Boolean(res.succeeded) };
        });
      }
      this.retire(slot, !ok && r >= 0.4);
      if (!ok) await sleep(ERROR_BACKOFF_MS);
    }
  }

  private async get(c: KvClient, client: string, key: string, lastSeen: Map<string, string | null>): Promise<boolean> {
    const call = now();
    try {
      const value = await readValue(c, key);
      this.history.push({ client, key, input: { f: 'get' }, call, return: now(), output: { value } });
      lastSeen.set(key, value);
      this.stats.ok++;
      return true;
    } catch {
      this.stats.failed++; // an unanswered read constrains nothing; the checker drops it anyway
      return false;
    }
  }

  private async write(client: string, key: string, input: KvOperation['input'], send: () => Promise<{ succeeded?: boolean }>): Promise<boolean> {
    const call = now();
    try {
      const output = await send();
      const ret = now();
      this.history.push({ client, key, input, call, return: ret, output });
      this.acks.push(ret);
      this.stats.ok++;
      return true;
    } catch {
      this.history.push({ client, key, input, call });
      this.stats.unknown++;
      return false;
    }
  }

  private async appendWorker(name: string, c: KvClient): Promise<void> {
    let seq = 0;
    while (!this.stopping) {
      const set = this.setPrefix(Math.floor(this.rand() * SETS));
      const value = `${name}.${seq++}`;
      const times: { call: bigint; ret?: bigint } = { call: now() };
      this.appendTimes.set(set + value, times);
      try {
        await c.put(Buffer.from(set + value), Buffer.from('x'), OP_DEADLINE_MS);
        times.ret = now();
        this.acks.push(times.ret);
        this.appends.push({ key: set, value, outcome: 'ok' });
        this.stats.ok++;
      } catch {
        this.appends.push({ key: set, value, outcome: 'unknown' });
        this.stats.unknown++;
        await sleep(ERROR_BACKOFF_MS);
      }
    }
  }

  private setPrefix(i: number): string {
    return `chaos/${this.runId}/set/${i}/`;
  }

  /**
   * After the faults healed: one linearizable get of every register key (part of the history,
   * so a write acknowledged and then gone shows as an anomaly) and one read of every set.
   * Retries each until it answers (through `c`, a node known to be healthy).
   */
  async finalReads(c: KvClient): Promise<Map<string, string[]>> {
    for (const key of this.keysUsed) {
      await untilAnswered(async () => {
        const call = now();
        const value = await readValue(c, key);
        this.history.push({ client: 'final', key, input: { f: 'get' }, call, return: now(), output: { value } });
      });
    }
    const sets = new Map<string, string[]>();
    for (let i = 0; i < SETS; i++) {
      const prefix = this.setPrefix(i);
      await untilAnswered(async () => {
        const start = Buffer.from(prefix);
        const end = Buffer.from(prefix);
        end[end.length - 1]!++;
        const res = decode('etcdserverpb.RangeResponse', await c.range(start, { rangeEnd: end }, 10_000));
        sets.set(prefix, (res.kvs ?? []).map((kv: { key: Uint8Array }) => Buffer.from(kv.key).toString().slice(prefix.length)));
      });
    }
    return sets;
  }
}

async function readValue(c: KvClient, key: string): Promise<string | null> {
  const res = decode('etcdserverpb.RangeResponse', await c.range(Buffer.from(key), {}, OP_DEADLINE_MS));
  const kv = res.kvs?.[0];
  return kv ? Buffer.from(kv.value).toString() : null;
}

/** A Txn: if the key holds `expected` (null: the key is absent), put `value`. */
function casRequest(key: string, expected: string | null, value: string): Buffer {
  const k = Buffer.from(key);
  const compare =
    expected === null
      ? { key: k, target: 1 /* CREATE */, result: 0 /* EQUAL */, createRevision: 0 }
      : { key: k, target: 3 /* VALUE */, result: 0 /* EQUAL */, value: Buffer.from(expected) };
  return encode('etcdserverpb.TxnRequest', { compare: [compare], success: [{ requestPut: { key: k, value: Buffer.from(value) } }] });
}

async function untilAnswered(fn: () => Promise<void>, deadlineMs = 60_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`final read failed for ${deadlineMs} ms: ${(err as Error).message}`);
      await sleep(200);
    }
  }
}
