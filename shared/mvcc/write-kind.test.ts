import { test } from 'node:test';
import assert from 'node:assert/strict';
import { classifyTxn, keyScope, metricOp } from './write-kind.js';
import { decode, encode } from '../proto/index.js';

const k = (s: string) => Buffer.from(s);
const mod = (key: string, rev: number) => ({ result: 0, target: 2, key: k(key), modRevision: rev });
const put = (key: string) => ({ requestPut: { key: k(key), value: k('v') } });
const del = (key: string) => ({ requestDeleteRange: { key: k(key) } });
const get = (key: string) => ({ requestRange: { key: k(key) } });
// Through the wire codec, as storage and the gateway see a client's Txn.
const txn = (t: object) => classifyTxn(decode('etcdserverpb.TxnRequest', encode('etcdserverpb.TxnRequest', t)));

test('the Kubernetes/kine Txn shapes are create, update and guarded delete', () => {
  assert.deepEqual(txn({ compare: [mod('/registry/pods/a', 0)], success: [put('/registry/pods/a')] }), { kind: 'create', key: k('/registry/pods/a') });
  assert.equal(txn({ compare: [mod('/r/a', 7)], success: [put('/r/a')], failure: [get('/r/a')] }).kind, 'update');
  assert.equal(txn({ compare: [mod('/r/a', 7)], success: [del('/r/a')], failure: [get('/r/a')] }).kind, 'delete_if_revision');
  assert.equal(metricOp('delete_if_revision'), 'delete');
});

test('any other Txn is txn', () => {
  const others = [
    { compare: [], success: [put('a')] },
    { compare: [mod('a', 0)], success: [put('b')] }, // put on another key
    { compare: [mod('a', 0)], success: [put('a'), put('b')] },
    { compare: [{ ...mod('a', 0), result: 3 }], success: [put('a')] }, // NOT_EQUAL
    { compare: [{ ...mod('a', 0), target: 0, version: 0 }], success: [put('a')] }, // version compare
    { compare: [mod('a', 0)], success: [del('a')] }, // delete if absent: not a guarded delete
    { compare: [mod('a', 3)], success: [put('a')], failure: [put('a')] },
    { compare: [mod('a', 3), mod('b', 3)], success: [put('a')] },
    { compare: [{ ...mod('a', 3), rangeEnd: k('b') }], success: [put('a')] },
  ];
  for (const t of others) assert.equal(txn(t).kind, 'txn', JSON.stringify(t));
});

test('the key scope is at most two leading path segments and never the whole key', () => {
  assert.equal(keyScope(k('/registry/pods/ns/name')), '/registry/pods');
  assert.equal(keyScope(k('/a/b/c/d')), '/a/b');
  assert.equal(keyScope(k('/a/b')), '/a');
  assert.equal(keyScope(k('/a')), '');
  assert.equal(keyScope(k('greeting')), '');
  assert.equal(keyScope(k('app/config/x')), 'app/config');
});
