// The engine's answers (etcd's status and message) as the API's error classes, and the classes
// as a program matches them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { status } from '@grpc/grpc-js';
import { Errors } from '../shared/errors.js';
import { ErrCompacted, ErrFutureRev, ErrInvalidArgument, ErrKeyExists, ErrLeaseNotFound, ErrNotLeader, ErrUnavailable, KvsError, fromEtcd } from './errors.js';

test('etcd statuses and messages map to the classes a program matches with instanceof', () => {
  const cases: [{ code: number; message: string }, new (...a: never[]) => KvsError][] = [
    [Errors.compacted, ErrCompacted],
    [Errors.futureRev, ErrFutureRev],
    [Errors.leaseNotFound, ErrLeaseNotFound],
    [Errors.noLeader, ErrNotLeader],
    [Errors.leaderChanged, ErrNotLeader],
    [Errors.emptyKey, ErrInvalidArgument],
    [Errors.requestTooLarge, ErrInvalidArgument],
    [Errors.duplicateKey, ErrInvalidArgument],
    [{ code: status.RESOURCE_EXHAUSTED, message: 'kvs: writes refused: 10 MB free on /d, below the floor of 64 MB' }, ErrUnavailable],
    [{ code: status.UNAVAILABLE, message: 'kvs: storage is shutting down' }, ErrUnavailable],
  ];
  for (const [e, cls] of cases) {
    const err = fromEtcd(e.code, e.message);
    assert.ok(err instanceof cls && err instanceof KvsError && err instanceof Error, `${e.message} -> ${err.name}`);
    assert.equal(err.name, cls.name);
    assert.equal(err.etcdMessage, e.message, 'the etcd message is kept for whoever logs it');
  }
  const other = fromEtcd(status.INTERNAL, 'grpc: error unmarshalling request: x');
  assert.equal(other.constructor, KvsError);
  assert.equal(other.code, status.INTERNAL);
});

test('messages say what to do', () => {
  assert.match(new ErrKeyExists(Buffer.from('a'), 4).message, /key "a" already exists \(mod revision 4\): use put\(\) to overwrite it or update\(\) to compare-and-swap/);
  assert.match(new ErrKeyExists(Buffer.from([0, 0xff]), 4).message, /key 0x00ff already exists/);
  assert.match(new ErrCompacted(3, 10).message, /revision 3 has been compacted \(the compact revision is 10\): read the current state again/);
  assert.match(new ErrFutureRev(30, 12).message, /revision 30 is in the future \(the current revision is 12\)/);
  assert.match(new ErrLeaseNotFound(7n).message, /lease 7 not found: it expired or was revoked; grant a new one/);
  assert.match(new ErrNotLeader().message, /retry/);
});
