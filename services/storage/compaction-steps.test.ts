import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openMvcc, META } from '../../shared/mvcc/schema.js';
import { compactionPending } from '../../shared/mvcc/history.js';
import { createLogger } from '../../shared/log.js';
import { encode } from '../../shared/proto/index.js';
import { writeHistory } from '../../testkit/history-fixture.js';
import type { Engine, WriteResult } from './engine.js';
import { openEngine } from './engine/open.js';
import { Op } from '../../shared/storage/ops.js';

const log = createLogger('test', 'silent');

function submit(engine: Engine, op: number, type: string, req: object): Promise<WriteResult> {
  return new Promise((resolve) => engine.submit(op, encode(type, req), resolve));
}
const put = (engine: Engine, key: string) => submit(engine, Op.PUT, 'etcdserverpb.PutRequest', { key: Buffer.from(key), value: Buffer.from('v') });
const compact = (engine: Engine, revision: number, physical: boolean) => submit(engine, Op.COMPACT, 'etcdserverpb.CompactionRequest', { revision, physical });

test('the engine removes compacted history in steps between writes; a physical Compact waits for it; a stop resumes at open', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-steps-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const head = await writeHistory(dir, 50_000, 500);
  let engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log);

  assert.equal((await compact(engine, head - 100, false)).code, 0);
  assert.equal(compactionPending(engine.db), true, 'answered before the removal');
  // Writes go on meanwhile, each after at most one step.
  for (let i = 0; i < 5; i++) assert.equal((await put(engine, `w${i}`)).code, 0);
  assert.equal(compactionPending(engine.db), true, 'still removing after five puts');
  await engine.close();

  // The next open resumes from the cursor; a physical Compact is answered once it is done.
  engine = openEngine(openMvcc(dir, { readOnly: false, writemap: true }), dir, log);
  t.after(() => engine.close());
  assert.ok(engine.db.meta.get(META.compactCursor), 'progress was kept');
  const r = await compact(engine, head - 50, true);
  assert.equal(r.code, 0, r.message);
  assert.equal(compactionPending(engine.db), false);
  assert.equal(engine.db.meta.get(META.compactedThrough), head - 50);
  assert.equal(engine.db.keyrevs.getKeysCount(), 505);
  assert.equal(engine.db.history.getCount(), 500 + 50 + 5, 'each key once at the compact revision, the 50 later puts, the 5 writes');
});
