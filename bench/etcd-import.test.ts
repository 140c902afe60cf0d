// bench/etcd-import.ts on a small data set: the fixture it writes restores, with every key and
// the revision etcd would be at (the first put is revision 2, one revision per put).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { measureImport } from './etcd-import.js';
import { openMvcc } from '../shared/mvcc/schema.js';
import { liveVersion, versionAt } from '../shared/mvcc/keyindex.js';
import { decodeKeyValue } from '../shared/mvcc/keyvalue.js';

test('etcd-import: the fixture restores with every key, revision and version', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvs-etcd-import-test-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const m = await measureImport({ keys: 3000, revisions: 3, valueBytes: 256, dir });
  assert.equal(m.result.format, 'etcd');
  assert.equal(m.result.revision, 1 + 3 * 3000);
  assert.equal(m.result.keys, 3000);
  assert.ok(m.snapshotBytes > 3 * 3000 * 256);
  const db = openMvcc(path.join(dir, 'restored'), { readOnly: true });
  t.after(() => db.env.close());
  const key = Buffer.from(`/registry/bench/${String(17).padStart(48, '0')}`);
  const live = decodeKeyValue(liveVersion(db, key)!);
  assert.deepEqual([live.createRevision, live.modRevision, live.version, live.value.length], [2 + 17, 2 + 2 * 3000 + 17, 3, 256]);
  assert.equal(decodeKeyValue(versionAt(db, key, 2 + 3000 + 17)!).version, 2);
});
