// The behaviour every ObjectStore implementation owes kvs, as one suite run against each
// (the local directory store, and S3 on a real Ceph RGW). Each test works under its own
// fresh prefix of one shared bucket.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { test } from 'node:test';
import { openObjectStore, PreconditionFailedError, type ObjectStore, type ObjectStoreOptions } from '../shared/objectstore/index.js';
import { REPO_ROOT } from '../testkit/harness.js';
import type { RaceOp } from './objectstore-worker.js';

export interface ContractTarget {
  /** Options for a fresh prefix (the same bucket throughout). */
  options(prefix: string): ObjectStoreOptions;
  /** Environment for worker processes (credentials). */
  env?: Record<string, string>;
}

let seq = 0;
async function fresh(target: ContractTarget): Promise<{ store: ObjectStore; options: ObjectStoreOptions }> {
  const options = target.options(`c${process.pid}-${++seq}-${randomBytes(3).toString('hex')}/`);
  return { store: await openObjectStore(options), options };
}

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

async function keys(store: ObjectStore, prefix: string): Promise<string[]> {
  return (await collect(store.list(prefix))).map((o) => o.key);
}

function byUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

async function rejectsPrecondition(p: Promise<unknown>): Promise<void> {
  await assert.rejects(p, (err: unknown) => err instanceof PreconditionFailedError);
}

/**
 * Runs `n` worker processes that each try the same conditional puts (one per key, in order)
 * at once; returns, per worker, its body and the keys it won (with the etag it got).
 */
export async function raceProcesses(
  target: ContractTarget,
  options: ObjectStoreOptions,
  n: number,
  op: (i: number) => RaceOp,
): Promise<{ body: string; won: Record<string, string | false> }[]> {
  const worker = path.join(REPO_ROOT, 'dist', 'integration', 'objectstore-worker.js');
  const opts = JSON.stringify({ ...options, encryptionKey: options.encryptionKey?.toString('hex') });
  const children = Array.from({ length: n }, (_, i) => {
    const o = op(i);
    const child = spawn(process.execPath, [worker, opts, JSON.stringify(o)], {
      env: { ...process.env, ...target.env },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    let out = '';
    const ready = new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.includes('ready\n')) resolve();
      });
      child.once('exit', (code) => reject(new Error(`worker exited (${code}) before it was ready`)));
    });
    // 'close', not 'exit': a worker can exit before its last output has been read.
    const done = new Promise<{ body: string; won: Record<string, string | false> }>((resolve, reject) => {
      child.once('close', (code) => {
        if (code !== 0) return reject(new Error(`worker exited with ${code}: ${out}`));
        try {
          resolve({ body: o.body, won: JSON.parse(out.split('\n')[1]!) });
        } catch (err) {
          reject(new Error(`worker's answer unreadable (${(err as Error).message}): ${JSON.stringify(out)}`));
        }
      });
    });
    done.catch(() => {});
    return { child, ready, done };
  });
  await Promise.all(children.map((c) => c.ready));
  for (const c of children) c.child.stdin!.end('go\n');
  return Promise.all(children.map((c) => c.done));
}

/** Every key has exactly one winner, and holds the winner's body and etag. */
async function assertOneWinnerPerKey(store: ObjectStore, keys: string[], results: { body: string; won: Record<string, string | false> }[]): Promise<void> {
  for (const key of keys) {
    const winners = results.filter((r) => r.won[key]);
    assert.equal(winners.length, 1, `${key}: ${winners.length} winners`);
    const got = await store.get(key);
    assert.equal(got?.body.toString(), winners[0]!.body, key);
    assert.equal(got?.etag, winners[0]!.won[key], key);
  }
}

export function objectStoreContract(name: string, target: () => ContractTarget): void {
  test(`${name}: missing keys`, async () => {
    const { store } = await fresh(target());
    assert.equal(await store.get('nothing/here'), undefined);
    assert.equal(await store.head('nothing/here'), undefined);
    await store.delete('nothing/here'); // not an error
    await store.deleteMany(['nothing/a', 'nothing/b']);
    assert.deepEqual(await keys(store, ''), []);
    store.close();
  });

  test(`${name}: put, get, head, overwrite, delete`, async () => {
    const { store } = await fresh(target());
    const body = randomBytes(100_000);
    const put = await store.put('wal/1.wal', body);
    const got = await store.get('wal/1.wal');
    assert.ok(got);
    assert.ok(got.body.equals(body));
    assert.equal(got.etag, put.etag);
    const head = await store.head('wal/1.wal');
    assert.equal(head?.size, body.length);
    assert.equal(head?.etag, put.etag);
    assert.equal(head?.key, 'wal/1.wal');

    const put2 = await store.put('wal/1.wal', Buffer.from('second'));
    assert.notEqual(put2.etag, put.etag);
    assert.equal((await store.get('wal/1.wal'))?.body.toString(), 'second');

    await store.put('empty', Buffer.alloc(0));
    assert.equal((await store.get('empty'))?.body.length, 0);

    await store.delete('wal/1.wal');
    assert.equal(await store.get('wal/1.wal'), undefined);
    assert.deepEqual(await keys(store, ''), ['empty']);
    store.close();
  });

  test(`${name}: keys with unusual characters round-trip exactly`, async () => {
    const { store } = await fresh(target());
    const odd = ['a b', 'ü/ñ/日本', 'per%cent', 'plus+eq=', 'x/.hidden', 'tilde~', 'dir/', 'a//b', 'semi;colon,comma'];
    for (const k of odd) await store.put(k, Buffer.from(k));
    for (const k of odd) assert.equal((await store.get(k))?.body.toString(), k, k);
    assert.deepEqual(await keys(store, ''), [...odd].sort(byUtf8));
    store.close();
  });

  test(`${name}: list filters by prefix, in byte order of the keys`, async () => {
    const { store } = await fresh(target());
    const all = ['a', 'a/b', 'a/b/c', 'a-c', 'a0', 'ab/x', 'b', 'a.z', 'A', 'a/b0', 'a/b/'];
    for (const k of [...all].reverse()) await store.put(k, Buffer.from(k));
    assert.deepEqual(await keys(store, ''), [...all].sort(byUtf8));
    assert.deepEqual(await keys(store, 'a/'), ['a/b', 'a/b/', 'a/b/c', 'a/b0']);
    assert.deepEqual(await keys(store, 'a/b'), ['a/b', 'a/b/', 'a/b/c', 'a/b0']);
    assert.deepEqual(await keys(store, 'a/b/'), ['a/b/', 'a/b/c']);
    assert.deepEqual(await keys(store, 'a'), all.filter((k) => k.startsWith('a')).sort(byUtf8));
    assert.deepEqual(await keys(store, 'zz'), []);
    // startAfter (S3's StartAfter): only the keys after it, also when it names no object.
    const after = async (prefix: string, startAfter: string) => (await collect(store.list(prefix, { startAfter }))).map((o) => o.key);
    for (const [prefix, from] of [['', 'a/b'], ['', 'a/a'], ['', 'a/b/'], ['a', 'a/b/c'], ['a/', 'a-'], ['a/', 'a/b~'], ['', 'B'], ['', ''], ['a/b/', 'zz']] as const) {
      const want = all.filter((k) => k.startsWith(prefix) && byUtf8(k, from) > 0).sort(byUtf8);
      assert.deepEqual(await after(prefix, from), want, `list(${JSON.stringify(prefix)}, startAfter ${JSON.stringify(from)})`);
    }
    const infos = await collect(store.list('a/b/c'));
    assert.equal(infos.length, 1);
    assert.equal(infos[0]!.size, 5);
    assert.equal(infos[0]!.etag, (await store.head('a/b/c'))!.etag);
    store.close();
  });

  test(`${name}: listing and deleteMany go past 1000 keys`, async () => {
    const { store } = await fresh(target());
    const n = 1234;
    const all = Array.from({ length: n }, (_, i) => `wal/${String(i).padStart(20, '0')}.wal`);
    const queue = [...all];
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let k = queue.shift(); k; k = queue.shift()) await store.put(k, Buffer.from(k));
      }),
    );
    await store.put('other', Buffer.from('x'));
    const listed = await keys(store, 'wal/');
    assert.equal(listed.length, n);
    assert.deepEqual(listed, all);
    assert.deepEqual((await collect(store.list('wal/', { startAfter: all[5] }))).map((o) => o.key), all.slice(6), 'startAfter across pages');
    await store.deleteMany(all.slice(0, 1100));
    assert.deepEqual(await keys(store, 'wal/'), all.slice(1100));
    await store.deleteMany(all.slice(1100));
    assert.deepEqual(await keys(store, ''), ['other']);
    store.close();
  });

  test(`${name}: ifNoneMatch creates only when absent`, async () => {
    const { store } = await fresh(target());
    const first = await store.put('leader-lock', Buffer.from('one'), { ifNoneMatch: '*' });
    await rejectsPrecondition(store.put('leader-lock', Buffer.from('two'), { ifNoneMatch: '*' }));
    const got = await store.get('leader-lock');
    assert.equal(got?.body.toString(), 'one');
    assert.equal(got?.etag, first.etag);
    await store.delete('leader-lock');
    await store.put('leader-lock', Buffer.from('three'), { ifNoneMatch: '*' });
    assert.equal((await store.get('leader-lock'))?.body.toString(), 'three');
    store.close();
  });

  test(`${name}: ifMatch replaces only the expected object`, async () => {
    const { store } = await fresh(target());
    await rejectsPrecondition(store.put('manifest/latest', Buffer.from('x'), { ifMatch: 'no-such-etag' })); // missing key
    assert.equal(await store.get('manifest/latest'), undefined);
    const v1 = await store.put('manifest/latest', Buffer.from('v1'));
    const v2 = await store.put('manifest/latest', Buffer.from('v2'), { ifMatch: v1.etag });
    assert.equal((await store.get('manifest/latest'))?.body.toString(), 'v2');
    await rejectsPrecondition(store.put('manifest/latest', Buffer.from('stale'), { ifMatch: v1.etag }));
    assert.equal((await store.get('manifest/latest'))?.body.toString(), 'v2');
    const v3 = await store.put('manifest/latest', Buffer.from('v3'), { ifMatch: v2.etag });
    assert.equal((await store.get('manifest/latest'))?.etag, v3.etag);
    store.close();
  });

  test(`${name}: parallel conditional writes in one process have exactly one winner`, async () => {
    const { store } = await fresh(target());
    const create = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => store.put('lock', Buffer.from(`c${i}`), { ifNoneMatch: '*' })));
    const created = create.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    assert.equal(created.length, 1);
    for (const r of create) if (r.status === 'rejected') assert.ok(r.reason instanceof PreconditionFailedError, String(r.reason));
    assert.equal((await store.get('lock'))?.body.toString(), `c${created[0]}`);

    const base = (await store.head('lock'))!.etag;
    const replace = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => store.put('lock', Buffer.from(`r${i}`), { ifMatch: base })));
    const replaced = replace.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []));
    assert.equal(replaced.length, 1);
    for (const r of replace) if (r.status === 'rejected') assert.ok(r.reason instanceof PreconditionFailedError, String(r.reason));
    assert.equal((await store.get('lock'))?.body.toString(), `r${replaced[0]}`);
    store.close();
  });

  test(`${name}: conditional writes racing from separate processes have exactly one winner`, async () => {
    const t = target();
    const { store, options } = await fresh(t);
    const keys = Array.from({ length: 20 }, (_, i) => `lock/${i}`);
    const created = await raceProcesses(t, options, 5, (i) => ({ keys, body: `node-${i}`, ifNoneMatch: '*' }));
    await assertOneWinnerPerKey(store, keys, created);

    const etags = Object.fromEntries(await Promise.all(keys.map(async (k) => [k, (await store.head(k))!.etag] as const)));
    const replaced = await raceProcesses(t, options, 5, (i) => ({ keys, body: `term-${i}`, ifMatch: etags }));
    await assertOneWinnerPerKey(store, keys, replaced);
    store.close();
  });

  test(`${name}: a reader never sees a torn object`, async () => {
    const { store } = await fresh(target());
    const bodies = Array.from({ length: 4 }, (_, i) => Buffer.alloc(300_000 + i * 1000, i + 1));
    await store.put('big', bodies[0]!);
    let writing = true;
    const writer = (async () => {
      for (let i = 0; i < 20; i++) await store.put('big', bodies[i % bodies.length]!);
      writing = false;
    })();
    let reads = 0;
    while (writing) {
      const got = await store.get('big');
      assert.ok(got, 'the object is always there');
      assert.ok(
        bodies.some((b) => b.equals(got.body)),
        `read ${got.body.length} bytes that are none of the written bodies`,
      );
      reads++;
    }
    await writer;
    assert.ok(reads > 0);
    store.close();
  });
}
