/**
 * Hostile headers (bench/hostile-cases.ts), built small here (and a few past the size where they once crashed):
 * every one gets the reference's verdict — recorded by scripts/gen_hostile_verdicts.ts in
 * test/fixtures/hostile-verdicts.jsonl — with the error code that verdict maps to, or our deliberately stricter
 * DuplicateKey; never another exception. Timing is the benchmark's job (bench/hostile.ts), not this test's.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { buildHostileFile, HOSTILE_CASES, testSizes } from "../bench/hostile-cases.js";
import { expectedCodes, refClass } from "../scripts/reference-errors.js";
import { readHeaderJson } from "../src/format/header.js";
import { JsonCursor } from "../src/format/json.js";
import { deserialize, isSafetensorError } from "../src/index.js";

interface Recorded {
  id: string;
  size: number;
  ok: boolean;
  error: string | null;
}

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hostile-verdicts.jsonl");
const recorded = fs
  .readFileSync(fixture, "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line) as Recorded);

test("every hostile case and size has a recorded reference verdict", () => {
  const expected = HOSTILE_CASES.flatMap((c) => testSizes(c).map((size) => `${c.id}@${size}`)).sort();
  const have = recorded.map((r) => `${r.id}@${r.size}`).sort();
  assert.deepEqual(have, expected, "rerun scripts/gen_hostile_verdicts.ts");
});

for (const hostile of HOSTILE_CASES) {
  for (const size of testSizes(hostile)) {
    test(`${hostile.id} (${size} bytes): ${hostile.what}`, () => {
      const reference = recorded.find((r) => r.id === hostile.id && r.size === size);
      assert.ok(reference, "no recorded verdict");
      const file = buildHostileFile(hostile, size);
      let code: string | null = null;
      try {
        deserialize(file);
      } catch (error) {
        if (!isSafetensorError(error)) throw error; // a crash: RangeError, TypeError, …
        code = error.code;
      }
      if (hostile.stricter && reference.ok) {
        assert.equal(code, hostile.stricter, "refused on purpose where the reference keeps the last value");
      } else if (reference.ok) {
        assert.equal(code, null, "the reference accepts this file");
      } else {
        const codes = expectedCodes(refClass(reference.error));
        assert.ok(codes, `unclassified reference error: ${reference.error}`);
        assert.ok(code !== null && codes.includes(code), `got ${code}, the reference says: ${reference.error}`);
      }
    });
  }
}

test("UTF-8 is checked in pieces that never split a character, and every invalid byte is found", () => {
  // A header that is mostly one long string is checked piece by piece (1 MiB each); shift multi-byte characters
  // across the piece boundaries.
  const MiB = 1 << 20;
  const tensor = '{"dtype":"U8","shape":[0],"data_offsets":[0,0]}';
  for (const char of ["é", "€", "😀"]) {
    for (let shift = 0; shift < 4; shift++) {
      const name = "a".repeat(MiB - 3 + shift) + char.repeat(Math.ceil((MiB + 8) / char.length));
      const header = new TextEncoder().encode(`{"${name}":${tensor}}`);
      const file = (bytes: Uint8Array) => {
        const out = new Uint8Array(8 + bytes.length);
        new DataView(out.buffer).setBigUint64(0, BigInt(bytes.length), true);
        out.set(bytes, 8);
        return out;
      };
      assert.doesNotThrow(() => deserialize(file(header)), `${char} shifted by ${shift}`);
      for (const at of [MiB - 1, MiB, MiB + 1, 2 * MiB]) {
        // Bytes that are never valid UTF-8, wherever they stand.
        for (const bad of [0xff, 0xc0]) {
          const broken = header.slice();
          broken[at] = bad;
          assert.throws(
            () => deserialize(file(broken)),
            (error: unknown) => isSafetensorError(error) && error.code === "InvalidHeaderUtf8",
            `${char} shifted by ${shift}, 0x${bad.toString(16)} at ${at}`,
          );
        }
      }
    }
  }
});

test("strings read the same at every alignment of the header bytes (the word-at-a-time scan)", () => {
  const names = [
    "",
    "a",
    'ab"',
    "abc\\",
    "abcd\u0001",
    "\u00e9\u00e9\u00e9",
    "x".repeat(37),
    'q\\"q',
    "\\u0041\\ud83d\\ude00",
  ];
  const headers: string[] = [];
  for (const name of names) {
    for (let pad = 0; pad < 4; pad++) {
      headers.push(`{${" ".repeat(pad)}"${name}":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`);
      headers.push(`{${" ".repeat(pad)}"${name}`); // unterminated
    }
  }
  const read = (bytes: Uint8Array) => {
    try {
      return readHeaderJson(bytes);
    } catch (error) {
      return isSafetensorError(error) ? `${error.code}: ${error.message}` : `CRASH ${error}`;
    }
  };
  for (const header of headers) {
    const bytes = new TextEncoder().encode(header);
    const expected = read(bytes);
    for (let shift = 1; shift < 8; shift++) {
      const shifted = new Uint8Array(bytes.length + shift);
      shifted.set(bytes, shift);
      assert.deepEqual(read(shifted.subarray(shift)), expected, `${JSON.stringify(header)} at offset ${shift}`);
    }
  }
});

test("number tokens end where their digits end, at every alignment (the word-at-a-time digit scan)", () => {
  // A regular expression is the oracle here: these tokens are short.
  const token = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/;
  const digits = (n: number, seed: number) =>
    Array.from({ length: n }, (_, i) => String.fromCharCode(0x30 + ((i * 7 + seed) % 10))).join("");
  for (let pad = 0; pad < 4; pad++) {
    for (let n = 1; n <= 24; n++) {
      for (const after of ["", ",", "]", " ", "x", "/", ":", "\u00e9"]) {
        for (const shape of ["1D", "1D.D", "1De-D", "-1D", "1DE+D", "0.D"]) {
          const text = shape.replaceAll("D", digits(n, pad + n));
          const input = `${" ".repeat(pad)}${text}${after}`;
          const cursor = new JsonCursor(input);
          let end: number | string;
          try {
            cursor.number();
            end = cursor.pos;
          } catch (error) {
            end = isSafetensorError(error) ? error.code : `CRASH ${error}`;
          }
          const expected = token.exec(text)![0].length;
          if (typeof end === "number") assert.equal(end, pad + expected, JSON.stringify(input));
          else assert.equal(end, "InvalidHeaderJson", JSON.stringify(input));
        }
      }
    }
  }
});

test("shape lists read small integers directly, and give every other token to the full number reader", () => {
  const entry = (shape: string) => `{"t":{"dtype":"U8","shape":[${shape}],"data_offsets":[0,0]}}`;
  const read = (text: string) => {
    try {
      return readHeaderJson(text).entries[0]?.shape;
    } catch (error) {
      return isSafetensorError(error) ? `${error.code}: ${error.message}` : `CRASH ${error}`;
    }
  };
  assert.deepEqual(read(entry("0, 1 ,999999999999999,3")), [0, 1, 999999999999999, 3]);
  assert.deepEqual(read(entry("9999999999999999")), [9999999999999999n]);
  assert.deepEqual(read(entry("18446744073709551615,0")), [18446744073709551615n, 0]);
  for (const bad of ["01", "1.0", "1e2", "1E2", "-1", "-0", "1x", "1 2", "1,", "18446744073709551616"]) {
    const got = read(entry(bad));
    assert.equal(typeof got, "string", `${bad}: ${got}`);
    assert.ok(!String(got).startsWith("CRASH"), `${bad}: ${got}`);
  }
  assert.match(String(read(entry("01"))), /^InvalidHeaderJson: invalid JSON in header: invalid number/);
  assert.match(String(read(entry("1.0"))), /^InvalidHeaderStructure: .*found 1\.0$/);
});
