import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import pino from 'pino';
import { encode, int64 } from '../../../shared/proto/index.js';
import { describeEntry, walEntryDebugLog } from './entry-log.js';

const PUT = 0;
const DELETE = 1;
const kv = (key: string, value: string) => encode('mvccpb.KeyValue', { key: Buffer.from(key), value: Buffer.from(value), modRevision: 7 });
const record = (index: bigint, entry: Record<string, unknown>) => ({ index, payload: encode('kvs.storage.WalEntry', entry) });

function capture(level: string) {
  const lines: Record<string, unknown>[] = [];
  const out = new Writable({ write: (chunk, _enc, cb) => (lines.push(JSON.parse(String(chunk))), cb()) });
  return { log: pino({ level }, out), lines };
}

test('a WAL entry is described by index, revision, kind and mutation count; never keys nor values', () => {
  const put = describeEntry(record(12n, { revision: 7, mutations: [{ type: PUT, kv: kv('secret-key', 'secret-value') }] }));
  assert.deepEqual(put, { index: 12, revision: 7, kind: 'put', mutations: 1 });
  assert.doesNotMatch(JSON.stringify(put), /secret/);
  const txn = describeEntry(record(13n, { revision: 8, mutations: [{ type: PUT, kv: kv('a', '1') }, { type: DELETE, kv: kv('b', '') }, { type: DELETE, kv: kv('c', '') }] }));
  assert.deepEqual(txn, { index: 13, revision: 8, kind: 'put+delete', mutations: 3, puts: 1, deletes: 2 });
  assert.equal(describeEntry(record(14n, { revision: 9, mutations: [{ type: DELETE, kv: kv('a', '') }] })).kind, 'delete');
  assert.deepEqual(describeEntry(record(15n, { compactRevision: 8, mutations: [] })), { index: 15, revision: 0, kind: 'compaction', mutations: 0, compactRevision: 8 });
  assert.deepEqual(describeEntry(record(16n, { leaseGrant: { id: int64(0x694d7a5c1b2f3e01n), ttl: 60 }, mutations: [] })), {
    index: 16, revision: 0, kind: 'lease-grant', mutations: 0, lease: '694d7a5c1b2f3e01', ttl: 60,
  });
  assert.deepEqual(describeEntry(record(17n, { revision: 10, leaseRevoke: { id: int64(255n) }, mutations: [{ type: DELETE, kv: kv('k', '') }] })), {
    index: 17, revision: 10, kind: 'lease-revoke', mutations: 1, lease: 'ff',
  });
});

test('below debug the WAL gets no hook at all; at debug one line per entry', () => {
  assert.equal(walEntryDebugLog(capture('info').log), undefined);
  const { log, lines } = capture('debug');
  walEntryDebugLog(log)!([record(1n, { revision: 2, mutations: [{ type: PUT, kv: kv('a', '1') }] }), record(2n, { revision: 3, mutations: [{ type: PUT, kv: kv('b', '2') }] })]);
  assert.deepEqual(lines.map((l) => [l.msg, l.index, l.kind]), [['WAL entry', 1, 'put'], ['WAL entry', 2, 'put']]);
});
