// Requests read with jsonpb's rules and Go's words, and responses written as etcd's gateway
// writes them; the expected messages are what etcd 3.4.23's gateway answered for the same
// bodies (integration/json-gateway-differential).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeBase64, JsonRequestError, messageJson, readRequest, typeAsWritten } from './proto-json.js';

const bytes = (s: string, enc: BufferEncoding = 'utf8') => Buffer.from(s, enc).toString('latin1');

/** A body read as `type`, decoded back into a plain object (or the error's words). */
function read(typeName: string, body: string): Record<string, unknown> | string {
  const type = typeAsWritten(typeName);
  try {
    const r = readRequest(type, body, 0);
    return type.toObject(type.decode(r?.wire ?? Buffer.alloc(0)), { longs: String, bytes: String, enums: String }) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof JsonRequestError) return err.message;
    throw err;
  }
}
const RANGE = 'etcdserverpb.RangeRequest';
const TXN = 'etcdserverpb.TxnRequest';

/** Each body read as its type must give the message (an object) or the error's words. */
function reads(cases: [typeName: string, body: string, want: Record<string, unknown> | string][]): void {
  for (const [typeName, body, want] of cases) assert.deepEqual(read(typeName, body), want, `${typeName} ${body}`);
}

test('base64: Go’s StdEncoding, its error offsets in bytes with newlines counted', () => {
  const cases: [string, string][] = [
    ['YQ==', 'a'],
    ['YWJj', 'abc'],
    ['YQ\n==', 'a'],
    ['YQ=\n=', 'a'],
    ['YW\r\nJj', 'abc'],
    ['', ''],
  ];
  for (const [s, want] of cases) assert.equal(Buffer.from(decodeBase64(s)).toString(), want, JSON.stringify(s));
  const offsets: [string, number][] = [
    [bytes('Yé=='), 1],
    ['YQ==YQ==', 4],
    ['Y', 0],
    ['YWJjY', 4],
    ['YWJj\nY', 5],
    ['YQ=a', 2],
    ['YQ=', 3],
    ['YWI=x', 4],
    ['=YWI', 0],
    ['YW=I', 2],
    ['YW!j', 2],
    ['-_-_', 0],
    ['YQ===', 4],
    ['Y=Q=', 1],
  ];
  for (const [s, at] of offsets) assert.throws(() => decodeBase64(s), { message: `illegal base64 data at input byte ${at}` }, JSON.stringify(s));
});

test('int64: a number or a string holding one; Go’s words for the rest', () => {
  reads([
    [RANGE, '{"limit": 5}', { limit: '5' }],
    [RANGE, '{"limit": " 5 "}', { limit: '5' }],
    [RANGE, '{"limit": "-0"}', { limit: '0' }],
    [RANGE, '{"max_mod_revision": 9223372036854775807}', { max_mod_revision: '9223372036854775807' }],
    [RANGE, '{"limit": "null"}', {}],
    [RANGE, '{"limit": 1.5}', 'json: cannot unmarshal number 1.5 into Go value of type int64'],
    [RANGE, '{"limit": 1e400}', 'json: cannot unmarshal number 1e400 into Go value of type int64'],
    [RANGE, '{"limit": -9223372036854775809}', 'json: cannot unmarshal number -9223372036854775809 into Go value of type int64'],
    [RANGE, '{"limit": true}', 'json: cannot unmarshal bool into Go value of type int64'],
    [RANGE, '{"limit": "abc"}', "invalid character 'a' looking for beginning of value"],
    [RANGE, '{"limit": ""}', 'unexpected end of JSON input'],
    [RANGE, '{"limit": "1 2"}', "invalid character '2' after top-level value"],
    [RANGE, '{"limit": "1\\u0030"}', "invalid character '\\\\' after top-level value"],
    ['etcdserverpb.LeaseRevokeRequest', '{"ID": "x"}', "invalid character 'x' looking for beginning of value"],
    ['etcdserverpb.MoveLeaderRequest', '{"targetID": -1}', 'json: cannot unmarshal number -1 into Go value of type uint64'],
  ]);
});

test('bytes, bools, strings: Go’s words', () => {
  reads([
    [RANGE, '{"key": [97, null, 98]}', { key: Buffer.from('a\0b').toString('base64') }],
    [RANGE, '{"key": [256]}', 'json: cannot unmarshal number 256 into Go value of type uint8'],
    [RANGE, '{"key": [2.5]}', 'json: cannot unmarshal number 2.5 into Go value of type uint8'],
    [RANGE, '{"key": ["a"]}', 'json: cannot unmarshal string into Go value of type uint8'],
    [RANGE, '{"key": 1}', 'json: cannot unmarshal number into Go value of type []uint8'],
    [RANGE, '{"key": "YQ"}', 'illegal base64 data at input byte 0'],
    [RANGE, '{"serializable": "true"}', 'json: cannot unmarshal string into Go value of type bool'],
    ['etcdserverpb.AuthUserGetRequest', '{"name": 1}', 'json: cannot unmarshal number into Go value of type string'],
    ['etcdserverpb.AuthUserGetRequest', `{"name": "${bytes('ü')}\\ud83d\\ude00"}`, { name: 'ü😀' }],
  ]);
});

test('enums: a name as written (no escapes undone) or a number', () => {
  const unknown = (v: string) => `unknown value ${v} for enum etcdserverpb.RangeRequest_SortOrder`;
  reads([
    [RANGE, '{"sort_order": "DESCEND"}', { sort_order: 'DESCEND' }],
    [RANGE, '{"sort_order": 2}', { sort_order: 'DESCEND' }],
    // protobufjs's enum values inherit the names by number: "1" is not a name.
    [RANGE, '{"sort_order": "1"}', unknown('"1"')],
    [RANGE, '{"sort_order": "toString"}', unknown('"toString"')],
    [RANGE, '{"sort_order": "descend"}', unknown('"descend"')],
    [RANGE, '{"sort_order": "DESC\\u0045ND"}', unknown('"DESC\\\\u0045ND"')],
    [RANGE, '{"sort_order": "\xff"}', unknown('"\\xff"')],
    [RANGE, bytes('{"sort_order": "é\\n"}'), unknown('"é\\\\n"')],
    [RANGE, '{"sort_order": 1.5}', 'json: cannot unmarshal number 1.5 into Go value of type etcdserverpb.RangeRequest_SortOrder'],
    [RANGE, '{"sort_order": true}', 'json: cannot unmarshal bool into Go value of type etcdserverpb.RangeRequest_SortOrder'],
    // A repeated enum's null element is its zero (NOPUT).
    ['etcdserverpb.WatchCreateRequest', '{"filters": [null, "NODELETE"]}', { filters: ['NOPUT', 'NODELETE'] }],
  ]);
});

test('messages: both spellings (the lowerCamelCase one wins), unknown fields ignored, null unset', () => {
  reads([
    [RANGE, '{"range_end": "eg==", "rangeEnd": "Yg=="}', { range_end: 'Yg==' }],
    [RANGE, '{"rangeEnd": "Yg==", "range_end": "eg=="}', { range_end: 'Yg==' }],
    [RANGE, '{"key": "YQ==", "bogus": {"x": [1]}, "KEY": 1}', { key: 'YQ==' }],
    [RANGE, '{"key": null, "limit": null}', {}],
    [RANGE, 'null', {}],
    [RANGE, '', {}],
    [RANGE, '[]', 'json: cannot unmarshal array into Go value of type map[string]json.RawMessage'],
    [TXN, '{"compare": {}}', 'json: cannot unmarshal object into Go value of type []json.RawMessage'],
    [TXN, '{"success": [{"request_put": 1}]}', 'json: cannot unmarshal number into Go value of type map[string]json.RawMessage'],
    // What follows the first value is not read (json.Decoder.Decode).
    [RANGE, '{"key": "YQ=="} trailing', { key: 'YQ==' }],
  ]);
});

test('oneofs: read after the plain fields; the later of two members wins; a null scalar member is its zero', () => {
  reads([
    // range_end is declared after the target_union members, but jsonpb reads it first.
    [TXN, '{"compare": [{"version": "x", "range_end": 1}]}', 'json: cannot unmarshal number into Go value of type []uint8'],
    [TXN, '{"success": [{"request_range": {"key": "YQ=="}, "request_delete_range": {"key": "Yg=="}}]}', { success: [{ request_delete_range: { key: 'Yg==' } }] }],
    [TXN, '{"compare": [{"key": "YQ==", "mod_revision": null}]}', { compare: [{ key: 'YQ==', mod_revision: '0' }] }],
    [TXN, '{"success": [{"request_range": null}]}', { success: [{}] }],
    [TXN, '{"success": [null]}', { success: [{}] }],
  ]);
});

test('responses: names as written, int64 as strings, bytes base64, defaults left out, Go’s HTML escapes', () => {
  const type = typeAsWritten('etcdserverpb.RangeResponse');
  const json = messageJson(type, {
    header: { cluster_id: '1', member_id: '0', revision: '5', raft_term: '2' },
    kvs: [{ key: Buffer.from('<a&b>'), create_revision: '2', mod_revision: '2', version: '1', value: new Uint8Array(0), lease: '0' }],
    more: false,
    count: '1',
  });
  assert.equal(json, '{"header":{"cluster_id":"1","revision":"5","raft_term":"2"},"kvs":[{"key":"PGEmYj4=","create_revision":"2","mod_revision":"2","version":"1"}],"count":"1"}');
  const member = messageJson(typeAsWritten('etcdserverpb.Member'), { ID: '7', name: 'n<1>', peerURLs: [], clientURLs: ['http://a&b'] });
  assert.equal(member, '{"ID":"7","name":"n\\u003c1\\u003e","clientURLs":["http://a\\u0026b"]}');
});
