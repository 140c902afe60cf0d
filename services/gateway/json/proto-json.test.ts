// Requests nested deeper than protobufjs encodes. Found by the port fuzzer's HTTP target
// (docs/reliability.md, Port fuzzing): a Txn nested in Txns more than 50 times made protobufjs's
// encoder throw "max depth exceeded" inside readRequest, which is not a JsonRequestError, so it
// escaped the request's 'end' handler and the gateway exited.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode } from '../../../shared/proto/index.js';
import { JsonRequestError, readRequest, typeAsWritten } from './proto-json.js';

/** A TxnRequest with `depth` Txns nested in its success branch. */
function nestedTxn(depth: number): string {
  let s = '{"success":[{"request_put":{"key":"Zm9v"}}]}';
  for (let i = 0; i < depth; i++) s = `{"success":[{"request_txn":${s}}]}`;
  return s;
}

test('a Txn nested as deep as protobufjs encodes (100 messages) reads; deeper is a request that does not read', () => {
  const type = typeAsWritten('etcdserverpb.TxnRequest');
  // 49 Txns inside the outer one, a put in the innermost: the put is 100 messages below the
  // outer Txn (each Txn in a RequestOp), protobufjs's limit. One Txn more is past it.
  const read = readRequest(type, nestedTxn(49), 0);
  assert.ok(read);
  let txn = decode('etcdserverpb.TxnRequest', read.wire);
  for (let i = 0; i < 49; i++) txn = txn.success[0].requestTxn;
  assert.equal(Buffer.from(txn.success[0].requestPut.key).toString(), 'foo');
  // 3,000 levels is 9,000 JSON levels: the scanner reads them; the message is refused.
  for (const depth of [50, 51, 3000]) {
    assert.throws(() => readRequest(type, nestedTxn(depth), 0), (e: Error) => e instanceof JsonRequestError && e.message === 'kvs: the request nests messages more than 100 deep', `depth ${depth}`);
  }
});
