// Object-store prefixes laid out by hand with the layout helpers, and the kvs CLI runner, for
// the tests of the object-store commands.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { ObjectStore } from '../shared/objectstore/index.js';
import { MANIFEST_LATEST, checkpointKey, sstKey, walKey, type CheckpointManifest, type Latest } from '../shared/objectstore/layout.js';
import { KVS_BIN, runCommand, type CmdResult } from '../testkit/harness.js';

/** `node bin/kvs.js ...args`; never throws on a non-zero exit. */
export function kvs(args: string[], env: Record<string, string> = {}): Promise<CmdResult> {
  return runCommand(process.execPath, [KVS_BIN, ...args], { env, timeoutMs: 60_000 });
}

export const sha = (s: string) => createHash('sha256').update(s).digest('hex');

/** A checkpoint whose pieces are the named SSTs (uploaded here too). */
export async function writeCheckpoint(store: ObjectStore, term: number, revision: number, ssts: string[]): Promise<string> {
  for (const s of ssts) await store.put(sstKey(sha(s)), Buffer.from(s));
  const m: CheckpointManifest = {
    format: 'kvs-lmdb/1',
    revision,
    term,
    appliedIndex: revision,
    compactRevision: 0,
    createdAt: new Date().toISOString(),
    sst_files: ssts.map((s) => ({ key: sstKey(sha(s)), size: s.length })),
    pebble_meta: [],
  };
  const key = checkpointKey(term, revision);
  await store.put(key, Buffer.from(JSON.stringify(m)));
  return key;
}

export async function writeLatest(store: ObjectStore, key: string, term: number, revision: number): Promise<void> {
  const latest: Latest = { checkpoint: key, revision, term, appliedIndex: revision };
  await store.put(MANIFEST_LATEST, Buffer.from(JSON.stringify(latest)));
}

export async function keys(store: ObjectStore, prefix = ''): Promise<string[]> {
  const out: string[] = [];
  for await (const o of store.list(prefix)) out.push(o.key);
  return out;
}

/** Three checkpoints (revisions 10, 20, 30; SSTs a+b, b+c, c+d), latest at 30, WAL 1..40 in four segments. */
export async function history(store: ObjectStore): Promise<string[]> {
  const c1 = await writeCheckpoint(store, 1, 10, ['a', 'b']);
  const c2 = await writeCheckpoint(store, 1, 20, ['b', 'c']);
  const c3 = await writeCheckpoint(store, 2, 30, ['c', 'd']);
  await writeLatest(store, c3, 2, 30);
  for (const [f, l] of [[1, 10], [11, 20], [21, 30], [31, 40]] as const) await store.put(walKey(BigInt(f), BigInt(l)), Buffer.from('wal'));
  return [c1, c2, c3];
}

export function ok(r: CmdResult): string {
  assert.equal(r.exitCode, 0, `exit ${r.exitCode}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  return r.stdout;
}

export function failed(r: CmdResult, message: RegExp): void {
  assert.notEqual(r.exitCode, 0, `expected a failure, got: ${r.stdout}`);
  assert.match(r.stderr, message);
}
