// Requests nested deeper than protobufjs encodes. Found by the port fuzzer's HTTP target
// (docs/reliability.md#port-fuzzing): a Txn nested in Txns more than 50 times made protobufjs's
// encoder throw "max depth exceeded" inside readRequest, which is not a JsonRequestError, so it
// escaped the request's 'end' handler and the gateway exited. Then the fuzz test's regression
// check found the next level: a request exactly as deep as protobufjs allows (100) was served,
// and its answer, one level deeper, threw out of wireToJson: the gateway exited again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decode, encode } from '../../../shared/proto/index.js';
import { JsonRequestError, readRequest, typeAsWritten, wireToJson } from './proto-json.js';

/** A TxnRequest with `depth` Txns nested in its success branch. */
function nestedTxn(depth: number): string {
  let s = '{"success":[{"request_put":{"key":"Zm9v"}}]}';
  for (let i = 0; i < depth; i++) s = `{"success":[{"request_txn":${s}}]}`;
  return s;
}

test('a request nests messages up to 99 deep, so that its answer (one deeper) decodes; deeper is a request that does not read', () => {
  const type = typeAsWritten('etcdserverpb.TxnRequest');
  // 48 Txns inside the outer one, a put in the innermost: the put is 98 messages below the
  // outer Txn (each Txn in a RequestOp); its answer's header is at 99.
  const read = readRequest(type, nestedTxn(48), 0);
  assert.ok(read);
  let txn = decode('etcdserverpb.TxnRequest', read.wire);
  for (let i = 0; i < 48; i++) txn = txn.success[0].requestTxn;
  assert.equal(Buffer.from(txn.success[0].requestPut.key).toString(), 'foo');
  // Its answer, with a range in place of the put: the range's kvs 99 messages deep, still JSON.
  let answer: Record<string, unknown> = { header: { revision: 2 }, responses: [{ responseRange: { header: { revision: 2 }, kvs: [{ key: Buffer.from('k') }] } }] };
  for (let i = 0; i < 48; i++) answer = { header: { revision: 2 }, succeeded: true, responses: [{ responseTxn: answer }] };
  assert.match(wireToJson(typeAsWritten('etcdserverpb.TxnResponse'), encode('etcdserverpb.TxnResponse', answer)), /"kvs":\[\{"key":"aw=="\}\]/);
  // 3,000 levels is 9,000 JSON levels: the scanner reads them; the message is refused.
  for (const depth of [49, 50, 3000]) {
    assert.throws(() => readRequest(type, nestedTxn(depth), 0), (e: Error) => e instanceof JsonRequestError && e.message === 'kvs: the request nests messages more than 99 deep', `depth ${depth}`);
  }
});
