/**
 * Reading a safetensors header: every check the reference (safetensors 0.8.0) makes, in its order.
 *
 *   1. fewer than 8 bytes                                  HeaderTooSmall
 *   2. N > maxHeaderBytes (default 100,000,000)            HeaderTooLarge
 *   3. 8 + N beyond the file                               InvalidHeaderLength
 *   4. header bytes not UTF-8                              InvalidHeaderUtf8
 *   5. JSON syntax / types / fields / dtype names          InvalidHeaderJson, InvalidHeaderStructure,
 *                                                          UnknownDtype, DuplicateKey
 *   6. tensors sorted by data_offsets, walked in order     InvalidOffset, ValidationOverflow,
 *                                                          MisalignedSlice, TensorInvalidInfo
 *   7. data end + 8 + N != file length                     MetadataIncompleteBuffer
 *
 * Within step 5 the reference parses the whole text first and checks tensor entries afterwards, while
 * `__metadata__` is checked as it is read; we report in the same precedence. Deliberate difference: a repeated tensor
 * name or metadata key is DuplicateKey (the reference silently keeps the last one).
 */

import { installed, isValidUtf8 } from "./accelerators.js";
import { type Dtype, dtypeInfo } from "./dtypes.js";
import { quoteName, SafetensorError } from "./errors.js";
import { consumeUnexpected, describeValueAt, JsonCursor, MAX_JSON_DEPTH } from "./json.js";

/** The largest header accepted by default: 100,000,000 bytes, the reference implementation's limit. */
export const DEFAULT_MAX_HEADER_BYTES = 100_000_000;
const U64_MAX = 2n ** 64n - 1n;

/** Limits and rules of header validation, taken by every reader. */
export interface HeaderOptions {
  /** Largest accepted header (JSON) size in bytes. Default 100,000,000, the reference's limit. */
  maxHeaderBytes?: number;
  /**
   * How element counts are checked for u64 overflow. "reference" (default) multiplies dims left to right and fails on
   * the first overflow, exactly like the reference, so `[2^40, 2^40, 0]` is ValidationOverflow while `[0, 2^40, 2^40]`
   * is a valid empty tensor. "exact" computes the true product, so both are valid empty tensors.
   */
  overflowCheck?: "reference" | "exact";
}

/** One tensor's header entry: dtype, shape and where its bytes are. */
export interface TensorInfo {
  readonly name: string;
  readonly dtype: Dtype;
  /** Dimensions. Exact except for dims above 2^53, which only a zero-element tensor can have: see `exactShape`. */
  readonly shape: readonly number[];
  /** Present only when some dim exceeds Number.MAX_SAFE_INTEGER. */
  readonly exactShape?: readonly bigint[];
  /** [begin, end) relative to the start of the data region. */
  readonly dataOffsets: readonly [number, number];
  readonly byteLength: number;
}

/** A validated header: sizes, metadata and every tensor's entry. */
export interface Header {
  /** N: the JSON header's size in bytes, padding included. */
  readonly headerLength: number;
  /** 8 + N: where the data region starts in the file. */
  readonly dataStart: number;
  readonly dataLength: number;
  readonly fileLength: number;
  /** `__metadata__`, or null when absent or JSON null. */
  readonly metadata: ReadonlyMap<string, string> | null;
  /** Tensors in file-offset order. */
  readonly tensors: ReadonlyMap<string, TensorInfo>;
}

/** Steps 1–3: read N from the first 8 bytes of a file of `fileLength` bytes. */
export function readHeaderLength(prefix: Uint8Array, fileLength: number, options: HeaderOptions = {}): number {
  const maxHeaderBytes = checkedLimit(options.maxHeaderBytes);
  if (fileLength < 8 || prefix.length < 8) {
    throw new SafetensorError("HeaderTooSmall", `file is ${fileLength} bytes, shorter than the 8-byte header size`);
  }
  // u64 little-endian, read as two 32-bit halves; a non-zero high half is always too large (limits are < 2^53).
  const low = (prefix[0]! | (prefix[1]! << 8) | (prefix[2]! << 16)) + prefix[3]! * 2 ** 24;
  const high = (prefix[4]! | (prefix[5]! << 8) | (prefix[6]! << 16)) + prefix[7]! * 2 ** 24;
  const n = high === 0 ? low : BigInt(high) * 2n ** 32n + BigInt(low);
  if (n > maxHeaderBytes) {
    throw new SafetensorError("HeaderTooLarge", `header size ${n} exceeds the limit of ${maxHeaderBytes} bytes`);
  }
  const headerLength = Number(n);
  if (8 + headerLength > fileLength) {
    throw new SafetensorError(
      "InvalidHeaderLength",
      `header size ${headerLength} runs past the end of the file (${fileLength} bytes)`,
    );
  }
  return headerLength;
}

/** `maxHeaderBytes`: a non-negative integer, or Infinity for no limit. */
function checkedLimit(value: number | undefined): number {
  if (value === undefined) return DEFAULT_MAX_HEADER_BYTES;
  if (value === Number.POSITIVE_INFINITY || (Number.isSafeInteger(value) && value >= 0)) return value;
  throw new SafetensorError("InvalidOption", `maxHeaderBytes must be a non-negative integer or Infinity, got ${value}`);
}

/** A whole file in memory: steps 1–7. */
export function parseHeaderFromBuffer(file: Uint8Array, options: HeaderOptions = {}): Header {
  const headerLength = readHeaderLength(file, file.length, options);
  return parseHeader(file.subarray(8, 8 + headerLength), file.length, options);
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Steps 4–7, given the N header bytes (after the 8-byte prefix) of a file of `fileLength` bytes. */
export function parseHeader(headerBytes: Uint8Array, fileLength: number, options: HeaderOptions = {}): Header {
  return headerFromJson(readHeaderBytes(headerBytes), headerBytes.length, fileLength, options);
}

/** Steps 6–7 over a parsed header (from the readers here, or from a native scanner that agrees with them). */
export function headerFromJson(
  { metadata, entries }: HeaderJson,
  headerLength: number,
  fileLength: number,
  options: HeaderOptions = {},
): Header {
  const tensors = validate(entries, options.overflowCheck ?? "reference");
  let dataLength = 0;
  for (const info of tensors.values()) dataLength = info.dataOffsets[1];
  if (dataLength + 8 + headerLength !== fileLength) {
    throw new SafetensorError(
      "MetadataIncompleteBuffer",
      `tensors cover ${dataLength} data bytes but the file has ${fileLength - 8 - headerLength} after the header` +
        " (the data region must be covered exactly, no missing or trailing bytes)",
    );
  }
  return { headerLength, dataStart: 8 + headerLength, dataLength, fileLength, metadata, tensors };
}

/** u64 values are kept as numbers when exact, else as bigint; `<`/`>` compare the two kinds correctly. */
type U64 = number | bigint;

export interface Entry {
  name: string;
  dtype: Dtype;
  shape: U64[];
  begin: U64;
  end: U64;
}

function toU64(value: bigint): U64 {
  return value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
}

/** Step 5 as parsed by the strict reader below. */
export type HeaderJson = { metadata: Map<string, string> | null; entries: Entry[] };

/**
 * Steps 4–5: UTF-8, then the JSON. Ordinary headers are decoded and given to `JSON.parse` (the fast path); anything
 * the pre-scan flags, and anything the fast path returns, goes to the strict reader, which reads the bytes in place.
 */
function readHeaderBytes(bytes: Uint8Array): HeaderJson {
  // Past the fast path's limit the pre-scan would decide nothing (it cost ~0.5 s on 99 MB of tiny entries).
  const colons = bytes.length <= FAST_PATH_MAX_BYTES ? prescan(bytes) : -1;
  const entryShaped =
    colons >= 0 && (bytes.length <= FAST_PATH_ANY_BYTES || bytes.length <= FAST_PATH_BYTES_PER_COLON * colons);
  if (entryShaped) {
    let text: string;
    try {
      text = utf8.decode(bytes);
    } catch (cause) {
      throw notUtf8(cause);
    }
    const parsed = fastPath(text, colons);
    if (parsed) return parsed;
  } else {
    checkUtf8(bytes);
  }
  const find = installed.findSyntaxError;
  return readHeaderJson(bytes, find ? { syntaxError: (b) => find(b) >= 0 } : {});
}

/**
 * The fast path decodes the whole header into a string for `JSON.parse`. Past 1 MiB it is taken only when the header
 * is mostly entries (at most 4 KiB per `:`): a header that is mostly one long string is read in place instead, where
 * it costs no copy (a failing 99 MB header of one string costs the reference ~105 MiB; a decoded copy would double
 * ours). Real headers run at ~100 bytes per `:`.
 */
const FAST_PATH_ANY_BYTES = 1 << 20;
const FAST_PATH_BYTES_PER_COLON = 4096;
/**
 * Larger headers are read in place only. `JSON.parse` is the faster reader for valid headers of many entries (~1.5×
 * on 10 MB of them), but when a late entry is bad it is paid on top of the strict reader (2 M entries with an unknown
 * dtype: ~1 GB and 5× the reference's time), and the native scanner (src/format/scanned.ts) already takes the large
 * valid headers of the common form.
 */
const FAST_PATH_MAX_BYTES = 16 << 20;

function notUtf8(cause?: unknown): SafetensorError {
  return new SafetensorError("InvalidHeaderUtf8", "header is not valid UTF-8", { cause });
}

/** Step 4 without keeping the text (the reference checks the whole header before parsing any of it). */
function checkUtf8(bytes: Uint8Array): void {
  if (!isValidUtf8(bytes)) throw notUtf8();
}

/**
 * Step 5, fast path: the native `JSON.parse` plus the checks it cannot make (duplicate keys are found by comparing
 * the number of `:` outside strings with the number of keys parsed; numbers and escapes it reads differently from
 * serde_json, and nesting deeper than serde_json's limit, send the text to the strict reader). Returns null whenever
 * the strict reader must decide — for every invalid header, and for rare valid ones — so results are always the
 * strict reader's. Exported for tests.
 */
export function readHeaderJsonFast(text: string): HeaderJson | null {
  const colons = prescan(new TextEncoder().encode(text));
  return colons < 0 ? null : fastPath(text, colons);
}

/** The fast path once the pre-scan has counted `colons` and found nothing for the strict reader. */
function fastPath(text: string, colons: number): HeaderJson | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  if (!isPlainObject(parsed)) return null;
  let keys = 0;
  let metadata: Map<string, string> | null = null;
  const entries: Entry[] = [];
  for (const name of Object.keys(parsed)) {
    keys++;
    if (isIndexLike(name)) return null;
    const value = parsed[name];
    if (name === "__metadata__") {
      if (value === null) continue;
      if (!isPlainObject(value)) return null;
      metadata = new Map();
      for (const key of Object.keys(value)) {
        keys++;
        const item = value[key];
        if (isIndexLike(key) || typeof item !== "string") return null;
        metadata.set(key, item);
      }
      continue;
    }
    if (!isPlainObject(value)) return null;
    let dtype: Dtype | undefined;
    let shape: number[] | undefined;
    let offsets: number[] | undefined;
    for (const field of Object.keys(value)) {
      keys++;
      const item = value[field];
      if (field === "dtype") {
        if (typeof item !== "string" || !dtypeInfo(item)) return null;
        dtype = item as Dtype;
      } else if (field === "shape" || field === "data_offsets") {
        if (!Array.isArray(item) || !item.every((n) => Number.isSafeInteger(n) && n >= 0)) return null;
        if (field === "shape") shape = item;
        else if (item.length === 2) offsets = item;
        else return null;
      } else {
        const nested = countKeys(item, 3);
        if (nested < 0) return null;
        keys += nested;
      }
    }
    if (dtype === undefined || shape === undefined || offsets === undefined) return null;
    entries.push({ name, dtype, shape, begin: offsets[0]!, end: offsets[1]! });
  }
  return keys === colons ? { metadata, entries } : null;
}

/**
 * One pass over the header text, before `JSON.parse` is trusted with it: the number of `:` outside strings, or -1
 * when the strict reader must decide or decides faster:
 *   - nesting deeper than serde_json's limit (found at the 128th level, before `JSON.parse` would build all 50 M
 *     levels of a hostile header: 31 s and 5 GB), a number `JSON.parse` reads differently from serde_json (negative,
 *     fractional, exponent, 16+ digits), an escaped surrogate (`JSON.parse` accepts lone ones), an unbalanced
 *     bracket, an unterminated string;
 *   - a header that is not shaped like one: top-level values that are not objects, entries with fewer than three
 *     fields, array-form entries, or more structure inside field values (nested containers, keys, elements) than
 *     shapes and offsets need. The fast path would give such headers to the strict reader anyway after paying for
 *     `JSON.parse`, or `JSON.parse` is the slower reader for them (measured on 10 MB headers: an ignored object of
 *     1 M keys 3.4 s vs 0.13 s strict; 1 M metadata entries 2.2 s vs 1.6 s; arrays nested to 127 levels 1.9 s vs
 *     0.3 s).
 * Strings are jumped over with `indexOf`; no regular expression (a backtracking one overflowed the stack on any
 * string of ~8 M characters) and no substrings.
 */
function prescan(bytes: Uint8Array): number {
  const length = bytes.length;
  let depth = 0;
  let digits = 0;
  let colons = 0;
  let topColons = 0; // members of the top-level object
  let fields = 0; // members of the objects one level down (tensor fields, metadata entries)
  let objects = 0; // objects one level down (tensor entries, `__metadata__`)
  let inner = 0; // containers, members and elements inside field values
  // Next backslash at or after the current string's start (length when none): strings without one are skipped whole.
  let backslash = -1;
  for (let pos = 0; pos < length; pos++) {
    const c = bytes[pos]!;
    if (c >= 0x30 && c <= 0x39) {
      if (++digits >= 16) return -1;
      continue;
    }
    if (OUTSIDE_STRINGS[c] === 0) return -1;
    const afterDigit = digits > 0;
    digits = 0;
    switch (c) {
      case 0x22: {
        let close = bytes.indexOf(0x22, pos + 1);
        if (close < 0) return -1;
        if (backslash <= pos) backslash = nextIndex(bytes, 0x5c, pos + 1);
        while (backslash < close) {
          // An escape inside this string: `\uD8..`–`\uDF..` is a surrogate; `\"` moves the end further on.
          const e = bytes[backslash + 1];
          if (e === 0x75) {
            const h = (bytes[backslash + 2] ?? 0) | 0x20;
            const l = (bytes[backslash + 3] ?? 0) | 0x20;
            if (h === 0x64 && ((l >= 0x38 && l <= 0x39) || (l >= 0x61 && l <= 0x66))) return -1;
          }
          const after = backslash + 2;
          if (close < after) {
            close = bytes.indexOf(0x22, after);
            if (close < 0) return -1;
          }
          backslash = nextIndex(bytes, 0x5c, after);
        }
        pos = close;
        break;
      }
      case 0x3a:
        colons++;
        if (depth === 1) topColons++;
        else if (depth === 2) fields++;
        else inner++;
        break;
      case 0x2c:
        if (depth >= 3) inner++;
        break;
      case 0x7b:
      case 0x5b:
        if (++depth > MAX_JSON_DEPTH) return -1;
        if (depth === 2) {
          if (c === 0x5b) return -1;
          objects++;
        } else if (depth >= 3) {
          inner++;
        }
        break;
      case 0x7d:
      case 0x5d:
        if (--depth < 0) return -1;
        break;
      case 0x2d:
      case 0x2e:
        return -1;
      case 0x65:
      case 0x45:
        if (afterDigit) return -1;
        break;
    }
  }
  if (topColons > objects + 1 || fields < 3 * (objects - 1)) return -1;
  if (fields > 8 * objects + 64 || inner > 16 * objects + 1024) return -1;
  return colons;
}

function nextIndex(bytes: Uint8Array, byte: number, from: number): number {
  const at = bytes.indexOf(byte, from);
  return at < 0 ? bytes.length : at;
}

/** Bytes JSON allows outside strings (1): whitespace, punctuation, digits, sign, and the letters of literals and exponents. */
const OUTSIDE_STRINGS = new Uint8Array(256);
for (const c of ' \t\r\n{}[]:,"0123456789+-.eEtrufalsn') OUTSIDE_STRINGS[c.charCodeAt(0)] = 1;

/**
 * Keys that JavaScript objects enumerate before the others (integer-like), which would change the order of ties.
 * Conservative: any all-digit key counts.
 */
function isIndexLike(key: string): boolean {
  if (key.length === 0) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Keys in all objects within `value` (found at nesting `level`), or -1 past serde_json's depth limit. */
function countKeys(value: unknown, level: number): number {
  if (typeof value !== "object" || value === null) return 0;
  if (level > MAX_JSON_DEPTH) return -1;
  let keys = 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  if (!Array.isArray(value)) keys += children.length;
  for (const child of children) {
    const nested = countKeys(child, level + 1);
    if (nested < 0) return -1;
    keys += nested;
  }
  return keys;
}

/** How the strict reader may use a native syntax scanner (see `findSyntaxError`); internal, and for tests. */
export interface StrictReadOptions {
  /** Whether the header holds a syntax error inside its top-level object (a hint: the reader still finds it). */
  syntaxError?: (bytes: Uint8Array) => boolean;
  /** Entries read before asking `syntaxError` (default {@link SYNTAX_HINT_AFTER_ENTRIES}). */
  hintAfterEntries?: number;
}

/**
 * Headers of more entries than this ask the native scanner whether a syntax error lies ahead (one pass at ~5 GB/s,
 * ~20 ms per 100 MB): headers of a few long tokens never pay for it.
 */
const SYNTAX_HINT_AFTER_ENTRIES = 10_000;

/** Step 5: syntax, structure, dtypes, duplicates, over UTF-8 already checked. Exported for tests (which pass text). */
export function readHeaderJson(input: string | Uint8Array, options: StrictReadOptions = {}): HeaderJson {
  const cursor = new JsonCursor(input);
  const entries: Entry[] = [];
  let metadata: Map<string, string> | null = null;
  let sawMetadata = false;
  // Tensor entries are checked after the whole text parses (as the reference does); keep the first problem. Errors
  // are built only for that one (1 M bad entries once cost 1 M errors with stacks: 19 s), and once there is one,
  // later entries are only checked for syntax: they cannot change the verdict.
  let deferred: SafetensorError | null = null;
  const defer: Defer = (make) => {
    deferred ??= make();
  };
  // Set when a syntax error lies ahead: it comes before every entry's error, so entries need only be skipped. Only
  // `__metadata__`, checked as it is read, can fail first (2 M entries before a bad last name: 4.8 s and 716 MiB
  // read in full, ~0.9 s skipped).
  let syntaxErrorAhead = false;
  const hintAfter = options.syntaxError ? (options.hintAfterEntries ?? SYNTAX_HINT_AFTER_ENTRIES) : -1;
  let count = 0;
  const names = new Set<string>();

  if (cursor.peek() !== 0x7b) {
    const kind = consumeUnexpected(cursor);
    throw new SafetensorError("InvalidHeaderStructure", `header must be a JSON object, found a ${kind}`);
  }
  cursor.members(
    // Keys of entries that will only be skipped are not decoded: millions of them would cost a string each.
    () => (deferred !== null || syntaxErrorAhead ? cursor.keyIs(METADATA) && METADATA : cursor.string()),
    (key) => {
      if (key === METADATA) {
        if (sawMetadata) throw new SafetensorError("DuplicateKey", "duplicate field `__metadata__` in header");
        sawMetadata = true;
        metadata = readMetadata(cursor);
        return;
      }
      if (key === false || deferred !== null) {
        cursor.skipValue();
        return;
      }
      if (++count === hintAfter) syntaxErrorAhead = options.syntaxError!(cursor.bytes);
      if (names.has(key)) {
        defer(
          () =>
            new SafetensorError("DuplicateKey", `duplicate tensor name ${quoteName(key)} in header`, { tensor: key }),
        );
        cursor.skipValue();
        return;
      }
      names.add(key);
      const entry = readTensorEntry(cursor, key, defer);
      if (entry) entries.push(entry);
    },
  );
  // The hint was wrong: the entries skipped since must be read after all.
  if (syntaxErrorAhead) return readHeaderJson(input);
  // Entry errors come before trailing characters: the reference checks entries once the object is read.
  if (deferred) throw deferred;
  cursor.end();
  return { metadata, entries };
}

const METADATA = "__metadata__";

function readMetadata(cursor: JsonCursor): Map<string, string> | null {
  const c = cursor.peek();
  if (c === 0x6e) {
    cursor.literal("null");
    return null;
  }
  if (c !== 0x7b) {
    const kind = consumeUnexpected(cursor);
    throw new SafetensorError(
      "InvalidHeaderStructure",
      `\`__metadata__\` must be an object of strings, found a ${kind}`,
    );
  }
  const metadata = new Map<string, string>();
  cursor.object((key) => {
    if (cursor.peek() !== 0x22) {
      const kind = consumeUnexpected(cursor);
      throw new SafetensorError(
        "InvalidHeaderStructure",
        `\`__metadata__\` value for ${quoteName(key)} must be a string, found a ${kind}`,
      );
    }
    const value = cursor.string();
    if (metadata.has(key)) {
      throw new SafetensorError("DuplicateKey", `duplicate key ${quoteName(key)} in \`__metadata__\``);
    }
    metadata.set(key, value);
  });
  return metadata;
}

/** Records an entry's problem; `make` builds the error and runs only for the first one. */
type Defer = (make: () => SafetensorError) => void;

/**
 * One tensor entry: `{"dtype", "shape", "data_offsets"}` in any order with unknown fields ignored, or — as serde
 * also accepts for structs — the 3-element array `[dtype, shape, data_offsets]`.
 */
function readTensorEntry(cursor: JsonCursor, name: string, defer: Defer): Entry | null {
  const structural = (what: string) =>
    new SafetensorError("InvalidHeaderStructure", `tensor ${quoteName(name)}: ${what}`, { tensor: name });
  let dtype: Dtype | null = null;
  let shape: U64[] | null = null;
  let offsets: U64[] | null = null;
  let failed = false;
  const fail = (make: () => SafetensorError) => {
    failed = true;
    defer(make);
  };

  const readField = (field: "dtype" | "shape" | "data_offsets") => {
    if (field === "dtype") {
      const value = readDtypeName(cursor, (what) => fail(() => structural(what)));
      if (value === null) return;
      const info = dtypeInfo(value);
      if (!info) {
        fail(
          () =>
            new SafetensorError("UnknownDtype", `tensor ${quoteName(name)}: unknown dtype ${quoteName(value)}`, {
              tensor: name,
            }),
        );
        return;
      }
      dtype = info.name;
      return;
    }
    const list = readU64List(cursor, (what) => fail(() => structural(`${field} ${what()}`)));
    if (!list) return;
    if (field === "shape") shape = list;
    else if (list.length !== 2) fail(() => structural(`data_offsets must have 2 elements, found ${list.length}`));
    else offsets = list;
  };

  const c = cursor.peek();
  if (c === 0x7b) {
    const seen = new Set<string>();
    // Once the entry has failed, its first error stands: the rest is only checked for syntax, keys not even decoded
    // (7 M repeated fields would otherwise each be decoded and looked up).
    const readKey = () => {
      if (!failed) return cursor.string();
      cursor.skipString();
      return null;
    };
    cursor.members(readKey, (key) => {
      if (key === null || (key !== "dtype" && key !== "shape" && key !== "data_offsets")) {
        cursor.skipValue();
        return;
      }
      if (seen.has(key)) {
        fail(
          () =>
            new SafetensorError("DuplicateKey", `tensor ${quoteName(name)}: duplicate field \`${key}\``, {
              tensor: name,
            }),
        );
      }
      seen.add(key);
      readField(key);
    });
    for (const field of ["dtype", "shape", "data_offsets"] as const) {
      if (!seen.has(field)) fail(() => structural(`missing field \`${field}\``));
    }
  } else if (c === 0x5b) {
    const order = ["dtype", "shape", "data_offsets"] as const;
    let count = 0;
    cursor.array((index) => {
      count = index + 1;
      const field = order[index];
      if (field) readField(field);
      else cursor.skipValue();
    });
    if (count !== 3) {
      fail(() => structural(`array form must have 3 elements [dtype, shape, data_offsets], found ${count}`));
    }
  } else {
    const kind = describeValueAt(cursor);
    fail(() => structural(`expected an object {dtype, shape, data_offsets}, found a ${kind}`));
    cursor.skipValue();
  }
  if (failed || dtype === null || shape === null || offsets === null) return null;
  const [begin, end] = offsets as [U64, U64];
  return { name, dtype, shape, begin, end };
}

/**
 * A dtype: a string, or — as serde also reads a unit enum variant — a one-entry map `{"F32": null}`. Reports anything
 * else through `bad` and returns null; the value is consumed either way.
 */
function readDtypeName(cursor: JsonCursor, bad: (what: string) => void): string | null {
  const c = cursor.peek();
  if (c === 0x22) return cursor.string();
  if (c !== 0x7b) {
    bad(`dtype must be a string, found a ${describeValueAt(cursor)}`);
    cursor.skipValue();
    return null;
  }
  const keys: string[] = [];
  let unitValue = true;
  cursor.object((key) => {
    keys.push(key);
    if (cursor.peek() === 0x6e) cursor.literal("null");
    else {
      unitValue = false;
      cursor.skipValue();
    }
  });
  if (keys.length !== 1) {
    bad(`dtype given as a map must have exactly one key, found ${keys.length}`);
    return null;
  }
  if (!dtypeInfo(keys[0]!)) return keys[0]!; // unknown variant, reported by the caller
  if (!unitValue) {
    bad(`dtype given as a map must map the dtype name to null`);
    return null;
  }
  return keys[0]!;
}

/**
 * An array of integers in [0, 2^64); reports the first bad element through `bad` (its message built only if it is
 * used) and returns null.
 */
function readU64List(cursor: JsonCursor, bad: (what: () => string) => void): U64[] | null {
  if (cursor.peek() !== 0x5b) {
    const kind = describeValueAt(cursor);
    bad(() => `must be an array of non-negative integers, found a ${kind}`);
    cursor.skipValue();
    return null;
  }
  const list: U64[] = [];
  let ok = true;
  cursor.array(() => {
    const small = cursor.smallUint();
    if (small >= 0) {
      list.push(small);
      return;
    }
    const c = cursor.peek();
    if (c !== 0x2d && !(c >= 0x30 && c <= 0x39)) {
      if (ok) {
        const kind = describeValueAt(cursor);
        bad(() => `must contain only non-negative integers, found a ${kind}`);
      }
      ok = false;
      cursor.skipValue();
      return;
    }
    const token = cursor.number();
    if (token.kind !== "integer" || token.negative) {
      if (ok)
        bad(
          () => `must contain only integers in [0, 2^64), found ${token.kind === "float" ? token.text : token.value}`,
        );
      ok = false;
      return;
    }
    list.push(typeof token.value === "number" ? token.value : toU64(token.value));
  });
  return ok ? list : null;
}

/** Steps 6: offsets tile the data region, sizes agree with dtype × shape. */
function validate(entries: Entry[], overflowCheck: "reference" | "exact"): Map<string, TensorInfo> {
  // Stable sort by (begin, end), the reference's order; headers are almost always in that order already.
  const byOffsets = (a: Entry, b: Entry) => cmp(a.begin, b.begin) || cmp(a.end, b.end);
  let sorted = entries;
  for (let i = 1; i < entries.length; i++) {
    if (byOffsets(entries[i - 1]!, entries[i]!) > 0) {
      sorted = entries.slice().sort(byOffsets);
      break;
    }
  }
  const tensors = new Map<string, TensorInfo>();
  let start: U64 = 0;
  for (const entry of sorted) {
    const { name, dtype, shape, begin, end } = entry;
    if (cmp(begin, start) !== 0 || end < begin) {
      const expected = `expected it to start at ${start}`;
      throw new SafetensorError(
        "InvalidOffset",
        `invalid data_offsets [${begin}, ${end}] for tensor ${quoteName(name)}: ${end < begin ? "end before begin" : expected} (tensors must tile the data region without gaps or overlaps)`,
        { tensor: name },
      );
    }
    start = end;
    checkSize(entry, overflowCheck);
    // Valid offsets are bounded by the file size checked in step 7, but a header can claim more than any file
    // holds; such numbers are caught there (they cannot equal a real file length) — keep them exact until then.
    const beginNumber = Number(begin);
    const endNumber = Number(end);
    let exact = false;
    for (const dim of shape) exact ||= typeof dim === "bigint";
    const dataOffsets: [number, number] = [beginNumber, endNumber];
    const byteLength = endNumber - beginNumber;
    // Entries are the readers' own arrays, so an all-number shape is used as it is.
    // Shapes are frozen, so that tensors can share them (see `tensorOfInfo`).
    const info: TensorInfo = exact
      ? { name, dtype, shape: Object.freeze(shape.map(Number)), exactShape: shape.map(BigInt), dataOffsets, byteLength }
      : { name, dtype, shape: Object.freeze(shape as number[]), dataOffsets, byteLength };
    tensors.set(name, info);
  }
  if (typeof start === "bigint") {
    throw new SafetensorError(
      "MetadataIncompleteBuffer",
      `tensors claim ${start} data bytes, more than any file this reader accepts`,
    );
  }
  return tensors;
}

/** Steps 6b–6d for one entry: element count overflow, whole bytes, byte span. Numbers while exact, else BigInt. */
function checkSize({ name, dtype, shape, begin, end }: Entry, overflowMode: "reference" | "exact"): void {
  const bits = dtypeInfo(dtype)!.bits;
  let elements = 1;
  for (const dim of shape) {
    elements = typeof dim === "number" ? elements * dim : Number.POSITIVE_INFINITY;
    if (elements > Number.MAX_SAFE_INTEGER) break;
  }
  const totalBits = elements * bits;
  if (totalBits <= Number.MAX_SAFE_INTEGER && typeof begin === "number" && typeof end === "number") {
    if (totalBits % 8 !== 0) misaligned(name, dtype, elements, bits);
    if (end - begin !== totalBits / 8) invalidInfo(name, dtype, shape, totalBits / 8, end - begin);
    return;
  }
  const exact = elementCountChecked(shape, overflowMode);
  if (exact === null || exact * BigInt(bits) > U64_MAX) {
    throw new SafetensorError(
      "ValidationOverflow",
      `tensor ${quoteName(name)}: shape ${formatShape(shape)} × ${dtype} overflows 64-bit size arithmetic`,
      { tensor: name },
    );
  }
  const exactBits = exact * BigInt(bits);
  if (exactBits % 8n !== 0n) misaligned(name, dtype, exact, bits);
  const span = BigInt(end) - BigInt(begin);
  if (span !== exactBits / 8n) invalidInfo(name, dtype, shape, exactBits / 8n, span);
}

function misaligned(name: string, dtype: Dtype, elements: number | bigint, bits: number): never {
  throw new SafetensorError(
    "MisalignedSlice",
    `tensor ${quoteName(name)}: ${elements} elements of ${dtype} (${bits} bits each) do not fill whole bytes`,
    { tensor: name },
  );
}

function invalidInfo(name: string, dtype: Dtype, shape: U64[], needed: U64, span: U64): never {
  throw new SafetensorError(
    "TensorInvalidInfo",
    `tensor ${quoteName(name)}: ${dtype} ${formatShape(shape)} needs ${needed} bytes but data_offsets span ${span}`,
    { tensor: name },
  );
}

function cmp(a: U64, b: U64): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Element count, or null on u64 overflow (checked after each multiplication like the reference, or exactly). */
function elementCountChecked(shape: readonly U64[], mode: "reference" | "exact"): bigint | null {
  let fast = 1;
  for (const dim of shape) {
    fast = typeof dim === "number" ? fast * dim : Number.POSITIVE_INFINITY;
    if (fast > Number.MAX_SAFE_INTEGER) break;
  }
  if (fast <= Number.MAX_SAFE_INTEGER) return BigInt(fast); // every prefix product was exact: no overflow
  // A zero anywhere makes the exact product 0. Without zeros every prefix product grows, so both modes can stop at
  // the first one past u64 (10 M dims of 2 would otherwise build a 10 M-bit BigInt).
  if (mode === "exact" && shape.includes(0)) return 0n;
  let product = 1n;
  for (const dim of shape) {
    product *= BigInt(dim);
    if (product === 0n) return 0n;
    if (product > U64_MAX) return null;
  }
  return product;
}

/** A shape for messages: every dim of ordinary shapes, the first and last few of very long ones. */
function formatShape(shape: readonly U64[]): string {
  if (shape.length <= 16) return `[${shape.join(", ")}]`;
  return `[${shape.slice(0, 8).join(", ")}, …, ${shape.slice(-4).join(", ")}] (${shape.length} dims)`;
}
