/**
 * A strict JSON reader for safetensors headers, written because `JSON.parse` hides duplicate keys and rounds integers
 * above 2^53. It accepts exactly what the reference (serde_json) accepts: RFC 8259 grammar, whitespace limited to
 * space/tab/CR/LF, no lone surrogate escapes, finite numbers only, nesting at most 127 levels deep.
 *
 * It is a cursor over the header's bytes (already checked to be UTF-8), not a tree builder: the header parser drives
 * it and keeps only what it needs, so a 100 MB header costs one pass, no intermediate objects and no 100 MB string
 * (the reference fails a bad 99 MB header in ~40 ms and ~105 MiB; a decoded copy alone would double that memory).
 * Only the strings the parser keeps are decoded, each on its own.
 */
import { installed, RUN_DIGITS, RUN_STRING, RUN_WHITESPACE } from "./accelerators.js";
import { SafetensorError } from "./errors.js";

/** serde_json refuses to enter a 128th level of nesting. */
export const MAX_JSON_DEPTH = 127;

/** A JSON integer token; `value` is exact: a number up to 15 digits, a bigint beyond. */
export type JsonInteger = { readonly kind: "integer"; readonly value: number | bigint; readonly negative: boolean };
/**
 * A JSON number that is not an integer for serde_json. Its value and text are computed when asked for: the header
 * reader only skips such numbers (decoding an ignored float of 100 M digits would cost a 100 MB string).
 */
export class JsonFloat {
  readonly kind = "float";
  constructor(
    private readonly bytes: Uint8Array,
    private readonly start: number,
    private readonly end: number,
  ) {}

  get value(): number {
    return Number(ascii(this.bytes, this.start, this.end));
  }

  /** The token for messages, shortened when very long. */
  get text(): string {
    return tokenText(this.bytes, this.start, this.end);
  }
}

/**
 * Runs (of whitespace, digits, plain string contents) longer than this are finished by the installed native scanner
 * when there is one: a call costs ~0.1 µs, a 99 MB run ~10 ms there against ~50 ms here (optimized) or seconds
 * (before V8 optimizes the loop, which it does on a background thread that a loaded machine may not run for a while).
 */
const LONG_RUN = 256;

/** End of input, for `peek()` and friends. */
const EOF = -1;

const utf8 = new TextDecoder("utf-8", { ignoreBOM: true });

export class JsonCursor {
  pos = 0;
  depth = 0;
  private readonly length: number;

  readonly bytes: Uint8Array;

  /** Over UTF-8 bytes (already checked to be valid), or text (encoded once). Positions are byte offsets. */
  /** The bytes again as aligned 32-bit words (from `wordsFrom`), for scanning string contents 4 bytes at a time. */
  private readonly words: Uint32Array;
  private readonly wordsFrom: number;

  constructor(input: Uint8Array | string) {
    this.bytes = typeof input === "string" ? new TextEncoder().encode(input) : input;
    this.length = this.bytes.length;
    const { buffer, byteOffset } = this.bytes;
    this.wordsFrom = (4 - (byteOffset % 4)) % 4;
    const count = Math.max(0, Math.floor((this.length - this.wordsFrom) / 4));
    this.words = count > 0 ? new Uint32Array(buffer, byteOffset + this.wordsFrom, count) : new Uint32Array(0);
  }

  fail(what: string, at = this.pos): never {
    throw new SafetensorError("InvalidHeaderJson", `invalid JSON in header: ${what} at ${this.where(at)}`);
  }

  where(at: number): string {
    return `byte ${at + 1}`;
  }

  /** The byte at `at`, or EOF past the end. */
  at(at: number): number {
    return at < this.length ? this.bytes[at]! : EOF;
  }

  skipWhitespace(): void {
    const bytes = this.bytes;
    const length = this.length;
    let pos = this.pos;
    let budget = LONG_RUN;
    while (pos < length) {
      const c = bytes[pos]!;
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) pos++;
      else break;
      if (--budget === 0 && installed.scanRun) {
        pos = installed.scanRun(bytes, pos, RUN_WHITESPACE);
        break;
      }
    }
    this.pos = pos;
  }

  /** Next significant byte (after whitespace), not consumed; EOF (-1) at end of input. */
  peek(): number {
    this.skipWhitespace();
    return this.at(this.pos);
  }

  expect(code: number, what: string): void {
    if (this.peek() !== code) this.fail(`expected ${what}`);
    this.pos++;
  }

  enter(): void {
    if (++this.depth > MAX_JSON_DEPTH) this.fail("recursion limit exceeded");
  }

  leave(): void {
    this.depth--;
  }

  /**
   * Iterate an object's members: calls `member(key)` with the cursor on the value, which `member` must consume.
   * The opening `{` must be the next significant character.
   */
  object(member: (key: string, keyAt: number) => void): void {
    this.members(() => this.string(), member);
  }

  /** Read a string token and say whether it is `name` (ASCII), decoding it only when it has escapes. */
  keyIs(name: string): boolean {
    if (this.peek() !== 0x22) this.fail("expected a string");
    const start = this.pos;
    const end = this.stringEnd(start + 1);
    if (this.escaped) return this.string() === name;
    this.pos = end + 1;
    if (end - start - 1 !== name.length) return false;
    for (let i = 0; i < name.length; i++) if (this.bytes[start + 1 + i] !== name.charCodeAt(i)) return false;
    return true;
  }

  /** Like {@link object}, with each key read by `readKey` (the cursor on its opening quote), which must consume it. */
  members<K>(readKey: () => K, member: (key: K, keyAt: number) => void): void {
    this.expect(0x7b, "`{`");
    this.enter();
    if (this.peek() === 0x7d) {
      this.pos++;
      this.leave();
      return;
    }
    for (;;) {
      if (this.peek() !== 0x22) this.fail(this.atEnd() ? "EOF while parsing an object" : "key must be a string");
      const keyAt = this.pos;
      const key = readKey();
      this.expect(0x3a, "`:`");
      member(key, keyAt);
      const c = this.peek();
      this.pos++;
      if (c === 0x2c) {
        if (this.peek() === 0x7d) this.fail("trailing comma");
        continue;
      }
      if (c === 0x7d) break;
      this.fail(c === EOF ? "EOF while parsing an object" : "expected `,` or `}`", this.pos - 1);
    }
    this.leave();
  }

  /** Iterate an array's elements: `element(index)` must consume one value. */
  array(element: (index: number) => void): void {
    this.expect(0x5b, "`[`");
    this.enter();
    if (this.peek() === 0x5d) {
      this.pos++;
      this.leave();
      return;
    }
    for (let index = 0; ; index++) {
      element(index);
      const c = this.peek();
      this.pos++;
      if (c === 0x2c) {
        if (this.peek() === 0x5d) this.fail("trailing comma");
        continue;
      }
      if (c === 0x5d) break;
      this.fail(c === EOF ? "EOF while parsing a list" : "expected `,` or `]`", this.pos - 1);
    }
    this.leave();
  }

  atEnd(): boolean {
    return this.pos >= this.length;
  }

  /** Read a string token (cursor on or before its opening quote). */
  string(): string {
    if (this.peek() !== 0x22) this.fail("expected a string");
    const start = this.pos;
    const end = this.stringEnd(start + 1);
    this.pos = end + 1;
    if (!this.escaped) return utf8.decode(this.bytes.subarray(start + 1, end));
    // The token is valid JSON and serde_json-valid (checked above), so the native decoder gives the same string,
    // without a concatenation per escape (a 10 M-escape string would otherwise build 10 M intermediate strings).
    return JSON.parse(utf8.decode(this.bytes.subarray(start, end + 1))) as string;
  }

  /** Validate and skip a string token (cursor on or before its opening quote); nothing is decoded. */
  skipString(): void {
    if (this.peek() !== 0x22) this.fail("expected a string");
    this.pos = this.stringEnd(this.pos + 1) + 1;
  }

  /** Whether the last string scanned by {@link stringEnd} had an escape. */
  private escaped = false;

  /**
   * Where the string whose contents start at `from` ends (its closing quote), checking every character and escape
   * by serde_json's rules. One linear loop, no regular expression (a backtracking one overflows the stack on
   * strings of ~8 M characters) and no allocation.
   */
  private stringEnd(from: number): number {
    const bytes = this.bytes;
    const length = this.length;
    const words = this.words;
    const wordsFrom = this.wordsFrom;
    const wordsEnd = wordsFrom + 4 * words.length;
    let pos = from;
    let escaped = false;
    for (;;) {
      // Plain contents four bytes at a time: no byte below 0x20, no `"`, no `\\` in the word (the usual bit tricks for
      // "has a byte less than n" and "has a zero byte"). A 100 MB string costs ~4x fewer steps.
      if ((pos - wordsFrom) % 4 === 0) {
        let budget = LONG_RUN / 4;
        while (pos + 4 <= wordsEnd) {
          const w = words[(pos - wordsFrom) >> 2]!;
          const quote = w ^ 0x22222222;
          const slash = w ^ 0x5c5c5c5c;
          if (
            ((w - 0x20202020) & ~w & 0x80808080) |
            ((quote - 0x01010101) & ~quote & 0x80808080) |
            ((slash - 0x01010101) & ~slash & 0x80808080)
          ) {
            break;
          }
          pos += 4;
          if (--budget === 0 && installed.scanRun) {
            pos = installed.scanRun(bytes, pos, RUN_STRING);
            break;
          }
        }
      }
      if (pos >= length) this.fail("EOF while parsing a string", pos);
      const c = bytes[pos]!;
      if (c === 0x22) break;
      if (c !== 0x5c) {
        if (c < 0x20) this.fail("control character (\\u0000-\\u001F) found while parsing a string", pos);
        pos++;
        continue;
      }
      escaped = true;
      const e = this.at(pos + 1);
      pos += 2;
      if (e === 0x75) {
        const unit = this.hex4(pos);
        pos += 4;
        if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("lone leading surrogate in hex escape", pos);
        if (unit >= 0xd800 && unit <= 0xdbff) {
          if (this.at(pos) !== 0x5c || this.at(pos + 1) !== 0x75) {
            this.fail("unexpected end of hex escape", pos);
          }
          const low = this.hex4(pos + 2);
          if (low < 0xdc00 || low > 0xdfff) this.fail("lone leading surrogate in hex escape", pos + 2);
          pos += 6;
        }
      } else if (!isSimpleEscape(e)) {
        this.fail(e === EOF ? "EOF while parsing a string" : "invalid escape", pos - 1);
      }
    }
    this.escaped = escaped;
    return pos;
  }

  private hex4(at: number): number {
    let value = 0;
    for (let i = 0; i < 4; i++) {
      const c = this.at(at + i);
      let digit: number;
      if (c >= 0x30 && c <= 0x39) digit = c - 0x30;
      else if (c >= 0x41 && c <= 0x46) digit = c - 0x37;
      else if (c >= 0x61 && c <= 0x66) digit = c - 0x57;
      else this.fail(c === EOF ? "EOF while parsing a string" : "invalid escape", at + i);
      value = value * 16 + digit;
    }
    return value;
  }

  /**
   * Read a number token. Integers (no fraction, no exponent) come back exact; anything else as a float, which must be
   * finite (serde_json: "number out of range"). An integer beyond u64 is a float for serde_json, and so here.
   */
  number(): JsonInteger | JsonFloat {
    this.skipWhitespace();
    const start = this.pos;
    let pos = start;
    const negative = this.at(pos) === 0x2d;
    if (negative) pos++;
    const first = this.at(pos);
    if (first === 0x30) {
      pos++;
      if (isDigit(this.at(pos))) this.fail("invalid number", pos);
    } else if (first >= 0x31 && first <= 0x39) {
      pos = this.digitsEnd(pos);
    } else {
      this.fail(negative ? "invalid number" : "expected value", pos);
    }
    const intEnd = pos;
    let isFloat = false;
    let fracStart = pos;
    let fracEnd = pos;
    if (this.at(pos) === 0x2e) {
      pos++;
      if (!isDigit(this.at(pos))) this.fail("invalid number", pos);
      fracStart = pos;
      pos = this.digitsEnd(pos);
      fracEnd = pos;
      isFloat = true;
    }
    let expStart = pos;
    let expNegative = false;
    const e = this.at(pos);
    if (e === 0x65 || e === 0x45) {
      pos++;
      const sign = this.at(pos);
      expNegative = sign === 0x2d;
      if (sign === 0x2b || sign === 0x2d) pos++;
      if (!isDigit(this.at(pos))) this.fail("invalid number", pos);
      expStart = pos;
      pos = this.digitsEnd(pos);
      isFloat = true;
    }
    this.pos = pos;
    const intStart = negative ? start + 1 : start;
    // serde_json reads "-0" as the float -0.0.
    if (!isFloat && !(negative && intEnd - start === 2 && first === 0x30)) {
      const digits = intEnd - intStart;
      if (digits <= 15) {
        let value = 0;
        for (let i = intStart; i < intEnd; i++) value = value * 10 + (this.bytes[i]! - 0x30);
        return { kind: "integer", value: negative ? -value : value, negative };
      }
      // No leading zeros: more than 20 digits is beyond u64 (and i64), a float for serde_json. BigInt only for the
      // few lengths that can fit (parsing 100 M digits into a BigInt took ~40 s).
      if (digits <= 20) {
        const value = BigInt(ascii(this.bytes, start, intEnd));
        if (negative ? value >= I64_MIN : value <= U64_MAX) return { kind: "integer", value, negative };
      }
    }
    const parts = { intStart, intEnd, fracStart, fracEnd, expStart, expNegative, end: pos };
    if (serdeFloatOverflows(this.bytes, parts)) this.fail("number out of range", pos);
    return new JsonFloat(this.bytes, start, pos);
  }

  /**
   * A plain non-negative integer of at most 15 digits (no sign, fraction or exponent) at the cursor: consumed and
   * returned. Anything else gives -1 with nothing consumed, for {@link number} to read. Shapes of millions of dims
   * are read this way without an object per number.
   */
  smallUint(): number {
    this.skipWhitespace();
    const bytes = this.bytes;
    const length = this.length;
    const start = this.pos;
    let pos = start;
    let value = 0;
    // At most 16 digits looked at: a longer number is number()'s (a hostile one can have 100 M).
    const stop = Math.min(length, start + 16);
    while (pos < stop) {
      const c = bytes[pos]!;
      if (c < 0x30 || c > 0x39) break;
      value = value * 10 + (c - 0x30);
      pos++;
    }
    const digits = pos - start;
    if (digits === 0 || digits > 15 || (digits > 1 && bytes[start] === 0x30)) return -1;
    const next = pos < length ? bytes[pos] : EOF;
    if (next === 0x2e || next === 0x65 || next === 0x45) return -1;
    this.pos = pos;
    return value;
  }

  /**
   * Where the run of digits from `from` ends, four bytes at a time past the first (a hostile number can be 100 M
   * digits long: one pass here, none again in serdeFloatOverflows).
   */
  private digitsEnd(from: number): number {
    const bytes = this.bytes;
    const length = this.length;
    const words = this.words;
    const wordsFrom = this.wordsFrom;
    let pos = from;
    for (;;) {
      if (pos >= length || !isDigit(bytes[pos]!)) return pos;
      pos++;
      if ((pos - wordsFrom) % 4 === 0 && pos >= wordsFrom) {
        let index = (pos - wordsFrom) >> 2;
        const stop = Math.min(words.length, index + LONG_RUN / 4);
        while (index < stop && allDigits(words[index]!)) index++;
        pos = wordsFrom + 4 * index;
        if (index === stop && installed.scanRun) return installed.scanRun(bytes, pos, RUN_DIGITS);
      }
    }
  }

  /** Validate and skip any value; keys and strings are checked, not decoded. */
  skipValue(): void {
    const c = this.peek();
    switch (c) {
      case 0x7b:
        this.skipContainer(0x7d);
        return;
      case 0x5b:
        this.skipContainer(0x5d);
        return;
      case 0x22:
        this.skipString();
        return;
      case 0x74:
        this.literal("true");
        return;
      case 0x66:
        this.literal("false");
        return;
      case 0x6e:
        this.literal("null");
        return;
      default:
        if (c === 0x2d || isDigit(c)) {
          this.number();
          return;
        }
        this.fail(c === EOF ? "EOF while parsing a value" : "expected value");
    }
  }

  /** An object (`close` = `}`) or array (`]`) being skipped: the same grammar and messages as object() / array(). */
  private skipContainer(close: 0x7d | 0x5d): void {
    const isObject = close === 0x7d;
    this.pos++;
    this.enter();
    if (this.peek() === close) {
      this.pos++;
      this.leave();
      return;
    }
    const eof = isObject ? "EOF while parsing an object" : "EOF while parsing a list";
    for (;;) {
      if (isObject) {
        if (this.peek() !== 0x22) this.fail(this.atEnd() ? eof : "key must be a string");
        this.skipString();
        this.expect(0x3a, "`:`");
      }
      this.skipValue();
      const c = this.peek();
      this.pos++;
      if (c === 0x2c) {
        if (this.peek() === close) this.fail("trailing comma");
        continue;
      }
      if (c === close) break;
      this.fail(c === EOF ? eof : isObject ? "expected `,` or `}`" : "expected `,` or `]`", this.pos - 1);
    }
    this.leave();
  }

  literal(word: "true" | "false" | "null"): void {
    this.skipWhitespace();
    let i = 0;
    while (i < word.length && this.at(this.pos + i) === word.charCodeAt(i)) i++;
    if (i === word.length) {
      this.pos += word.length;
      return;
    }
    this.fail("expected ident");
  }

  /** After the top-level value: only whitespace may follow. */
  end(): void {
    if (this.peek() !== EOF) this.fail("trailing characters");
  }
}

const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);
const I32_MAX = 2 ** 31 - 1;

/** A number token's parts, as positions: digits [intStart, intEnd), fraction digits, exponent digits [expStart, end). */
interface NumberParts {
  intStart: number;
  intEnd: number;
  /** fracStart = fracEnd without a fraction. */
  fracStart: number;
  fracEnd: number;
  /** = end without an exponent. */
  expStart: number;
  expNegative: boolean;
  end: number;
}

/** The largest u64, as the 20-digit string that 20-digit significands are compared with. */
const U64_MAX_DIGITS = "18446744073709551615";

/**
 * Whether serde_json (without its `float_roundtrip` feature, as the reference builds it) rejects the number token
 * whose `parts` the cursor found as "number out of range". It keeps at most the digits that fit in a u64 significand, then
 * computes `significand as f64 * 10^exponent` in doubles and fails if that overflows — so a few tokens just below the
 * largest double (1.7976931348623158e308) fail there although they round to a finite value. Same steps, same
 * doubles here; no pass over the digits beyond the first 20 and no BigInt, so a number of 100 M digits costs what
 * reading it costs.
 */
function serdeFloatOverflows(bytes: Uint8Array, parts: NumberParts): boolean {
  const { intStart, intEnd, fracStart, fracEnd, expStart, expNegative, end } = parts;
  const intDigits = intEnd - intStart;
  let exp = 0;
  let expDigits = 0;
  if (expStart < end) {
    let i = expStart;
    while (i < end && bytes[i] === 0x30) i++; // leading zeros change nothing
    expDigits = end - i;
    for (; i < end && expDigits <= 10; i++) exp = exp * 10 + (bytes[i]! - 0x30);
  }
  // Quick answer: below 10^intDigits * 10^exp <= 10^307 serde's double cannot overflow (its rounding errors are a
  // few ulps). That is every number of ordinary size.
  if (expDigits <= 9 && intDigits + (expNegative ? -exp : exp) <= 307) return false;

  // serde's significand: digits while the value fits a u64 (leading fraction zeros add nothing), then the exponent.
  let kept = "";
  let exponent = 0;
  let truncated = false;
  const keep = (digit: number): boolean => {
    if (truncated) return false;
    if (kept.length === 0 && digit === 0x30) return true; // a zero significand stays zero
    const next = kept + String.fromCharCode(digit);
    if (next.length < 20 || (next.length === 20 && next <= U64_MAX_DIGITS)) {
      kept = next;
      return true;
    }
    truncated = true;
    return false;
  };
  let j = intStart;
  for (; j < intEnd && !truncated; j++) if (!keep(bytes[j]!)) exponent++;
  exponent += intEnd - j; // digits past a full u64 only scale the value
  for (j = fracStart; j < fracEnd && !truncated; j++) if (keep(bytes[j]!)) exponent--;
  if (expDigits > 0) {
    // serde_json stops reading an exponent past i32: a non-zero significand with a positive one overflows, else 0.
    if (expDigits > 10 || exp > I32_MAX) return kept.length > 0 && !expNegative;
    exponent = expNegative ? Math.max(exponent - exp, -I32_MAX - 1) : Math.min(exponent + exp, I32_MAX);
  }
  // `significand as f64`: Number() of the digits rounds to nearest, as the conversion from u64 does.
  let f = kept.length === 0 ? 0 : Number(kept);
  for (;;) {
    const magnitude = Math.abs(exponent);
    if (magnitude <= 308) {
      if (exponent >= 0) f *= Number(`1e${magnitude}`);
      return !Number.isFinite(f);
    }
    if (f === 0) return false;
    if (exponent >= 0) return true;
    f /= 1e308;
    exponent += 308;
  }
}

/** An ASCII byte range as a string (number tokens). */
function ascii(bytes: Uint8Array, start: number, end: number): string {
  return utf8.decode(bytes.subarray(start, end));
}

/** A number token for messages, shortened when very long. */
function tokenText(bytes: Uint8Array, start: number, end: number): string {
  if (end - start <= 40) return ascii(bytes, start, end);
  return `${ascii(bytes, start, start + 24)}… (${end - start} characters)`;
}

/** The one-character escapes: `"` `\\` `/` `b` `f` `n` `r` `t`. */
function isSimpleEscape(e: number): boolean {
  return e === 0x22 || e === 0x5c || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

/**
 * Whether all four bytes of `w` are ASCII digits: after `^ 0x30` digits are the bytes 0–9, and adding 0x76 to a byte
 * sets its high bit exactly when it is above 9 (a byte with its high bit already set is caught by the `| y`; a carry
 * it causes can only flag a word that fails anyway).
 */
function allDigits(w: number): boolean {
  const y = w ^ 0x30303030;
  return (((y + 0x76767676) | y) & 0x80808080) === 0;
}

/** Describe the JSON value that starts at the cursor, for "invalid type" messages (nothing is consumed). */
export function describeValueAt(cursor: JsonCursor): string {
  const c = cursor.peek();
  if (c === 0x7b) return "map";
  if (c === 0x5b) return "sequence";
  if (c === 0x22) return "string";
  if (c === 0x74 || c === 0x66) return "boolean";
  if (c === 0x6e) return "null";
  if (c === 0x2d || isDigit(c)) return "number";
  return "value";
}

/**
 * A value of the wrong type where serde_json reads one in stream: like serde_json, a scalar is read first (so its own
 * syntax errors come first), an array or object is not; anything else is "expected value". Returns its description.
 */
export function consumeUnexpected(cursor: JsonCursor): string {
  const kind = describeValueAt(cursor);
  if (kind === "value") cursor.fail(cursor.peek() === EOF ? "EOF while parsing a value" : "expected value");
  if (kind !== "map" && kind !== "sequence") cursor.skipValue();
  return kind;
}
