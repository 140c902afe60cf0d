// The JSON scanner at the nesting Go allows. Found by the port fuzzer's HTTP target
// (docs/reliability.md#port-fuzzing): a body nested some 4,000 levels deep overflowed the
// recursive scanner's stack, the RangeError escaped the request's 'end' handler, and the
// gateway exited.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeNext, JsonSyntaxError, unmarshal, type JsonValue } from './json-text.js';

/** How deep the first elements of `v` go. */
function depthOf(v: JsonValue): number {
  let n = 0;
  for (let x: JsonValue | undefined = v; x && (x.t === 'array' || x.t === 'object'); n++) x = x.t === 'array' ? x.v[0] : x.v.get('a');
  return n;
}

test("nesting to Go's maxNestingDepth (10,000) reads; one level more is refused with Go's words", () => {
  for (const [open, close, inner] of [['[', ']', ''], ['{"a":', '}', '1']] as const) {
    const nested = (d: number) => open.repeat(d) + inner + close.repeat(d);
    assert.equal(depthOf(decodeNext(nested(10_000))!.value), 10_000);
    assert.equal(depthOf(unmarshal(nested(10_000))), 10_000);
    const c = open[0];
    for (const text of [nested(10_001), nested(200_000), open.repeat(200_000)]) {
      assert.throws(() => decodeNext(text), (e: Error) => e instanceof JsonSyntaxError && e.message === `invalid character '${c}' exceeded max depth`);
      assert.throws(() => unmarshal(text), (e: Error) => e instanceof JsonSyntaxError && e.message === `invalid character '${c}' exceeded max depth`);
    }
  }
  // A body cut short that deep is still the end of the input.
  assert.throws(() => decodeNext('['.repeat(10_000)), { message: 'unexpected EOF' });
});

test('values read as before: members, repeated keys, where the next value starts, and the errors', () => {
  const text = ' {"a": [1, {"b": null}, []], "a": {"c": "x"}, "d": true} {"next": 1}';
  const v = decodeNext(text);
  assert.ok(v);
  assert.equal(v.end, text.indexOf(' {"next"'));
  assert.deepEqual(decodeNext(text, v.end)?.value, { t: 'object', v: new Map([['next', { t: 'number', raw: '1' }]]) });
  assert.deepEqual(v.value, { t: 'object', v: new Map<string, JsonValue>([['a', { t: 'object', v: new Map([['c', { t: 'string', v: 'x', raw: 'x' }]]) }], ['d', { t: 'bool', v: true }]]) });
  assert.equal(decodeNext('   '), undefined);
  for (const [text, message] of [
    ['[1,]', "invalid character ']' looking for beginning of value"],
    ['[1 2]', "invalid character '2' after array element"],
    ['{"a" 1}', "invalid character '1' after object key"],
    ['{"a":1,}', "invalid character '}' looking for beginning of object key string"],
    ['{"a":1 "b":2}', `invalid character '"' after object key:value pair`],
    ['{1:2}', "invalid character '1' looking for beginning of object key string"],
    ['{"a":}', "invalid character '}' looking for beginning of value"],
    ['[tru]', "invalid character ']' in literal true (expecting 'e')"],
    ['{"a":[1,2', 'unexpected EOF'],
  ] as const) {
    assert.throws(() => decodeNext(text), { message }, text);
  }
  assert.throws(() => unmarshal('{"a":[1,2'), { message: 'unexpected end of JSON input' });
  assert.throws(() => unmarshal('[] x'), { message: "invalid character 'x' after top-level value" });
});
