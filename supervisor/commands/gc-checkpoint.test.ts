// A checkpoint racing `kvs gc`: gc lists the manifests, then deletes the pieces none of them
// names, so a piece a new checkpoint reuses (without writing it) can vanish between the two.
// The store here is the real local directory store; the gc's delete is made to land at the
// worst moment (just as the new manifest is written) by running it from the store's put.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { openObjectStore, type ObjectStore } from '../../shared/objectstore/index.js';
import { GC_RUNNING_PREFIX, parseCheckpointKey, type CheckpointManifest } from '../../shared/objectstore/layout.js';
import { readLatest, requireCheckpointManifest } from '../../shared/objectstore/catalog.js';
import { META, openMvcc } from '../../shared/mvcc/schema.js';
import { createLogger } from '../../shared/log.js';
import { runGc } from './gc.js';
import { tempDir } from '../../testkit/harness.js';
import { takeCheckpoint, knownPieces } from '../../services/archiver/checkpoint.js';

const log = createLogger('test', 'silent');
const PIECE = 16 * 1024;

/**
 * Writes `n` keys of 1 KiB at `revision`, recording `appliedIndex` as storage would. Random
 * bytes: history compresses its records, and the checkpoint must span several pieces.
 */
async function write(dataDir: string, from: number, n: number, revision: number, appliedIndex: number): Promise<void> {
  const db = openMvcc(dataDir, { readOnly: false });
  await db.env.transaction(() => {
    for (let i = from; i < from + n; i++) db.history.put(Buffer.from(`key-${String(i).padStart(6, '0')}`), randomBytes(1024));
    db.meta.put(META.revision, revision);
    db.meta.put(META.appliedIndex, appliedIndex);
  });
  await db.env.close();
}

/** The store, with `beforeManifest` run when a checkpoint manifest is about to be written. */
function racing(store: ObjectStore, beforeManifest: (manifest: CheckpointManifest) => Promise<void>): ObjectStore {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'put') return Reflect.get(target, prop, receiver);
      return async (key: string, body: Buffer, opts?: object) => {
        if (parseCheckpointKey(key)) await beforeManifest(JSON.parse(body.toString('utf8')) as CheckpointManifest);
        return target.put(key, body, opts);
      };
    },
  });
}

async function assertLatestWhole(store: ObjectStore): Promise<void> {
  const latest = await readLatest(store);
  assert.ok(latest, 'a checkpoint became latest');
  const m = await requireCheckpointManifest(store, latest.checkpoint);
  for (const r of m.sst_files) assert.ok(await store.head(r.key), `piece ${r.key} of the latest checkpoint exists`);
}

async function setup(t: TestContext) {
  const dataDir = await tempDir(t, 'kvs-ckpt-data-');
  const root = await tempDir(t, 'kvs-ckpt-objects-');
  const store = await openObjectStore({ endpoint: `file://${root}`, bucket: 'b', prefix: 'p/' });
  t.after(() => store.close());
  await write(dataDir, 0, 200, 201, 200);
  const first = await takeCheckpoint(store, dataDir, { log, term: 1, known: new Map(), pieceBytes: PIECE });
  assert.ok(first.manifest && first.pieces > 4);
  await write(dataDir, 200, 1, 202, 201);
  return { dataDir, store, first: first.manifest };
}

test('a reused piece deleted by gc while the next checkpoint is written is uploaded again before it becomes latest', async (t) => {
  const { dataDir, store, first } = await setup(t);
  const known = knownPieces(first);
  let gone = '';
  const r = await takeCheckpoint(
    racing(store, async (next) => {
      // What a gc that listed the manifests before ours does: delete a piece it thinks unused.
      gone = next.sst_files.find((p) => known.has(p.key))!.key;
      await store.delete(gone);
    }),
    dataDir,
    { log, term: 1, previous: (await readLatest(store))!, known, pieceBytes: PIECE },
  );
  assert.equal(r.unchanged, false);
  assert.ok(r.manifest!.sst_files.some((p) => p.key === gone), 'the new checkpoint reuses the deleted piece');
  assert.ok(r.uploaded < r.pieces, 'most pieces were reused');
  await assertLatestWhole(store);
});

test('while a gc runs, a new checkpoint does not become latest; the next attempt checks its pieces and does', async (t) => {
  const { dataDir, store, first } = await setup(t);
  const previous = (await readLatest(store))!;
  const marker = `${GC_RUNNING_PREFIX}test`;
  await store.put(marker, Buffer.from('{}'));
  await assert.rejects(
    takeCheckpoint(store, dataDir, { log, term: 1, previous, known: knownPieces(first), pieceBytes: PIECE }),
    /kvs gc is running .*gc-running\/test/,
  );
  assert.deepEqual(await readLatest(store), previous, 'latest did not move');
  // The running gc finishes, having deleted a piece the new manifest names.
  await store.delete(first.sst_files[1]!.key);
  await store.delete(marker);
  const r = await takeCheckpoint(store, dataDir, { log, term: 1, previous, known: knownPieces(first), pieceBytes: PIECE });
  assert.notEqual(r.latest.checkpoint, previous.checkpoint);
  await assertLatestWhole(store);
});

test('kvs gc marks itself running for its duration, and removes the marker', async (t) => {
  const { store } = await setup(t);
  const seen: string[] = [];
  const watched = new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'delete') return Reflect.get(target, prop, receiver);
      return async (key: string) => {
        for await (const o of target.list(GC_RUNNING_PREFIX)) seen.push(o.key);
        return target.delete(key);
      };
    },
  });
  await runGc(watched, { keep: 1 });
  assert.ok(seen.length > 0 && seen.every((k) => k.startsWith(GC_RUNNING_PREFIX)), 'the marker is there while gc deletes');
  const left: string[] = [];
  for await (const o of store.list(GC_RUNNING_PREFIX)) left.push(o.key);
  assert.deepEqual(left, []);
});
