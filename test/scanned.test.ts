/**
 * The native header scanner (native/header_scan.c + src/format/scanned.ts) must never decide anything the full
 * reader would decide differently: whenever it gives a header, that header equals the full reader's; for anything
 * the full reader rejects, it gives null.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import fc from "fast-check";
import { DTYPES } from "../src/format/dtypes.js";
import { type Header, parseHeader } from "../src/format/header.js";
import { headerFromScan } from "../src/format/scanned.js";
import {
  DTYPE_BITS,
  DTYPE_NAMES,
  loadNative,
  NATIVE_SCAN_MAX_HEADER_BYTES,
  nativeHeaderScanner,
} from "../src/io/native.js";
import { corpusAvailable, corpusDir, corpusMissingReason, expectedFiles } from "./helpers/corpus.js";

const scan = nativeHeaderScanner();
const encoder = new TextEncoder();

function full(bytes: Uint8Array, fileLength: number): Header | string {
  try {
    return parseHeader(bytes, fileLength);
  } catch (error) {
    return (error as { code?: string }).code ?? "not a SafetensorError";
  }
}

const addon = loadNative();
const scanChecked = addon?.scanChecked;

/**
 * The addon's checked scan (what loadFile's one-call path runs) as [name, dtype, shape, data offsets] per tensor, or
 * null where it refuses; also checks that tensors of one shape share its entry.
 */
function checkedTensors(bytes: Uint8Array, fileLength: number): [string, string, number[], number[]][] | null {
  let out = new Float64Array(16);
  let got = scanChecked!(bytes, fileLength, out, DTYPE_NAMES, DTYPE_BITS);
  if (got === -2) {
    out = new Float64Array(bytes.length * 2 + 64);
    got = scanChecked!(bytes, fileLength, out, DTYPE_NAMES, DTYPE_BITS);
  }
  if (got === -1) return null;
  assert.ok(got > 0, `scanChecked answered ${got}`);
  const count = out[0]!;
  const shapes: number[][] = [];
  for (let s = 0, at = 2 + count * 6; s < out[1]!; s++) {
    const ndim = out[at++]!;
    shapes.push([...out.subarray(at, at + ndim)]);
    at += ndim;
  }
  assert.equal(new Set(shapes.map((shape) => shape.join())).size, Math.min(shapes.length, 32), "distinct shapes");
  const text = new TextDecoder().decode(bytes);
  return Array.from({ length: count }, (_, i) => {
    const t = out.subarray(2 + i * 6, 8 + i * 6);
    return [text.slice(t[0], t[1]), DTYPES[t[2]!]!, shapes[t[3]!]!, [t[4]!, t[4]! + t[5]!]];
  });
}

/** The scanner's header, or null; asserts agreement with the full reader, and the checked scan's with both. */
function agree(bytes: Uint8Array, fileLength: number): Header | null {
  const records = scan!(bytes);
  const scanned = records && headerFromScan(records, bytes, fileLength);
  if (scanChecked) {
    const expected = scanned && [...scanned.tensors.values()].map((t) => [t.name, t.dtype, t.shape, t.dataOffsets]);
    assert.deepStrictEqual(checkedTensors(bytes, fileLength), expected, new TextDecoder().decode(bytes));
  }
  if (scanned === null) return null;
  const expected = full(bytes, fileLength);
  const text = new TextDecoder().decode(bytes);
  assert.equal(typeof expected, "object", `${text}: the full reader says ${String(expected)}`);
  const { tensors, ...rest } = scanned;
  const { tensors: expectedTensors, ...expectedRest } = expected as Header;
  assert.deepStrictEqual(rest, expectedRest, text);
  // The scanner's tensors are a compact map: the same entries, in the same order, as the full reader's Map.
  assert.deepStrictEqual([...tensors], [...expectedTensors], text);
  assert.equal(tensors.size, expectedTensors.size);
  for (const name of expectedTensors.keys()) assert.deepStrictEqual(tensors.get(name), expectedTensors.get(name));
  assert.equal(tensors.get("\u0000 no such tensor"), undefined);
  return scanned;
}

describe("native header scanner", { skip: scan ? false : "native addon not built (no scanner)" }, () => {
  test("agrees on real headers, and takes most of them", {
    skip: corpusAvailable ? false : corpusMissingReason,
  }, () => {
    let taken = 0;
    for (const { file } of expectedFiles()) {
      const bytes = fs.readFileSync(path.join(corpusDir, file));
      if (bytes.length < 8) continue;
      const n = Number(bytes.readBigUInt64LE(0));
      if (8 + n > bytes.length) continue;
      if (agree(new Uint8Array(bytes.subarray(8, 8 + n)), bytes.length) !== null) taken++;
    }
    assert.ok(taken >= 20, `scanner took only ${taken} corpus headers`);
  });

  const entry = (begin: number, end: number, shape = `[${(end - begin) / 4}]`) =>
    `{"dtype":"F32","shape":${shape},"data_offsets":[${begin},${end}]}`;
  const check = (text: string, dataLength: number, expectTaken: boolean) => {
    const bytes = encoder.encode(text);
    const taken = agree(bytes, 8 + bytes.length + dataLength) !== null;
    assert.equal(taken, expectTaken, text);
  };

  test("takes the ordinary forms", () => {
    check(`{"a":${entry(0, 4)}}`, 4, true);
    check(`{}`, 0, true);
    check(`  { "__metadata__" : { "format" : "pt" } , "a" : ${entry(0, 4)} }    `, 4, true);
    check(`{"__metadata__":null,"a":${entry(0, 4)}}`, 4, true);
    check(`{"__metadata__":{},"a":${entry(0, 4)}}`, 4, true);
    check(`{"a":{"data_offsets":[0,4],"shape":[1],"dtype":"F32"},"b":${entry(4, 12)}}`, 12, true);
    check(
      `{"s":{"dtype":"BOOL","shape":[],"data_offsets":[0,1]},"e":{"dtype":"F16","shape":[0,3],"data_offsets":[1,1]}}`,
      1,
      true,
    );
    check(`{"__proto__":${entry(0, 4)},"constructor":${entry(4, 8)}}`, 8, true);
    check(`{"1":${entry(4, 8)},"0":${entry(0, 4)}}`, 8, false); // not in file order: the full reader sorts
    check(`{"a":{ "dtype" :"F32",\n"shape": [ 1 ] ,"data_offsets":[0 , 4] } }`, 4, true);
    check(`{"dtype":${entry(0, 4)},"shape":${entry(4, 8)},"data_offsets":${entry(8, 12)}}`, 12, true);
  });

  test("a repeated name is the full reader's, wherever it comes (the scanner's name table)", () => {
    for (const count of [3, 40, 2000]) {
      const members = Array.from({ length: count }, (_, i) => `"layer.${i}.w":${entry(i * 4, i * 4 + 4)}`);
      check(`{${members.join(",")}}`, count * 4, true);
      for (const at of [1, count - 1]) {
        const repeated = [...members];
        repeated[at] = `"layer.0.w":${entry(at * 4, at * 4 + 4)}`;
        check(`{${repeated.join(",")}}`, count * 4, false);
      }
    }
  });

  test("leaves everything else to the full reader", () => {
    const e = entry(0, 4);
    for (const [text, dataLength] of [
      [`{"a":${e},"a":${e}}`, 4],
      [`{"__metadata__":{"k":"1","k":"2"},"a":${e}}`, 4],
      [`{"__metadata__":null,"__metadata__":null}`, 0],
      [`{"__metadata__":{"k":1}}`, 0],
      [`{"__metadata__":{"k":"a\\"b"}}`, 0],
      [`{"a\\n":${e}}`, 4],
      [`{"é":${e}}`, 4],
      [`{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shape":[01],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}`, 0],
      [`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4],
      [`{"a":{"dtypes":"F32","shape":[1],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shape":[1],"data_offsets2":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shap":[1],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shape":[1],"shape":[1],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 4],
      [`{"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}`, 4],
      [`{"a":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}`, 4],
      [`{"a":["F32",[1],[0,4]]}`, 4],
      [`{"a":{"dtype":"F32","shape":[1000000000000000],"data_offsets":[0,4]}}`, 4],
      [`{"a":${entry(0, 8, "[1]")}}`, 8],
      [`{"a":${entry(4, 8)}}`, 8],
      [`{"a":${e}}`, 5],
      [`{"a":${e}} x`, 4],
      [`{"a":${e},}`, 4],
      [`[]`, 0],
      [`{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, 2],
      // An empty tensor whose partial product overflows u64: the reference's ValidationOverflow.
      [`{"a":{"dtype":"F16","shape":[999999999999999,999999999999999,0],"data_offsets":[0,0]}}`, 0],
    ] as const) {
      check(text, dataLength, false);
    }
  });

  test("headers over the scanner's limit go to the full reader", () => {
    const members = Array.from({ length: 30000 }, (_, i) => `"tensor.${i}":${entry(i * 4, i * 4 + 4)}`);
    const bytes = encoder.encode(`{${members.join(",")}}`);
    assert.ok(bytes.length > NATIVE_SCAN_MAX_HEADER_BYTES);
    assert.equal(scan!(bytes), null);
  });

  test("the reused record buffer grows for large headers", () => {
    const members = Array.from({ length: 5000 }, (_, i) => `"t${i}":${entry(i * 4, i * 4 + 4)}`);
    check(`{${members.join(",")}}`, 5000 * 4, true);
  });

  const ws = fc.constantFrom("", " ", "\n", "\t ", "\r\n");
  const name = fc.oneof(
    fc.string({ unit: fc.constantFrom("a", "b", ".", "_", "0", "é", "\\", '"', "\n") }),
    fc.constantFrom("__proto__", "__metadata__", "7", "a", ""),
  );
  const dtype = fc.constantFrom("F32", "U8", "BF16", "F4", "F6_E2M3", "BOOL", "I64", "f32", "X");
  const bits: Record<string, number> = { F32: 32, U8: 8, BF16: 16, F4: 4, F6_E2M3: 6, BOOL: 8, I64: 64 };
  const tensor = fc.record({
    name,
    dtype,
    shape: fc.array(fc.nat(5), { maxLength: 3 }),
    skew: fc.constantFrom(0, 0, 0, 0, 1, -1),
    order: fc.constantFrom("dso", "osd", "sdo"),
  });
  const headerCase = fc.record({
    tensors: fc.array(tensor, { maxLength: 6 }),
    metadata: fc.option(fc.array(fc.tuple(name, name), { maxLength: 3 })),
    swap: fc.boolean(),
    ws,
    trailing: fc.constantFrom(0, 0, 0, 1, -1),
  });

  test("lookups by name in any order, repeated, and missing ones; dimensions past 2^30 kept exactly", () => {
    const dims = [[3, 2 ** 30 + 7], [2 ** 31], [0, 5], [1, 1, 1, 1, 1, 2]];
    let offset = 0;
    const members = dims.map((shape, i) => {
      const size = shape.reduce((a, b) => a * b, 1);
      const member = `"t${i}":{"dtype":"U8","shape":[${shape.join(",")}],"data_offsets":[${offset},${offset + size}]}`;
      offset += size;
      return member;
    });
    const bytes = encoder.encode(`{${members.join(",")}}`);
    const scanned = agree(bytes, 8 + bytes.length + offset);
    assert.ok(scanned, "the scanner takes this header");
    const expected = full(bytes, 8 + bytes.length + offset) as Header;
    for (const order of [
      [3, 1, 0, 2],
      [2, 2, 3, 0, 0, 1],
      [0, 1, 2, 3],
    ]) {
      const { tensors } = headerFromScan(scan!(bytes)!, bytes, 8 + bytes.length + offset)!;
      for (const i of order) {
        assert.equal(tensors.has(`t${i}`), true);
        assert.deepStrictEqual(tensors.get(`t${i}`), expected.tensors.get(`t${i}`));
        assert.equal(tensors.get(`t${i}x`), undefined);
        assert.equal(tensors.has(`t${i + 4}`), false);
      }
    }
    assert.deepStrictEqual(scanned.tensors.get("t1")!.shape, [2 ** 31]);
    assert.ok(Object.isFrozen(scanned.tensors.get("t0")!.shape));
  });

  test("agrees with the full reader on generated headers", () => {
    let taken = 0;
    fc.assert(
      fc.property(headerCase, ({ tensors, metadata, swap, ws, trailing }) => {
        let offset = 0;
        const members: string[] = [];
        if (metadata) {
          const items = metadata.map(([k, v]) => `${JSON.stringify(k)}${ws}:${JSON.stringify(v)}`);
          members.push(`"__metadata__":${ws}{${items.join(`,${ws}`)}}`);
        }
        for (const t of tensors) {
          const count = t.shape.reduce((a, b) => a * b, 1);
          const size = Math.max(0, Math.ceil((count * (bits[t.dtype] ?? 8)) / 8) + t.skew);
          const fields: Record<string, string> = {
            d: `"dtype":${ws}"${t.dtype}"`,
            s: `"shape":[${t.shape.join(`,${ws}`)}]`,
            o: `"data_offsets":[${offset},${ws}${offset + size}]`,
          };
          offset += size;
          members.push(`${JSON.stringify(t.name)}${ws}:${ws}{${[...t.order].map((k) => fields[k]).join(",")}}`);
        }
        if (swap && members.length > 1) members.reverse();
        const bytes = encoder.encode(`${ws}{${ws}${members.join(`,${ws}`)}${ws}}${ws}`);
        if (agree(bytes, 8 + bytes.length + offset + trailing) !== null) taken++;
      }),
      { seed: 20261201, numRuns: 4000 },
    );
    assert.ok(taken > 200, `scanner took only ${taken} generated headers`);
  });
});
