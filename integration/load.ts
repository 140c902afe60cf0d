// A write load for durability tests, and the checks after it. Concurrent writers put distinct
// keys (each key exactly once: client-side retries are off, so a put reaches the server at most
// once) and record every acknowledged put with its response revision. `verify` then checks:
//   - every acknowledged put is there, with its value and exactly its acknowledged revision;
//   - no two acknowledged puts share a revision;
//   - the revisions have no gaps: the keys present have exactly the mod revisions
//     2..current (each key is written once, nothing else writes), so every revision the
//     node handed out belongs to an acknowledged put or to a put whose answer was lost;
//   - nothing is there that no writer sent.

import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import type { TestContext } from 'node:test';
import { Etcd3, GRPCUnavailableError, GRPCDeadlineExceededError } from 'etcd3';
import { noop } from 'cockatiel';
import { onCleanup } from '../testkit/harness.js';

export interface Ack {
  key: string;
  value: string;
  revision: number;
}

export interface Failure {
  key: string;
  value: string;
  error: Error;
}

/** `count` writers, each its own etcd3 client, putting `prefix/w<i>/<n>` in a loop. */
export class Load {
  readonly acked: Ack[] = [];
  readonly failed: Failure[] = [];
  private readonly events = new EventEmitter();
  private stopping = false;
  private readonly writers: Promise<void>[] = [];

  constructor(
    t: TestContext,
    private readonly endpoint: string,
    private readonly count: number,
    private readonly prefix = 'load',
  ) {
    this.events.setMaxListeners(0);
    for (let i = 0; i < count; i++) {
      const c = new Etcd3({
        hosts: `http://${endpoint}`,
        // No retries and no circuit breaker: every put is sent at most once and its outcome
        // (acknowledged or failed) is what the server said.
        faultHandling: { host: () => noop, global: noop },
        // Reconnect quickly once the node is back.
        grpcOptions: { 'grpc.initial_reconnect_backoff_ms': 50, 'grpc.max_reconnect_backoff_ms': 500 },
      });
      onCleanup(t, () => c.close());
      this.writers.push(this.write(c, i));
    }
  }

  private async write(c: Etcd3, writer: number): Promise<void> {
    for (let seq = 0; !this.stopping; seq++) {
      const key = `${this.prefix}/w${writer}/${String(seq).padStart(6, '0')}`;
      const value = `${writer}:${seq}:${Math.random().toString(36).slice(2)}`;
      try {
        const res = await c.put(key).value(value).options({ deadline: Date.now() + 10_000 }).exec();
        this.acked.push({ key, value, revision: Number(res.header.revision) });
        this.events.emit('ack', this.acked.length);
      } catch (error) {
        this.failed.push({ key, value, error: error as Error });
        this.events.emit('fail', this.failed.length);
        // The node (or part of it) is down: try again shortly, not in a hot loop.
        await delay(20);
      }
    }
  }

  /** Resolves once `n` puts in total have been acknowledged; rejects after `timeoutMs`. */
  untilAcked(n: number, timeoutMs = 20_000): Promise<void> {
    return this.until('ack', () => this.acked.length >= n, `${n} acknowledged puts (have ${this.acked.length})`, timeoutMs);
  }

  /** Resolves once `n` puts in total have failed; rejects after `timeoutMs`. */
  untilFailed(n: number, timeoutMs = 20_000): Promise<void> {
    return this.until('fail', () => this.failed.length >= n, `${n} failed puts (have ${this.failed.length})`, timeoutMs);
  }

  private until(event: string, done: () => boolean, what: string, timeoutMs: number): Promise<void> {
    if (done()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        if (!done()) return;
        cleanup();
        resolve();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.events.off(event, check);
      };
      this.events.on(event, check);
    });
  }

  /** Stops the writers and waits for their last puts to finish. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.writers);
  }

  summary(): string {
    const kinds = new Map<string, number>();
    for (const f of this.failed) {
      const k = `${f.error.constructor.name}: ${f.error.message.split('\n')[0]}`;
      kinds.set(k, (kinds.get(k) ?? 0) + 1);
    }
    return `${this.acked.length} acknowledged, ${this.failed.length} failed${[...kinds].map(([k, n]) => `; ${n} x ${k}`).join('')}`;
  }
}

/**
 * Every acknowledged put present with its revision; revisions 2..current, no gaps, no
 * strangers. `extra` are keys written once outside the load (their revisions count too).
 */
export async function verify(c: Etcd3, load: Load, extra: string[] = [], prefix = 'load'): Promise<number> {
  const extraRevisions = await Promise.all(extra.map(async (k) => Number((await c.get(k).exec()).kvs[0]!.mod_revision)));
  const res = await c.getAll().prefix(`${prefix}/`).exec();
  const current = Number(res.header.revision);
  const present = new Map(res.kvs.map((kv) => [kv.key.toString(), kv]));

  const seen = new Map<number, string>();
  for (const ack of load.acked) {
    const other = seen.get(ack.revision);
    assert.equal(other, undefined, `revision ${ack.revision} acknowledged for both ${other} and ${ack.key}`);
    seen.set(ack.revision, ack.key);
    const kv = present.get(ack.key);
    assert.ok(kv, `acknowledged put of ${ack.key} at revision ${ack.revision} is lost (current revision ${current})`);
    assert.equal(kv.value.toString(), ack.value, `value of ${ack.key}`);
    assert.equal(Number(kv.mod_revision), ack.revision, `mod_revision of ${ack.key}`);
    assert.equal(Number(kv.create_revision), ack.revision, `create_revision of ${ack.key}`);
    assert.equal(kv.version, '1', `version of ${ack.key}`);
  }

  const sent = new Map<string, string>();
  for (const p of [...load.acked, ...load.failed]) sent.set(p.key, p.value);
  const revisions: number[] = [...extraRevisions];
  for (const [key, kv] of present) {
    assert.equal(sent.get(key), kv.value.toString(), `${key} is present but no writer sent that value`);
    revisions.push(Number(kv.mod_revision));
  }
  revisions.sort((a, b) => a - b);
  assert.equal(revisions.length, current - 1, `keys present ${revisions.length}, current revision ${current}: gaps or duplicates`);
  revisions.forEach((rev, i) => assert.equal(rev, i + 2, `revision ${i + 2} is not accounted for`));

  // The next write continues right after.
  const next = await c.put(`${prefix}-after/next`).value('x');
  assert.equal(Number(next.header.revision), current + 1);
  return current;
}

export function assertRetryable(load: Load): void {
  for (const f of load.failed) {
    assert.ok(
      f.error instanceof GRPCUnavailableError || f.error instanceof GRPCDeadlineExceededError,
      `put of ${f.key} failed with ${f.error.constructor.name}: ${f.error.message}`,
    );
  }
}

