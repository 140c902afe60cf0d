// JSON text as etcd's gateway reads it: Go's encoding/json scanner, with its error messages
// (a client that sends bad JSON reads the same words from kvs as from etcd), and numbers kept
// as their source text, so a 64-bit lease id sent as a bare number loses no digits.
//
// The scanner reads bytes, as Go's does: its input is a "byte string" (Buffer.toString('latin1'),
// one char per byte), so a body cut anywhere (a stream's chunks) reads the same, an error names
// the byte it met as Go names it, and base64 offsets count bytes. Strings come out as Go's
// unquote makes them: UTF-8 decoded with each invalid byte a U+FFFD, \u escapes with surrogate
// pairs joined and lone surrogates replaced.
//
// Two entry points, as Go has: `decodeNext` is json.Decoder.Decode (one value from a stream,
// whatever follows is left for the next call; a body of whitespace alone is the end), and
// `unmarshal` is json.Unmarshal (the whole text is one value).

export type JsonValue =
  | { t: 'object'; v: Map<string, JsonValue> }
  | { t: 'array'; v: JsonValue[] }
  /**
   * `v`: the string's value; `raw`: the bytes between the quotes (a byte string), escapes undone
   * by nobody (jsonpb strips the quotes so).
   */
  | { t: 'string'; v: string; raw: string }
  | { t: 'number'; raw: string }
  | { t: 'bool'; v: boolean }
  | { t: 'null' };

/** A syntax error, worded as Go's (`invalid character 'x' looking for beginning of value`). */
export class JsonSyntaxError extends Error {}

/** Go's encoding/json maxNestingDepth: objects and arrays open at once. */
const MAX_NESTING_DEPTH = 10_000;

/** The body ended inside a value (Go: io.ErrUnexpectedEOF from a Decoder). */
class Truncated extends Error {}

/** Go's quoteChar: how a scanner error names the byte it met (as the rune of that value). */
function quoteChar(c: string): string {
  if (c === "'") return `'\\''`;
  if (c === '"') return `'"'`;
  return `'${goQuoteRune(c.charCodeAt(0))}'`;
}

const SHORT_ESCAPES: Record<number, string> = { 7: '\\a', 8: '\\b', 12: '\\f', 10: '\\n', 13: '\\r', 9: '\\t', 11: '\\v', 0x5c: '\\\\' };

/** strconv.Quote's body for one rune of U+0000..U+00FF (what a byte becomes in Go's messages). */
function goQuoteRune(r: number): string {
  if (SHORT_ESCAPES[r]) return SHORT_ESCAPES[r];
  if (r < 0x20 || r === 0x7f) return `\\x${r.toString(16).padStart(2, '0')}`;
  // strconv.IsPrint: of Latin-1, C1 controls, NBSP and the soft hyphen are not printable.
  if ((r >= 0x80 && r <= 0xa0) || r === 0xad) return `\\u${r.toString(16).padStart(4, '0')}`;
  return String.fromCharCode(r);
}

/**
 * Go's strconv.Quote of a byte string (what `%q` prints): valid printable UTF-8 as it is,
 * other runes escaped, and each byte of invalid UTF-8 as \\xNN.
 */
export function goQuote(bytes: string): string {
  let out = '"';
  for (let i = 0; i < bytes.length; ) {
    const [r, size] = decodeRune(bytes, i);
    if (r < 0) out += `\\x${bytes.charCodeAt(i).toString(16).padStart(2, '0')}`;
    else if (r === 0x22 || r === 0x5c) out += `\\${String.fromCharCode(r)}`;
    else if (r < 0x100) out += goQuoteRune(r);
    else if (/^[\p{L}\p{M}\p{N}\p{P}\p{S}]$/u.test(String.fromCodePoint(r))) out += String.fromCodePoint(r);
    else if (r < 0x10000) out += `\\u${r.toString(16).padStart(4, '0')}`;
    else out += `\\U${r.toString(16).padStart(8, '0')}`;
    i += size;
  }
  return `${out}"`;
}

/** UTF-8 bytes (a byte string) as Go decodes them: each byte of an invalid sequence is U+FFFD. */
export function goUtf8(bytes: string): string {
  // ASCII only (the common case): nothing to decode.
  if (!/[\x80-\xff]/.test(bytes)) return bytes;
  let out = '';
  for (let i = 0; i < bytes.length; ) {
    const [r, size] = decodeRune(bytes, i);
    out += r < 0 ? '\ufffd' : String.fromCodePoint(r);
    i += size;
  }
  return out;
}

/** Go's utf8.DecodeRune at `i` of a byte string: the rune and its length, or [-1, 1]. */
function decodeRune(bytes: string, i: number): [number, number] {
  const at = (k: number) => (k < bytes.length ? bytes.charCodeAt(k) : -1);
  const cont = (b: number, lo = 0x80, hi = 0xbf) => b >= lo && b <= hi;
  const b0 = at(i);
  if (b0 < 0x80) return [b0, 1];
  const b1 = at(i + 1);
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(b1) ? [((b0 & 0x1f) << 6) | (b1 & 0x3f), 2] : [-1, 1];
  const b2 = at(i + 2);
  if (b0 >= 0xe0 && b0 <= 0xef) {
    // No overlong forms, no surrogates.
    const ok = cont(b1, b0 === 0xe0 ? 0xa0 : 0x80, b0 === 0xed ? 0x9f : 0xbf) && cont(b2);
    return ok ? [((b0 & 0x0f) << 12) | ((b1 & 0x3f) << 6) | (b2 & 0x3f), 3] : [-1, 1];
  }
  const b3 = at(i + 3);
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    const ok = cont(b1, b0 === 0xf0 ? 0x90 : 0x80, b0 === 0xf4 ? 0x8f : 0xbf) && cont(b2) && cont(b3);
    return ok ? [((b0 & 0x07) << 18) | ((b1 & 0x3f) << 12) | ((b2 & 0x3f) << 6) | (b3 & 0x3f), 4] : [-1, 1];
  }
  return [-1, 1];
}

const isSpace = (c: string) => c === ' ' || c === '\t' || c === '\n' || c === '\r';

class Scanner {
  pos = 0;
  constructor(readonly text: string) {}

  private fail(c: string, context: string): never {
    throw new JsonSyntaxError(`invalid character ${quoteChar(c)} ${context}`);
  }

  private peek(): string {
    if (this.pos >= this.text.length) throw new Truncated();
    return this.text[this.pos];
  }

  skipSpace(): void {
    while (this.pos < this.text.length && isSpace(this.text[this.pos])) this.pos++;
  }

  atEnd(): boolean {
    return this.pos >= this.text.length;
  }

  /**
   * One value. Objects and arrays are read in a loop over a stack of the open ones, not by
   * recursion: nesting as deep as Go allows (maxNestingDepth, 10,000) fits in no deeper a JS
   * stack, and one level deeper is refused with Go's words.
   */
  value(context = 'looking for beginning of value'): JsonValue {
    type Open = { t: 'object'; v: Map<string, JsonValue>; key: string } | { t: 'array'; v: JsonValue[] };
    const open: Open[] = [];
    for (;;) {
      this.skipSpace();
      const c = this.peek();
      let done: JsonValue;
      if (c === '{' || c === '[') {
        if (open.length >= MAX_NESTING_DEPTH) this.fail(c, 'exceeded max depth');
        this.pos++;
        this.skipSpace();
        if (c === '{') {
          if (this.peek() !== '}') {
            open.push({ t: 'object', v: new Map(), key: this.key() });
            continue;
          }
          done = { t: 'object', v: new Map() };
        } else {
          if (this.peek() !== ']') {
            open.push({ t: 'array', v: [] });
            continue;
          }
          done = { t: 'array', v: [] };
        }
        this.pos++;
      } else {
        done = this.scalar(c, open.length ? 'looking for beginning of value' : context);
      }
      // The value ends its parent's member; closing brackets end the parents too.
      for (;;) {
        const parent = open.at(-1);
        if (!parent) return done;
        if (parent.t === 'object') parent.v.set(parent.key, done); // a repeated key: the last one counts, as in Go's map
        else parent.v.push(done);
        this.skipSpace();
        const next = this.peek();
        this.pos++;
        if (next === (parent.t === 'object' ? '}' : ']')) {
          open.pop();
          done = parent.t === 'object' ? { t: 'object', v: parent.v } : { t: 'array', v: parent.v };
          continue;
        }
        if (next !== ',') this.fail(next, parent.t === 'object' ? 'after object key:value pair' : 'after array element');
        if (parent.t === 'object') parent.key = this.key();
        break;
      }
    }
  }

  /** A value that is not an object or an array, starting with `c`. */
  private scalar(c: string, context: string): JsonValue {
    switch (c) {
      case '"': {
        this.pos++;
        return this.string();
      }
      case 't':
        return this.literal('true', { t: 'bool', v: true });
      case 'f':
        return this.literal('false', { t: 'bool', v: false });
      case 'n':
        return this.literal('null', { t: 'null' });
      default:
        if (c === '-' || (c >= '0' && c <= '9')) return this.number();
        return this.fail(c, context);
    }
  }

  private literal(word: string, v: JsonValue): JsonValue {
    for (let i = 0; i < word.length; i++) {
      const c = this.peek();
      if (c !== word[i]) this.fail(c, `in literal ${word} (expecting ${quoteChar(word[i])})`);
      this.pos++;
    }
    return v;
  }

  /** An object member's key and its colon, from where a key may start. */
  private key(): string {
    this.skipSpace();
    const q = this.peek();
    if (q !== '"') this.fail(q, 'looking for beginning of object key string');
    this.pos++;
    const key = this.string().v;
    this.skipSpace();
    const colon = this.peek();
    if (colon !== ':') this.fail(colon, 'after object key');
    this.pos++;
    return key;
  }

  /** After the opening quote. */
  private string(): { t: 'string'; v: string; raw: string } {
    const start = this.pos;
    let out = '';
    let plainFrom = this.pos;
    for (;;) {
      const c = this.peek();
      if (c === '"') {
        out += goUtf8(this.text.slice(plainFrom, this.pos));
        const raw = this.text.slice(start, this.pos);
        this.pos++;
        return { t: 'string', v: out, raw };
      }
      if (c < ' ') this.fail(c, 'in string literal');
      if (c !== '\\') {
        this.pos++;
        continue;
      }
      out += goUtf8(this.text.slice(plainFrom, this.pos));
      this.pos++;
      const e = this.peek();
      this.pos++;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          const code = this.hex4();
          if (code < 0xd800 || code >= 0xe000) {
            out += String.fromCharCode(code);
            break;
          }
          // Go's unquote: a high surrogate and an escaped low one make a pair; any other
          // surrogate is U+FFFD (and what follows it is read on its own).
          if (code < 0xdc00 && this.text.startsWith('\\u', this.pos)) {
            const save = this.pos;
            this.pos += 2;
            const low = this.hex4();
            if (low >= 0xdc00 && low < 0xe000) {
              out += String.fromCharCode(code, low);
              break;
            }
            this.pos = save;
          }
          out += '\ufffd';
          break;
        }
        default:
          this.fail(e, 'in string escape code');
      }
      plainFrom = this.pos;
    }
  }

  /** Four hex digits of a \u escape. */
  private hex4(): number {
    let code = 0;
    for (let i = 0; i < 4; i++) {
      const h = this.peek();
      if (!/[0-9a-fA-F]/.test(h)) this.fail(h, 'in \\u hexadecimal character escape');
      code = code * 16 + parseInt(h, 16);
      this.pos++;
    }
    return code;
  }

  private number(): JsonValue {
    const start = this.pos;
    const more = () => this.pos < this.text.length;
    const digit = (c: string) => c >= '0' && c <= '9';
    if (this.text[this.pos] === '-') {
      this.pos++;
      const c = this.peek();
      if (!digit(c)) this.fail(c, 'in numeric literal');
    }
    if (this.text[this.pos] === '0') this.pos++;
    else while (more() && digit(this.text[this.pos])) this.pos++;
    if (more() && this.text[this.pos] === '.') {
      this.pos++;
      const c = this.peek();
      if (!digit(c)) this.fail(c, 'after decimal point in numeric literal');
      while (more() && digit(this.text[this.pos])) this.pos++;
    }
    if (more() && (this.text[this.pos] === 'e' || this.text[this.pos] === 'E')) {
      this.pos++;
      if (more() && (this.text[this.pos] === '+' || this.text[this.pos] === '-')) this.pos++;
      const c = this.peek();
      if (!digit(c)) this.fail(c, 'in exponent of numeric literal');
      while (more() && digit(this.text[this.pos])) this.pos++;
    }
    return { t: 'number', raw: this.text.slice(start, this.pos) };
  }
}

/**
 * One value from the front of `text` (json.Decoder.Decode): the value and where the rest
 * starts, `undefined` when only whitespace is left (Go's io.EOF). A value cut short throws
 * JsonSyntaxError('unexpected EOF').
 */
export function decodeNext(text: string, from = 0): { value: JsonValue; end: number } | undefined {
  const s = new Scanner(text);
  s.pos = from;
  s.skipSpace();
  if (s.atEnd()) return undefined;
  try {
    const value = s.value();
    return { value, end: s.pos };
  } catch (err) {
    if (err instanceof Truncated) throw new JsonSyntaxError('unexpected EOF');
    throw err;
  }
}

/** The whole of `text` as one value (json.Unmarshal), with Go's words for what is wrong. */
export function unmarshal(text: string): JsonValue {
  const s = new Scanner(text);
  try {
    const value = s.value();
    s.skipSpace();
    if (!s.atEnd()) throw new JsonSyntaxError(`invalid character ${quoteChar(text[s.pos])} after top-level value`);
    return value;
  } catch (err) {
    if (err instanceof Truncated) throw new JsonSyntaxError('unexpected end of JSON input');
    throw err;
  }
}

/** Go's name for a JSON value's kind in "cannot unmarshal X into Go value of type T". */
export function kindName(v: JsonValue): string {
  return v.t === 'bool' ? 'bool' : v.t;
}
