/**
 * Header parsing: a malformed-input suite that reaches every error code of the format group, the limits, and the valid
 * edge cases the reference accepts. Runs without Python; when the reference implementation is available, the last
 * test also has it read every case and checks it reaches the same ok/fail verdict (intended differences: duplicate
 * tensor names and duplicate metadata keys, which the reference silently resolves last-wins and we refuse).
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import type { SafetensorErrorCode } from "../src/format/errors.js";
import { HEADER_ERROR_CODES, isSafetensorError, quoteName } from "../src/format/errors.js";
import {
  DEFAULT_MAX_HEADER_BYTES,
  type Header,
  type HeaderOptions,
  parseHeaderFromBuffer,
  readHeaderLength,
} from "../src/format/header.js";
import { referenceCheckScript, runReference, skipWithoutReference } from "./helpers/reference.js";

const encoder = new TextEncoder();

/** A file: 8-byte little-endian N, the header bytes, then `data` (a byte count of zeros, or bytes). */
function file(header: string | Uint8Array, data: number | Uint8Array = 0, n?: bigint): Uint8Array {
  const headerBytes = typeof header === "string" ? encoder.encode(header) : header;
  const dataBytes = typeof data === "number" ? new Uint8Array(data) : data;
  const out = new Uint8Array(8 + headerBytes.length + dataBytes.length);
  new DataView(out.buffer).setBigUint64(0, n ?? BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  out.set(dataBytes, 8 + headerBytes.length);
  return out;
}

const bytes = (...parts: (string | number[])[]) =>
  new Uint8Array(parts.flatMap((p) => (typeof p === "string" ? [...encoder.encode(p)] : p)));

/** One tensor entry as JSON. */
const entry = (
  dtype: string,
  shape: (number | bigint | string)[],
  begin: number | bigint | string,
  end: number | bigint | string,
) => `{"dtype":"${dtype}","shape":[${shape.join(",")}],"data_offsets":[${begin},${end}]}`;

const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth);

const P40 = 2n ** 40n;
const U64_MAX = 2n ** 64n - 1n;

interface Case {
  name: string;
  bytes: Uint8Array;
  options?: HeaderOptions;
  /** Expected error code, or "ok". */
  expect: SafetensorErrorCode | "ok";
  /** The tensor the error must name. */
  tensor?: string;
  /** Extra checks on a valid header. */
  check?: (header: Header) => void;
  /** The reference's verdict when it differs on purpose (duplicates). Default: same as ours. */
  referenceOk?: boolean;
  /** Leave out of the reference cross-check (option-dependent cases). */
  noReference?: boolean;
}

const cases: Case[] = [];
const add = (c: Case) => cases.push(c);

// --- 1. HeaderTooSmall -------------------------------------------------------------------------------------------
add({ name: "empty file", bytes: new Uint8Array(0), expect: "HeaderTooSmall" });
add({ name: "7 bytes", bytes: new Uint8Array(7), expect: "HeaderTooSmall" });
add({ name: "7 bytes of a valid prefix", bytes: file("{}").subarray(0, 7), expect: "HeaderTooSmall" });

// --- 2. HeaderTooLarge -------------------------------------------------------------------------------------------
add({ name: "N = 100,000,001", bytes: file("{}", 0, 100_000_001n), expect: "HeaderTooLarge" });
add({ name: "N = 2^64 - 1", bytes: file("{}", 0, U64_MAX), expect: "HeaderTooLarge" });
add({ name: "N = 2^63", bytes: file("{}", 0, 2n ** 63n), expect: "HeaderTooLarge" });
add({
  name: "N = 100,000,000 passes the size check (then runs past the file)",
  bytes: file("{}", 0, 100_000_000n),
  expect: "InvalidHeaderLength",
});
add({
  name: "maxHeaderBytes: N one over the option",
  bytes: file("{}      ", 0),
  options: { maxHeaderBytes: 7 },
  expect: "HeaderTooLarge",
  noReference: true,
});
add({
  name: "maxHeaderBytes: N equal to the option",
  bytes: file("{}      ", 0),
  options: { maxHeaderBytes: 8 },
  expect: "ok",
  noReference: true,
});

// --- 3. InvalidHeaderLength --------------------------------------------------------------------------------------
add({ name: "N past the end", bytes: file("{}", 0, 50n), expect: "InvalidHeaderLength" });
add({ name: "N one past the end", bytes: file("{}", 0, 3n), expect: "InvalidHeaderLength" });
add({ name: "N = 1 with an 8-byte file", bytes: file("", 0, 1n), expect: "InvalidHeaderLength" });

// --- 4. InvalidHeaderUtf8 ----------------------------------------------------------------------------------------
add({ name: "0xFF in a key", bytes: file(bytes('{"', [0xff], '":1}')), expect: "InvalidHeaderUtf8" });
add({ name: "overlong '/' (C0 AF)", bytes: file(bytes('{"', [0xc0, 0xaf], '":1}')), expect: "InvalidHeaderUtf8" });
add({
  name: "UTF-8-encoded surrogate (ED A0 80)",
  bytes: file(bytes('{"', [0xed, 0xa0, 0x80], '":1}')),
  expect: "InvalidHeaderUtf8",
});
add({
  name: "above U+10FFFF (F4 90 80 80)",
  bytes: file(bytes('{"', [0xf4, 0x90, 0x80, 0x80], '":1}')),
  expect: "InvalidHeaderUtf8",
});
add({ name: "truncated sequence at the end", bytes: file(bytes("{}", [0xe2, 0x82])), expect: "InvalidHeaderUtf8" });
add({ name: "lone continuation byte in padding", bytes: file(bytes("{}   ", [0x80])), expect: "InvalidHeaderUtf8" });
add({
  name: "invalid UTF-8 wins over an invalid offset",
  bytes: file(bytes(`{"a":${entry("U8", [1], 1, 2)},"`, [0xff], '":0}'), 2),
  expect: "InvalidHeaderUtf8",
});

// --- 5a. InvalidHeaderJson ---------------------------------------------------------------------------------------
const json = (name: string, header: string | Uint8Array, data: number = 0) =>
  add({ name, bytes: file(header, data), expect: "InvalidHeaderJson" });
json("empty header", "");
json("only spaces", "        ");
json("unclosed object", "{");
json("UTF-8 BOM before the object", bytes([0xef, 0xbb, 0xbf], "{}"));
json("trailing NUL", bytes("{}", [0]));
json("NUL padding", bytes("{}", [0, 0, 0, 0, 0, 0]));
json("trailing characters", "{}x");
json("two objects", "{}{}");
json("trailing comma in object", `{"a":${entry("U8", [0], 0, 0)},}`);
json("trailing comma in shape", `{"a":{"dtype":"U8","shape":[0,],"data_offsets":[0,0]}}`);
json("single quotes", "{'a':1}");
json("unquoted key", "{a:1}");
json("missing colon", '{"a" 1}');
json("NaN", `{"a":${entry("U8", [0], 0, 0).replace("}", ',"x":NaN}')}}`);
json("1e400 in an ignored field", `{"a":${entry("U8", [0], 0, 0).replace("}", ',"x":1e400}')}}`);
json("-1e400 in metadata position", '{"__metadata__":{"a":"b"},"x":{"y":-1e400}}');
json("leading zero in shape", `{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}`, 1);
json("lone high surrogate escape in a name", `{"\\ud800":${entry("U8", [0], 0, 0)}}`);
json("lone low surrogate escape in a name", `{"\\udc00":${entry("U8", [0], 0, 0)}}`);
json("high surrogate + non-surrogate escape", `{"\\ud800\\u0041":${entry("U8", [0], 0, 0)}}`);
json("invalid escape \\x", `{"\\x41":${entry("U8", [0], 0, 0)}}`);
json("raw control character in a name", `{"a\tb":${entry("U8", [0], 0, 0)}}`);
json("raw NUL in a string", bytes('{"a', [0], `b":${entry("U8", [0], 0, 0)}}`));
json("form feed as whitespace", "\f{}");
json("vertical tab as whitespace", "{\v}");
json("non-breaking space as whitespace", "{}\u00a0");
json("U+2028 as whitespace", "\u2028{}");
json("128 levels of nesting", `{"a":${entry("U8", [0], 0, 0).replace("}", `,"x":${nested(126)}}`)}}`);
json("128 levels in metadata position", `{"x":${nested(127)}}`);
json("truncated literal", `{"__metadata__":nul}`);
json("True (capitalised)", `{"a":${entry("U8", [0], 0, 0).replace("}", ',"x":True}')}}`);
json("'+1' number", `{"a":{"dtype":"U8","shape":[+1],"data_offsets":[0,1]}}`, 1);
json("'.5' number", `{"a":{"dtype":"U8","shape":[.5],"data_offsets":[0,1]}}`, 1);
json("'1.' number", `{"a":{"dtype":"U8","shape":[1.],"data_offsets":[0,1]}}`, 1);
json("hex number", `{"a":{"dtype":"U8","shape":[0x1],"data_offsets":[0,1]}}`, 1);
json("comment", `{/* c */}`);

// --- 5b. InvalidHeaderStructure ----------------------------------------------------------------------------------
const structure = (name: string, header: string, data = 0, tensor?: string) =>
  add({
    name,
    bytes: file(header, data),
    expect: "InvalidHeaderStructure",
    ...(tensor !== undefined ? { tensor } : {}),
  });
structure("top level array", "[]");
structure("top level null", "null");
structure("top level string", '"{}"');
structure("top level number", "1");
structure("__metadata__ is a number", '{"__metadata__":1}');
structure("__metadata__ is an array", '{"__metadata__":[]}');
structure("__metadata__ is a string", '{"__metadata__":"x"}');
structure("__metadata__ value is a number", '{"__metadata__":{"a":1}}');
structure("__metadata__ value is null", '{"__metadata__":{"a":null}}');
structure("__metadata__ value is an object", '{"__metadata__":{"a":{}}}');
structure("__metadata__ value is an array", '{"__metadata__":{"a":["b"]}}');
structure("__metadata__ value is a boolean", '{"__metadata__":{"a":true}}');
structure("missing dtype", '{"t":{"shape":[1],"data_offsets":[0,1]}}', 1, "t");
structure("missing shape", '{"t":{"dtype":"U8","data_offsets":[0,1]}}', 1, "t");
structure("missing data_offsets", '{"t":{"dtype":"U8","shape":[1]}}', 1, "t");
structure("empty entry", '{"t":{}}', 0, "t");
structure("entry is a string", '{"t":"U8"}', 0, "t");
structure("entry is null", '{"t":null}', 0, "t");
structure("entry is a number", '{"t":0}', 0, "t");
structure("dtype is a number", '{"t":{"dtype":8,"shape":[1],"data_offsets":[0,1]}}', 1, "t");
structure("dtype is null", '{"t":{"dtype":null,"shape":[1],"data_offsets":[0,1]}}', 1, "t");
structure("shape is a number", '{"t":{"dtype":"U8","shape":1,"data_offsets":[0,1]}}', 1, "t");
structure("shape is null", '{"t":{"dtype":"U8","shape":null,"data_offsets":[0,1]}}', 1, "t");
structure("shape with -1", `{"t":${entry("U8", [-1], 0, 1)}}`, 1, "t");
structure("shape with 4.0", `{"t":${entry("U8", ["4.0"], 0, 4)}}`, 4, "t");
structure("shape with 1e0", `{"t":${entry("U8", ["1e0"], 0, 1)}}`, 1, "t");
structure("shape with -0", `{"t":${entry("U8", ["-0"], 0, 0)}}`, 0, "t");
structure('shape with "0"', `{"t":${entry("U8", ['"0"'], 0, 0)}}`, 0, "t");
structure("shape with 2^64", `{"t":${entry("U8", [2n ** 64n, 0], 0, 0)}}`, 0, "t");
structure("shape with a nested array", `{"t":${entry("U8", ["[1]"], 0, 1)}}`, 1, "t");
structure("shape with true", `{"t":${entry("U8", ["true"], 0, 1)}}`, 1, "t");
structure("data_offsets with 3 elements", '{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,1]}}', 1, "t");
structure("data_offsets with 1 element", '{"t":{"dtype":"U8","shape":[1],"data_offsets":[1]}}', 1, "t");
structure("data_offsets empty", '{"t":{"dtype":"U8","shape":[0],"data_offsets":[]}}', 0, "t");
structure("data_offsets with -1", `{"t":${entry("U8", [1], -1, 0)}}`, 1, "t");
structure("data_offsets with 2^64", `{"t":${entry("U8", [0], 2n ** 64n, 2n ** 64n)}}`, 0, "t");
structure("data_offsets with 1.5", `{"t":${entry("U8", [1], "1.5", 2)}}`, 1, "t");
structure("data_offsets is an object", '{"t":{"dtype":"U8","shape":[1],"data_offsets":{"0":0,"1":1}}}', 1, "t");
structure("array form with 2 elements", '{"t":["U8",[1]]}', 1, "t");
structure("array form with 4 elements", '{"t":["U8",[1],[0,1],0]}', 1, "t");
structure("array form, empty", '{"t":[]}', 0, "t");
structure("array form, wrong order", '{"t":[[1],"U8",[0,1]]}', 1, "t");
structure("structure error in a later tensor", `{"a":${entry("U8", [1], 0, 1)},"b":{"dtype":"U8"}}`, 1, "b");

// --- 5c. DuplicateKey --------------------------------------------------------------------------------------------
add({
  name: "duplicate tensor name",
  bytes: file(`{"a":${entry("F32", [1], 0, 4)},"a":${entry("F32", [1], 0, 4)}}`, 4),
  expect: "DuplicateKey",
  tensor: "a",
  referenceOk: true,
});
add({
  name: "duplicate tensor name spelled with an escape",
  bytes: file(`{"ab":${entry("U8", [1], 0, 1)},"a\\u0062":${entry("U8", [1], 0, 1)}}`, 1),
  expect: "DuplicateKey",
  tensor: "ab",
  referenceOk: true,
});
add({
  name: "duplicate tensor name whose last entry alone would be valid",
  bytes: file(`{"a":${entry("U8", [3], 0, 3)},"a":${entry("U8", [1], 0, 1)}}`, 1),
  expect: "DuplicateKey",
  tensor: "a",
  referenceOk: true,
});
add({
  name: "duplicate metadata key",
  bytes: file('{"__metadata__":{"k":"1","k":"2"}}'),
  expect: "DuplicateKey",
  referenceOk: true,
});
add({ name: "__metadata__ twice", bytes: file('{"__metadata__":{},"__metadata__":{}}'), expect: "DuplicateKey" });
add({
  name: "__metadata__ twice, once spelled with an escape",
  bytes: file('{"__metadata__":null,"__metadata\\u005f_":{}}'),
  expect: "DuplicateKey",
});
add({
  name: "repeated field inside an entry",
  bytes: file('{"t":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
  expect: "DuplicateKey",
  tensor: "t",
});
add({
  name: "repeated data_offsets inside an entry",
  bytes: file('{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"data_offsets":[0,1]}}', 1),
  expect: "DuplicateKey",
  tensor: "t",
});

// --- 5d. UnknownDtype --------------------------------------------------------------------------------------------
for (const dtype of ["E8M0", "FP4", "UE8", "f32", "bf16", "F8_E4M3FN", "FLOAT32", "float32", "", "F32 ", "F6"]) {
  add({
    name: `unknown dtype ${JSON.stringify(dtype)}`,
    bytes: file(`{"t":${entry(dtype, [1], 0, 4)}}`, 4),
    expect: "UnknownDtype",
    tensor: "t",
  });
}

// --- 6a. InvalidOffset -------------------------------------------------------------------------------------------
const offset = (name: string, header: string, data: number, tensor: string) =>
  add({ name, bytes: file(header, data), expect: "InvalidOffset", tensor });
offset("first tensor not at 0", `{"t":${entry("F32", [1], 1, 5)}}`, 5, "t");
offset("gap between tensors", `{"a":${entry("U8", [1], 0, 1)},"b":${entry("U8", [1], 2, 3)}}`, 3, "b");
offset("overlap", `{"a":${entry("U8", [2], 0, 2)},"b":${entry("U8", [2], 1, 3)}}`, 3, "b");
offset("same range twice", `{"a":${entry("U8", [2], 0, 2)},"b":${entry("U8", [2], 0, 2)}}`, 4, "b");
offset("end before begin", `{"t":${entry("U8", [0], 4, 0)}}`, 4, "t");
offset("end before begin at 0", `{"a":${entry("U8", [4], 0, 4)},"b":${entry("U8", [0], 4, 3)}}`, 4, "b");
offset("offsets past 2^53 (not at 0)", `{"t":${entry("U8", [4], 9007199254740993n, 9007199254740997n)}}`, 4, "t");
offset("begin 2^64 - 1", `{"t":${entry("U8", [0], U64_MAX, U64_MAX)}}`, 0, "t");

// --- 6b. ValidationOverflow --------------------------------------------------------------------------------------
add({
  name: "[2^40, 2^40, 0] overflows under the reference's left-to-right rule",
  bytes: file(`{"t":${entry("F32", [P40, P40, 0], 0, 0)}}`),
  expect: "ValidationOverflow",
  tensor: "t",
});
add({
  name: "[2^40, 2^40, 0] is a valid empty tensor under overflowCheck: exact",
  bytes: file(`{"t":${entry("F32", [P40, P40, 0], 0, 0)}}`),
  options: { overflowCheck: "exact" },
  expect: "ok",
  noReference: true,
  check: (h) => {
    assert.deepEqual(h.tensors.get("t")?.shape, [2 ** 40, 2 ** 40, 0]);
    assert.equal(h.tensors.get("t")?.byteLength, 0);
  },
});
add({
  name: "elements fit, bits overflow (F64 [2^61])",
  bytes: file(`{"t":${entry("F64", [2n ** 61n], 0, 2n ** 64n - 8n)}}`),
  expect: "ValidationOverflow",
  tensor: "t",
});
add({
  name: "F64 [2^61] overflows under exact too",
  bytes: file(`{"t":${entry("F64", [2n ** 61n], 0, 2n ** 64n - 8n)}}`),
  options: { overflowCheck: "exact" },
  expect: "ValidationOverflow",
  tensor: "t",
  noReference: true,
});
add({
  name: "[2^64 - 1, 2] elements overflow",
  bytes: file(`{"t":${entry("U8", [U64_MAX, 2], 0, 0)}}`),
  expect: "ValidationOverflow",
  tensor: "t",
});
add({
  name: "U8 [2^64 - 1] bits overflow",
  bytes: file(`{"t":${entry("U8", [U64_MAX], 0, U64_MAX)}}`),
  expect: "ValidationOverflow",
  tensor: "t",
});

// --- 6c. MisalignedSlice -----------------------------------------------------------------------------------------
const misaligned = (dtype: string, shape: number[], bytesLength: number) =>
  add({
    name: `${dtype} [${shape}] is not a whole number of bytes`,
    bytes: file(`{"t":${entry(dtype, shape, 0, bytesLength)}}`, bytesLength),
    expect: "MisalignedSlice",
    tensor: "t",
  });
misaligned("F4", [3], 2);
misaligned("F4", [3], 1);
misaligned("F4", [], 1);
misaligned("F4", [1, 3], 2);
misaligned("F6_E2M3", [1], 1);
misaligned("F6_E3M2", [2], 2);
misaligned("F6_E2M3", [5], 4);

// --- 6d. TensorInvalidInfo ---------------------------------------------------------------------------------------
const info = (name: string, dtype: string, shape: number[], span: number) =>
  add({
    name,
    bytes: file(`{"t":${entry(dtype, shape, 0, span)}}`, span),
    expect: "TensorInvalidInfo",
    tensor: "t",
  });
info("F32 [2] over 4 bytes", "F32", [2], 4);
info("F32 [1] over 8 bytes", "F32", [1], 8);
info("zero-size tensor with a non-empty span", "F32", [0], 4);
info("scalar with an empty span", "F64", [], 0);
info("F4 [4] over 4 bytes", "F4", [4], 4);
info("F6 [4] over 4 bytes", "F6_E3M2", [4], 4);
add({
  name: "invalid info in a later tensor",
  bytes: file(`{"a":${entry("U8", [2], 0, 2)},"b":${entry("U16", [2], 2, 5)}}`, 5),
  expect: "TensorInvalidInfo",
  tensor: "b",
});

// --- 7. MetadataIncompleteBuffer ---------------------------------------------------------------------------------
const incomplete = (name: string, header: string, data: number) =>
  add({ name, bytes: file(header, data), expect: "MetadataIncompleteBuffer" });
incomplete("truncated by one byte", `{"t":${entry("F32", [2], 0, 8)}}`, 7);
incomplete("no data at all", `{"t":${entry("F32", [2], 0, 8)}}`, 0);
incomplete("one trailing byte", `{"t":${entry("F32", [2], 0, 8)}}`, 9);
incomplete("trailing bytes after an empty header", "{}", 1);
incomplete("trailing bytes after zero-size tensors", `{"t":${entry("F32", [0], 0, 0)}}`, 16);
incomplete(
  "offsets past 2^53 from 0 (exact-sized claim)",
  `{"t":${entry("U8", [9007199254740995n], 0, 9007199254740995n)}}`,
  4,
);
incomplete("a petabyte claimed", `{"t":${entry("U8", [2n ** 50n], 0, 2n ** 50n)}}`, 16);

// --- valid edge cases --------------------------------------------------------------------------------------------
const valid = (name: string, header: string | Uint8Array, data: number | Uint8Array, check?: (h: Header) => void) =>
  add({ name, bytes: file(header, data), expect: "ok", ...(check ? { check } : {}) });
valid("{}", "{}", 0, (h) => {
  assert.equal(h.tensors.size, 0);
  assert.equal(h.metadata, null);
  assert.equal(h.dataStart, 10);
});
valid("{} padded with spaces", "{}      ", 0);
valid("whitespace of every kind around the JSON", " \t\r\n{ \t\r\n} \t\r\n", 0);
valid(
  "whitespace everywhere inside",
  ` { "t" : { "dtype" : "U8" , "shape" : [ 1 ] , "data_offsets" : [ 0 , 1 ] } } `,
  1,
);
valid("__metadata__: null", '{"__metadata__":null}', 0, (h) => assert.equal(h.metadata, null));
valid("__metadata__: {}", '{"__metadata__":{}}', 0, (h) => assert.equal(h.metadata?.size, 0));
valid("metadata only", '{"__metadata__":{"format":"pt","":""}}', 0, (h) =>
  assert.deepEqual(
    [...(h.metadata ?? [])],
    [
      ["format", "pt"],
      ["", ""],
    ],
  ),
);
valid("__metadata__ spelled with an escape is the metadata", '{"__metadata\\u005f_":{"a":"b"}}', 0, (h) =>
  assert.equal(h.metadata?.get("a"), "b"),
);
valid("__metadata__ after the tensors", `{"t":${entry("U8", [1], 0, 1)},"__metadata__":{"a":"b"}}`, 1);
valid("array-form entry", '{"t":["F32",[1],[0,4]]}', 4, (h) => {
  const t = h.tensors.get("t");
  assert.equal(t?.dtype, "F32");
  assert.deepEqual(t?.dataOffsets, [0, 4]);
});
valid("array-form entries mixed with objects", `{"a":["U8",[2],[0,2]],"b":${entry("U8", [1], 2, 3)}}`, 3);
valid(
  "unknown extra fields of every type are ignored",
  `{"t":{"x":1,"dtype":"U8","y":{"z":[1,-2.5e300,"s",null,true,false,{}]},"shape":[1],"w":"\\ud83d\\ude00","data_offsets":[0,1],"v":18446744073709551616}}`,
  1,
);
valid("an unknown field repeated", `{"t":${entry("U8", [1], 0, 1).replace("}", ',"x":1,"x":2}')}}`, 1);
valid("fields in another order", '{"t":{"data_offsets":[0,2],"shape":[2],"dtype":"U8"}}', 2);
valid(
  "127 levels of nesting in an ignored field",
  `{"t":${entry("U8", [0], 0, 0).replace("}", `,"x":${nested(125)}}`)}}`,
  0,
);
valid("scalar F64 []", `{"t":${entry("F64", [], 0, 8)}}`, 8, (h) => assert.deepEqual(h.tensors.get("t")?.shape, []));
valid("scalar BOOL []", `{"t":${entry("BOOL", [], 0, 1)}}`, new Uint8Array([7]));
valid("F4 [4] = 2 bytes", `{"t":${entry("F4", [4], 0, 2)}}`, 2, (h) => assert.equal(h.tensors.get("t")?.byteLength, 2));
valid("F4 [2, 3] = 3 bytes", `{"t":${entry("F4", [2, 3], 0, 3)}}`, 3);
valid("F6_E2M3 [4] = 3 bytes", `{"t":${entry("F6_E2M3", [4], 0, 3)}}`, 3);
valid("F6_E3M2 [2, 8] = 12 bytes", `{"t":${entry("F6_E3M2", [2, 8], 0, 12)}}`, 12);
valid("[0, 2^40, 2^40] is a valid empty tensor", `{"t":${entry("F32", [0, P40, P40], 0, 0)}}`, 0, (h) => {
  const t = h.tensors.get("t")!;
  assert.equal(t.byteLength, 0);
  assert.deepEqual(t.shape, [0, 2 ** 40, 2 ** 40]);
});
valid("[2^64 - 1, 0] is a valid empty tensor", `{"t":${entry("U8", [U64_MAX, 0], 0, 0)}}`, 0, (h) =>
  assert.deepEqual(h.tensors.get("t")?.exactShape, [U64_MAX, 0n]),
);
valid(
  "zero-size tensors tied at one offset",
  `{"a":${entry("U8", [0], 2, 2)},"b":${entry("U8", [2], 0, 2)},"c":${entry("I32", [0, 3], 2, 2)}}`,
  2,
);
valid("tensors listed out of offset order", `{"b":${entry("U8", [1], 1, 2)},"a":${entry("U8", [1], 0, 1)}}`, 2, (h) =>
  assert.deepEqual([...h.tensors.keys()], ["a", "b"]),
);
valid("a tensor named __proto__", `{"__proto__":${entry("U8", [1], 0, 1)}}`, 1, (h) => {
  assert.ok(h.tensors.has("__proto__"));
  assert.equal(h.tensors.size, 1);
  assert.equal(({} as Record<string, unknown>).dtype, undefined);
});
valid(
  "tensors named constructor, toString, hasOwnProperty",
  `{"constructor":${entry("U8", [1], 0, 1)},"toString":${entry("U8", [1], 1, 2)},"hasOwnProperty":${entry("U8", [0], 2, 2)}}`,
  2,
  (h) => assert.deepEqual([...h.tensors.keys()].sort(), ["constructor", "hasOwnProperty", "toString"]),
);
valid("empty tensor name", `{"":${entry("U8", [1], 0, 1)}}`, 1, (h) => assert.ok(h.tensors.has("")));
valid("metadata keys __proto__ and constructor", '{"__metadata__":{"__proto__":"x","constructor":"y"}}', 0, (h) =>
  assert.equal(h.metadata?.get("__proto__"), "x"),
);
valid(
  "escaped names decode",
  `{"\\u00e9\\ud83d\\ude00\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000":${entry("U8", [1], 0, 1)}}`,
  1,
  (h) => assert.ok(h.tensors.has('é\u{1F600}"\\/\b\f\n\r\t\0')),
);
valid("raw UTF-8 names incl. astral and U+FFFF", `{"日本\u{1F600}\uFFFF\uE000":${entry("U8", [1], 0, 1)}}`, 1);
valid("raw DEL in a name", `{"a\x7f":${entry("U8", [1], 0, 1)}}`, 1);
valid(
  "numbers in odd valid forms in ignored fields",
  `{"t":${entry("U8", [1], 0, 1).replace("}", ',"x":[-0,0.0,1E5,1e-400,-1.5e+3,123456789012345678901234567890]}')}}`,
  1,
);
valid(
  "offsets as large valid u64 for zero-size at the end",
  `{"a":${entry("U8", [1], 0, 1)},"b":${entry("U8", [0, 9007199254740993n], 1, 1)}}`,
  1,
);
{
  const dtypes: [string, number[], number][] = [
    ["BOOL", [1], 1],
    ["F4", [2], 1],
    ["F6_E2M3", [4], 3],
    ["F6_E3M2", [4], 3],
    ["U8", [1], 1],
    ["I8", [1], 1],
    ["F8_E5M2", [1], 1],
    ["F8_E4M3", [1], 1],
    ["F8_E8M0", [1], 1],
    ["F8_E4M3FNUZ", [1], 1],
    ["F8_E5M2FNUZ", [1], 1],
    ["I16", [1], 2],
    ["U16", [1], 2],
    ["F16", [1], 2],
    ["BF16", [1], 2],
    ["I32", [1], 4],
    ["U32", [1], 4],
    ["F32", [1], 4],
    ["C64", [1], 8],
    ["F64", [1], 8],
    ["I64", [1], 8],
    ["U64", [1], 8],
  ];
  let at = 0;
  const parts = dtypes.map(([dtype, shape, size]) => {
    const part = `"${dtype}":${entry(dtype, shape, at, at + size)}`;
    at += size;
    return part;
  });
  valid("every dtype", `{${parts.join(",")}}`, at, (h) => {
    assert.deepEqual(
      [...h.tensors.values()].map((t) => t.dtype),
      dtypes.map(([d]) => d),
    );
  });
}

// --- reference parity: inputs where we and the reference disagree (found by scripts/diff_fuzz.ts) -------------------
// serde accepts an externally tagged enum written as a one-key map with a unit value, so the reference reads
// `"dtype": {"F32": null}` as F32. We currently refuse it (InvalidHeaderStructure).
add({
  name: 'PARITY: dtype written as the map {"F32": null} (the reference accepts)',
  bytes: file('{"t":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}', 4),
  expect: "ok",
});
// serde_json (without float_roundtrip) computes f64(significand) * 10^exp: a number just above f64::MAX's shortest
// form but below the rounding halfway point is "number out of range" there, while correct rounding gives f64::MAX.
// We currently accept it.
add({
  name: "PARITY: 1.797693134862315708e308 in an ignored field is out of range for the reference",
  bytes: file(`{"t":${entry("U8", [0], 0, 0).replace("}", ',"x":1.797693134862315708e308}')}}`),
  expect: "InvalidHeaderJson",
});

// Error precedence (both fail; the code should name the reference's first error). serde_json finishes the top-level
// object, tensor entries included, before it checks for trailing characters; and it rejects a wrongly typed top-level
// or `__metadata__` value at its first character, without parsing it.
add({
  name: "PARITY: an entry error comes before trailing characters (reference: invalid value)",
  bytes: file(`{"t":${entry("U8", [-1], 0, 0)}}]`),
  expect: "InvalidHeaderStructure",
  tensor: "t",
});
add({
  name: "PARITY: an unknown dtype comes before trailing characters (reference: unknown variant)",
  bytes: file(`{"t":${entry("E8M0", [0], 0, 0)}} x`),
  expect: "UnknownDtype",
  tensor: "t",
});
add({
  name: "PARITY: a top-level array is a structure error even when its contents are not JSON",
  bytes: file("[}"),
  expect: "InvalidHeaderStructure",
});
add({
  name: "PARITY: an array as __metadata__ is a structure error even when its contents are not JSON",
  bytes: file('{"__metadata__":[}'),
  expect: "InvalidHeaderStructure",
});
add({
  name: "PARITY: a missing __metadata__ value is a JSON syntax error (reference: expected value)",
  bytes: file('{"__metadata__":{"a":,}}'),
  expect: "InvalidHeaderJson",
});

// A header exactly at the default limit (100,000,000 bytes), parsed for real.
describe("header size limit", () => {
  test("readHeaderLength: 100,000,000 accepted, 100,000,001 rejected", () => {
    const prefix = (n: number) => {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setBigUint64(0, BigInt(n), true);
      return b;
    };
    assert.equal(DEFAULT_MAX_HEADER_BYTES, 100_000_000);
    assert.equal(readHeaderLength(prefix(100_000_000), 8 + 100_000_000), 100_000_000);
    assert.throws(() => readHeaderLength(prefix(100_000_001), 8 + 100_000_001), { code: "HeaderTooLarge" });
    assert.equal(readHeaderLength(prefix(100_000_001), 8 + 100_000_001, { maxHeaderBytes: 100_000_001 }), 100_000_001);
    assert.throws(() => readHeaderLength(prefix(1000), 8 + 1000, { maxHeaderBytes: 999 }), { code: "HeaderTooLarge" });
  });

  test("a real 100,000,000-byte header parses", () => {
    const big = new Uint8Array(8 + 100_000_000).fill(0x20);
    new DataView(big.buffer).setBigUint64(0, 100_000_000n, true);
    big.set(encoder.encode(`{"t":${entry("U8", [0], 0, 0)}}`), 8);
    const header = parseHeaderFromBuffer(big);
    assert.equal(header.headerLength, 100_000_000);
    assert.equal(header.tensors.size, 1);
  });

  test("odd maxHeaderBytes values fail as SafetensorError or work, never another exception", () => {
    // Infinity ("no limit"), NaN and fractions are easy to pass by mistake.
    for (const maxHeaderBytes of [Number.POSITIVE_INFINITY, Number.NaN, 8.5, -1]) {
      try {
        parseHeaderFromBuffer(file("{}      "), { maxHeaderBytes });
      } catch (error) {
        assert.ok(isSafetensorError(error), `maxHeaderBytes ${maxHeaderBytes}: ${error}`);
      }
    }
  });
});

function run(c: Case): Header {
  return parseHeaderFromBuffer(c.bytes, c.options);
}

describe("header cases", () => {
  test("the suite reaches every format error code", () => {
    const formatCodes: readonly SafetensorErrorCode[] = HEADER_ERROR_CODES;
    const reached = new Set<string>();
    for (const c of cases) {
      try {
        run(c);
      } catch (error) {
        if (isSafetensorError(error)) reached.add(error.code);
      }
    }
    assert.deepEqual(
      formatCodes.filter((code) => !reached.has(code)),
      [],
    );
  });

  for (const c of cases) {
    test(c.name, () => {
      if (c.expect === "ok") {
        const header = run(c);
        c.check?.(header);
        return;
      }
      assert.throws(
        () => run(c),
        (error: unknown) => {
          assert.ok(isSafetensorError(error), `expected a SafetensorError, got ${error}`);
          assert.equal(error.code, c.expect, `code (message: ${error.message})`);
          if (c.tensor !== undefined) {
            assert.equal(error.tensor, c.tensor, `error.tensor (message: ${error.message})`);
            assert.ok(error.message.includes(quoteName(c.tensor)), `message names the tensor: ${error.message}`);
          }
          return true;
        },
      );
    });
  }
});

// Skipped test by test (not the whole suite), so that node's summary counts them as skipped.
const skip = skipWithoutReference();

describe("reference agrees on every case", () => {
  test("same ok/fail verdict (duplicates: we refuse, the reference keeps the last one)", { skip }, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-header-"));
    try {
      const selected = cases.filter((c) => !c.noReference);
      const files = selected.map((c, i) => {
        const p = path.join(dir, `case${i}.safetensors`);
        fs.writeFileSync(p, c.bytes);
        return p;
      });
      const verdicts = runReference<{ file: string; ok: boolean; error: string | null }[]>(
        referenceCheckScript,
        ["verdicts"],
        { files },
      );
      assert.equal(verdicts.length, selected.length);
      assert.ok(verdicts.some((v) => v.ok) && verdicts.some((v) => !v.ok));
      const disagreements: string[] = [];
      selected.forEach((c, i) => {
        const expected = c.referenceOk ?? c.expect === "ok";
        const verdict = verdicts[i]!;
        if (verdict.ok !== expected) {
          disagreements.push(
            `${c.name}: reference ${verdict.ok ? "accepts" : `rejects (${verdict.error})`}, expected ${expected ? "ok" : c.expect}`,
          );
        }
      });
      assert.deepEqual(disagreements, []);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
