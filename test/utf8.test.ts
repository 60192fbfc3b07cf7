/**
 * Node's `buffer.isUtf8`, which the Node entry installs for the header's UTF-8 check, must accept exactly what the
 * core's fallback (a fatal TextDecoder over character-aligned pieces) accepts: overlong forms, encoded surrogates,
 * code points past U+10FFFF, stray and missing continuation bytes are all invalid for both.
 */
import assert from "node:assert/strict";
import { isUtf8 } from "node:buffer";
import { test } from "node:test";
import fc from "fast-check";
import { decodesInPieces } from "../src/format/accelerators.js";

/** Bytes around the edges of UTF-8's rules, mixed with ASCII. */
const edgeByte = fc.constantFrom(
  0x00,
  0x22,
  0x41,
  0x7f,
  0x80,
  0x8f,
  0x90,
  0x9f,
  0xa0,
  0xbf,
  0xc0,
  0xc1,
  0xc2,
  0xdf,
  0xe0,
  0xed,
  0xee,
  0xef,
  0xf0,
  0xf4,
  0xf5,
  0xf8,
  0xff,
);
const piece = fc.oneof(
  fc.uint8Array({ maxLength: 6 }).map((b) => b.map((x) => x & 0x7f)),
  fc.array(edgeByte, { maxLength: 6 }).map((b) => Uint8Array.from(b)),
  fc.string({ unit: "binary", maxLength: 4 }).map((s) => new TextEncoder().encode(s)),
);
const bytes = fc.array(piece, { maxLength: 40 }).map((pieces) => Uint8Array.from(pieces.flatMap((p) => [...p])));

test("isUtf8 agrees with the fallback on bytes at UTF-8's edges", () => {
  fc.assert(
    fc.property(bytes, (b) => {
      assert.equal(isUtf8(b), decodesInPieces(b), Buffer.from(b).toString("hex"));
    }),
    { numRuns: 5000 },
  );
});

test("isUtf8 agrees with the fallback on the classic invalid forms", () => {
  const cases = [
    [0xc0, 0x80], // overlong NUL
    [0xe0, 0x80, 0x80], // overlong
    [0xed, 0xa0, 0x80], // encoded surrogate U+D800
    [0xed, 0xbf, 0xbf], // encoded surrogate U+DFFF
    [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
    [0xf0, 0x9f, 0x98], // truncated
    [0x80], // stray continuation
    [0xef, 0xbb, 0xbf, 0x41], // a BOM is valid
    [0xf0, 0x9f, 0x98, 0x80], // valid 4-byte
  ];
  for (const c of cases) {
    const b = Uint8Array.from(c);
    assert.equal(isUtf8(b), decodesInPieces(b), Buffer.from(b).toString("hex"));
  }
});
