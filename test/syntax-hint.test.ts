/**
 * The native hostile-header helpers (native/header_scan.c: `findSyntaxError`, `scanRun`) and the reader's use of
 * them. The reader keeps deciding every verdict; these check that the shortcuts change nothing:
 *  - skipping tensor entries once a syntax error is said to lie ahead gives exactly the full reader's result (same
 *    value, or same code and message), whatever the hint says — checked without the addon by forcing the hint;
 *  - the native scanner finds a syntax error exactly where the full reader reports one (so the shortcut is taken),
 *    and none in headers the reader accepts;
 *  - `scanRun` ends runs where a byte loop does.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { buildHostileFile, HOSTILE_CASES, SMALL_SIZE } from "../bench/hostile-cases.js";
import { readHeaderJson, type StrictReadOptions } from "../src/format/header.js";
import { isSafetensorError } from "../src/index.js";
import { loadNative } from "../src/io/native.js";
import { header, mutated } from "./helpers/headers.js";

const encoder = new TextEncoder();

function outcome(bytes: Uint8Array, options?: StrictReadOptions): unknown {
  try {
    return readHeaderJson(bytes, options);
  } catch (error) {
    if (!isSafetensorError(error)) throw error;
    return `${error.code}: ${error.message}`;
  }
}

/** The hostile cases, small: their header bytes. */
const hostileHeaders = HOSTILE_CASES.map((c) => {
  const file = buildHostileFile(c, SMALL_SIZE);
  const n = Number(new DataView(file.buffer).getBigUint64(0, true));
  return { id: c.id, bytes: file.subarray(8, 8 + n) };
});

/** Many valid entries, then `tail`: the shape the hint is for. */
function manyThen(tail: string, count = 40): Uint8Array {
  const entries = Array.from({ length: count }, (_, i) => `"k${i}":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`);
  return encoder.encode(`{${entries.join(",")}${tail}`);
}
const TAILS = [
  "}",
  ',"\\udc00":{}}',
  ',"x":[[[}',
  ',"x":"\u0001"}',
  ',"__metadata__":{"a":1},"x":"\\q"}',
  ',"__metadata__":{"a":"b"},"x":tru}',
  ',"__meta\\u0064ata__":5,"x":-}',
  ',"__metadata__":null,"__metadata__":null,"y":{]}',
  ',"k1":{}, "z":1.}',
  ',"z":{"dtype":"XX","shape":[],"data_offsets":[0,0]}} trailing',
  ',"z":1e999999}',
  ',"z":01}',
  ',"z":[1,]}',
  ',"z":"unterminated',
];

test("skipping entries once a syntax error is said to lie ahead changes no result", () => {
  const inputs = [...hostileHeaders.map((h) => h.bytes), ...TAILS.map((t) => manyThen(t))];
  for (const bytes of inputs) {
    const full = outcome(bytes);
    for (const hintAfterEntries of [1, 2, 7]) {
      for (const says of [true, false]) {
        assert.deepStrictEqual(
          outcome(bytes, { syntaxError: () => says, hintAfterEntries }),
          full,
          new TextDecoder().decode(bytes.subarray(0, 300)),
        );
      }
    }
  }
  fc.assert(
    fc.property(mutated, fc.integer({ min: 1, max: 4 }), (text, hintAfterEntries) => {
      const bytes = encoder.encode(text);
      assert.deepStrictEqual(outcome(bytes, { syntaxError: () => true, hintAfterEntries }), outcome(bytes), text);
    }),
    { seed: 20261201, numRuns: 4000 },
  );
});

const addon = loadNative();
const skipNative =
  addon?.findSyntaxError && addon.scanRun ? false : "the native addon (with its header helpers) is not built";

/** Syntax errors that the native scanner leaves to the reader: numbers' ranges, and what follows the object. */
const NOT_FOUND_NATIVELY = /number out of range|trailing characters/;

function checkAgainstReader(bytes: Uint8Array, label: string): void {
  const found = addon!.findSyntaxError!(bytes);
  const full = outcome(bytes);
  const startsObject = /^[ \t\r\n]*\{/.test(new TextDecoder().decode(bytes.subarray(0, 64)));
  if (typeof full !== "string") {
    assert.equal(found, -1, `${label}: the reader accepts it`);
  } else if (startsObject && full.startsWith("InvalidHeaderJson: invalid JSON") && !NOT_FOUND_NATIVELY.test(full)) {
    assert.ok(found >= 0, `${label}: the reader says ${full}`);
  } else if (found >= 0) {
    // Another error came first (structure, metadata) or the error is one the scanner does not judge; whatever it
    // found must be a real one: the reader fails.
    assert.equal(typeof full, "string", label);
  }
}

test("the native scanner finds the syntax errors the reader reports, and none in valid headers", {
  skip: skipNative,
}, () => {
  for (const { id, bytes } of hostileHeaders) checkAgainstReader(bytes, id);
  for (const tail of TAILS) checkAgainstReader(manyThen(tail), tail);
  fc.assert(
    fc.property(fc.oneof(header, mutated), (text) => checkAgainstReader(encoder.encode(text), text)),
    { seed: 20261201, numRuns: 6000 },
  );
});

test("scanRun ends runs where a byte loop does", { skip: skipNative }, () => {
  const stops = [
    (c: number) => !(c >= 0x30 && c <= 0x39),
    (c: number) => !(c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d),
    (c: number) => c === 0x22 || c === 0x5c || c < 0x20,
  ];
  const runByte = fc.constantFrom(0x30, 0x35, 0x39, 0x20, 0x09, 0x0a, 0x0d, 0x61, 0x7f, 0xc3, 0xa9, 0xff);
  const otherByte = fc.constantFrom(0x00, 0x1f, 0x22, 0x5c, 0x2f, 0x3a, 0x2e, 0x80, 0x41);
  const bytes = fc
    .array(fc.oneof({ weight: 12, arbitrary: runByte }, { weight: 1, arbitrary: otherByte }), { maxLength: 80 })
    .map((b) => Uint8Array.from(b));
  fc.assert(
    fc.property(bytes, fc.nat(3), fc.nat(90), fc.constantFrom(0, 1, 2), (raw, shift, from, kind) => {
      // Every alignment of the bytes in memory.
      const buffer = new Uint8Array(raw.length + shift);
      buffer.set(raw, shift);
      const view = buffer.subarray(shift);
      const start = Math.min(from, view.length);
      let end = start;
      while (end < view.length && !stops[kind]!(view[end]!)) end++;
      assert.equal(addon!.scanRun!(view, start, kind), end);
    }),
    { seed: 20261201, numRuns: 20000 },
  );
});

test("the Node entry's accelerators change no verdict or message on the hostile cases", {
  skip: skipNative,
}, async () => {
  const { installed } = await import("../src/format/accelerators.js");
  const { parseHeader } = await import("../src/format/header.js");
  await import("../src/node.js"); // installs isUtf8, scanRun and findSyntaxError
  assert.ok(installed.isUtf8 && installed.scanRun && installed.findSyntaxError);
  // Count the hints given, to see the shortcut taken.
  const find = installed.findSyntaxError;
  let found = 0;
  installed.findSyntaxError = (bytes) => {
    const at = find(bytes);
    if (at >= 0) found++;
    return at;
  };
  const saved = { ...installed };
  const judge = (bytes: Uint8Array, fileLength: number) => {
    try {
      const header = parseHeader(bytes, fileLength);
      return { tensors: [...header.tensors.values()], metadata: header.metadata };
    } catch (error) {
      if (!isSafetensorError(error)) throw error;
      return `${error.code}: ${error.message}`;
    }
  };
  // 1 MB: past the 10,000 entries after which the reader asks for a syntax error, and runs far past 256 bytes.
  for (const hostile of HOSTILE_CASES) {
    const file = buildHostileFile(hostile, 1 << 20);
    const n = Number(new DataView(file.buffer).getBigUint64(0, true));
    const bytes = file.subarray(8, 8 + n);
    const fast = judge(bytes, file.length);
    for (const key of Object.keys(installed) as (keyof typeof installed)[]) delete installed[key];
    try {
      assert.deepStrictEqual(judge(bytes, file.length), fast, hostile.id);
    } finally {
      Object.assign(installed, saved);
    }
  }
  installed.findSyntaxError = find;
  assert.ok(found >= 1, `the syntax hint was found ${found} times`);
});
