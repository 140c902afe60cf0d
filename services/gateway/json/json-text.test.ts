// The JSON scanner's values and Go's words for each kind of syntax error; the expected messages
// are what etcd 3.4.23's gateway answered for the same bytes (integration/json-gateway-differential).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeNext, goQuote, goUtf8, JsonSyntaxError, unmarshal } from './json-text.js';

/** The body as the gateway reads it: bytes, one char each. */
const bytes = (s: string, enc: BufferEncoding = 'utf8') => Buffer.from(s, enc).toString('latin1');

/** The words of the syntax error `fn` throws ('no error' if none). */
function errorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof JsonSyntaxError, String(err));
    return err.message;
  }
  return 'no error';
}
const decodeError = (text: string) => errorOf(() => decodeNext(text));

test('syntax errors are worded as Go’s decoder words them', () => {
  const cases: [string, string][] = [
    ['{"a":1 x', "invalid character 'x' after object key:value pair"],
    ['[1 x]', "invalid character 'x' after array element"],
    ['{1:1}', "invalid character '1' looking for beginning of object key string"],
    ['{"a" 1}', "invalid character '1' after object key"],
    ['{"a":"\\x"}', "invalid character 'x' in string escape code"],
    ['{"a":"\\u12x4"}', "invalid character 'x' in \\u hexadecimal character escape"],
    ['tx', "invalid character 'x' in literal true (expecting 'r')"],
    ['nux', "invalid character 'x' in literal null (expecting 'l')"],
    ['-x', "invalid character 'x' in numeric literal"],
    ['1.x', "invalid character 'x' after decimal point in numeric literal"],
    ['1ex', "invalid character 'x' in exponent of numeric literal"],
    ['{"a":"a\tb"}', "invalid character '\\t' in string literal"],
    ['{"a":"a\x01b"}', "invalid character '\\x01' in string literal"],
    ['}', "invalid character '}' looking for beginning of value"],
    [']', "invalid character ']' looking for beginning of value"],
    ["'", "invalid character '\\'' looking for beginning of value"],
    ['\\', "invalid character '\\\\' looking for beginning of value"],
    // A cut-short value: the Decoder's io.ErrUnexpectedEOF.
    ['{', 'unexpected EOF'],
    ['nul', 'unexpected EOF'],
    ['1e+', 'unexpected EOF'],
    ['"', 'unexpected EOF'],
    ['{"a": [1, {"b": "', 'unexpected EOF'],
  ];
  for (const [text, message] of cases) assert.equal(decodeError(bytes(text)), message, text);
});

test('a byte the scanner meets is named as the rune of its value, as Go’s quoteChar does', () => {
  const cases: [string, string][] = [
    ['\x00', "'\\x00'"],
    ['\x1b', "'\\x1b'"],
    ['\x7f', "'\\x7f'"],
    ['\x80', "'\\u0080'"],
    ['\xa0', "'\\u00a0'"],
    ['\xad', "'\\u00ad'"],
    ['\xe9', "'é'"],
    // UTF-8 é is two bytes: the first, 0xC3, is what Go names.
    [bytes('é'), "'Ã'"],
    [bytes('\uFEFF{}'), "'ï'"],
  ];
  for (const [text, named] of cases) assert.equal(decodeError(text), `invalid character ${named} looking for beginning of value`, JSON.stringify(text));
});

test('Unmarshal (a quoted int64’s inside) has its own words for the end and for what follows', () => {
  const err = (text: string) => errorOf(() => unmarshal(text));
  assert.equal(err(''), 'unexpected end of JSON input');
  assert.equal(err('1 2'), "invalid character '2' after top-level value");
  assert.equal(err('1\\u0030'), "invalid character '\\\\' after top-level value");
  assert.deepEqual(unmarshal(' 1 '), { t: 'number', raw: '1' });
});

test('decodeNext reads one value and leaves the rest; whitespace alone is the end', () => {
  const text = '{"a": 1} [true, null]\n"x"  ';
  const first = decodeNext(text)!;
  assert.equal(first.value.t, 'object');
  const second = decodeNext(text, first.end)!;
  assert.deepEqual(second.value, { t: 'array', v: [{ t: 'bool', v: true }, { t: 'null' }] });
  const third = decodeNext(text, second.end)!;
  assert.deepEqual(third.value, { t: 'string', v: 'x', raw: 'x' });
  assert.equal(decodeNext(text, third.end), undefined);
  assert.equal(decodeNext(' \t\r\n'), undefined);
});

test('numbers keep their text (no 64-bit id loses a digit)', () => {
  assert.deepEqual(decodeNext('9223372036854775807')!.value, { t: 'number', raw: '9223372036854775807' });
  assert.deepEqual(decodeNext('-0.5e-7')!.value, { t: 'number', raw: '-0.5e-7' });
});

test('strings decode as Go’s unquote: UTF-8, each invalid byte U+FFFD, surrogate pairs joined', () => {
  const str = (text: string) => (decodeNext(text)!.value as { v: string }).v;
  assert.equal(str(bytes('"ü€😀"')), 'ü€😀');
  // A 3-byte sequence cut after 2 bytes: Go replaces each byte (node's decoder, the pair once).
  assert.equal(str(`"\xe2\x82A"`), '\ufffd\ufffdA');
  assert.equal(str('"\xff"'), '\ufffd');
  // UTF-8-encoded surrogates are invalid.
  assert.equal(str('"\xed\xa0\x80"'), '\ufffd\ufffd\ufffd');
  assert.equal(str('"\\ud83d\\ude00"'), '😀');
  assert.equal(str('"\\ud83dx"'), '\ufffdx');
  assert.equal(str('"\\ude00\\ud83d"'), '\ufffd\ufffd');
  assert.equal(str('"\\ud83d\\u0041"'), '\ufffdA');
  assert.equal(str('"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t"'), 'a"b\\c/d\b\f\n\r\t');
  // The raw text between the quotes, escapes kept (jsonpb reads enum names so).
  assert.equal((decodeNext('"A\\u0042"')!.value as { raw: string }).raw, 'A\\u0042');
  // A key's escapes are undone: "k\u0065y" is "key".
  const obj = decodeNext('{"k\\u0065y": 1}')!.value as { v: Map<string, unknown> };
  assert.deepEqual([...obj.v.keys()], ['key']);
});

test('a body cut inside a character reads the same once whole (a stream’s chunks)', () => {
  const whole = bytes('{"name": "ü"}');
  const cut = whole.length - 3; // between the two bytes of ü
  assert.throws(() => decodeNext(whole.slice(0, cut)), /unexpected EOF/);
  assert.equal(((decodeNext(whole.slice(0, cut) + whole.slice(cut))!.value as { v: Map<string, { v: string }> }).v.get('name')!).v, 'ü');
});

test('goQuote is strconv.Quote of bytes; goUtf8 decodes bytes as Go does', () => {
  assert.equal(goQuote('\xff'), '"\\xff"');
  assert.equal(goQuote(bytes('é\\n')), '"é\\\\n"');
  assert.equal(goQuote('a\\"b'), '"a\\\\\\"b"');
  assert.equal(goQuote(bytes('\u00e9\u0301')), '"é́"');
  assert.equal(goQuote('\x01\t'), '"\\x01\\t"');
  assert.equal(goQuote(bytes('\u2028')), '"\\u2028"');
  assert.equal(goUtf8('plain'), 'plain');
  assert.equal(goUtf8(bytes('ünï')), 'ünï');
});
