/**
 * Edits and masks follow numpy (+ ml_dtypes) where it differs from torch: each case here is one that the
 * differential check (test/numpy-diffcheck.test.ts) found different before, with the bytes numpy 2.4 / ml_dtypes 0.6
 * gave for it. No reference needed.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { test } from "node:test";
import { fromFloat32 } from "../src/codecs/index.js";
import { encodeLikeNumpy, encodeScalarLikeNumpy } from "../src/codecs/numpy.js";
import { maskElements } from "../src/edit/mask-kernel.js";
import { openFile, saveFile, Tensor } from "../src/node.js";
import { cli } from "./helpers/run-cli.js";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const f32 = (...bits: number[]) => new Float32Array(new Uint32Array(bits).buffer);

test("float32 values encoded as numpy / ml_dtypes cast them (astype), not as torch", () => {
  // numpy keeps a float32 NaN's payload bits in F16 (a signaling NaN stays signaling); torch quiets it.
  assert.equal(hex(encodeLikeNumpy("F16", f32(0xff815466))), "0afc");
  assert.equal(hex(fromFloat32("F16", f32(0xff815466))), "0afe");
  // ml_dtypes: every BF16 NaN is 0x7FC0 with its sign (torch: 0xFFFF).
  assert.equal(hex(encodeLikeNumpy("BF16", f32(0x7ff92c0b, 0xff815466))), "c07fc0ff");
  // E4M3FN: overflow and infinities are NaN in ml_dtypes (torch saturates to 448); 464 is the tie that stays 448.
  assert.equal(
    hex(encodeLikeNumpy("F8_E4M3", new Float32Array([2315.87, -480, 464, Infinity, -Infinity]))),
    "7fff7e7fff",
  );
  assert.equal(hex(fromFloat32("F8_E4M3", new Float32Array([2315.87]))), "7e");
  // E5M2: NaN is 0x7E with its sign (torch 0x7F).
  assert.equal(hex(encodeLikeNumpy("F8_E5M2", f32(0x7fc00000, 0xffc00000))), "7efe");
  // E8M0 is unsigned: negatives, -0 and +0 are NaN (torch drops the sign; 0 gives 0x00).
  assert.equal(hex(encodeLikeNumpy("F8_E8M0", new Float32Array([-6.8e15, -0, 0, 1.5, 2 ** -128]))), "ffffff8000");
  // The FNUZ formats already agree.
  assert.equal(hex(encodeLikeNumpy("F8_E4M3FNUZ", new Float32Array([1e6, Number.NaN, -0]))), "808000");
});

test("a number is converted from the double as numpy converts a Python float", () => {
  // F64: exactly (was rounded to float32 first: 0.1 became 0.10000000149011612).
  assert.equal(hex(encodeScalarLikeNumpy("F64", 0.1)), "9a9999999999b93f");
  assert.equal(hex(encodeLikeNumpy("F64", [0.11311999097198772])), "dc9dbf856ef5bc3f");
  // F16: rounded once (through float32 it was rounded twice: 1 + 2^-11 + 2^-40 became 1.0).
  assert.equal(hex(encodeScalarLikeNumpy("F16", 1 + 2 ** -11 + 2 ** -40)), "013c");
  assert.equal(hex(encodeScalarLikeNumpy("F16", -1.0004882812509095)), "01bc");
  // BF16: ml_dtypes goes through float32 itself (double rounding is numpy's answer).
  assert.equal(hex(encodeScalarLikeNumpy("BF16", 1 + 2 ** -8 + 2 ** -40)), "803f");
  // F8 from a Python float: once from the double; from a float64 array: through float32 (numpy's two casts).
  assert.equal(hex(encodeScalarLikeNumpy("F8_E4M3", 1.0625000000009095)), "39");
  assert.equal(hex(encodeLikeNumpy("F8_E4M3", [1.0625000000009095])), "38");
  assert.equal(hex(encodeScalarLikeNumpy("F8_E5M2", -36.00000083513119)), "d1");
  assert.equal(hex(encodeScalarLikeNumpy("F8_E8M0", 5e-324)), "00");
  assert.equal(hex(encodeLikeNumpy("F8_E8M0", [5e-324])), "ff");
  assert.equal(hex(encodeScalarLikeNumpy("F16", 1e300, 2)), "007c007c");
  // A float64 array's NaN keeps its sign (read from its bits: V8 may drop it from a number).
  const negativeNan = new Float64Array(new Uint32Array([0, 0xfff80000, 0, 0x7ff80000]).buffer);
  assert.equal(hex(encodeLikeNumpy("F32", negativeNan)), "0000c0ff0000c07f");
  assert.equal(hex(encodeLikeNumpy("BF16", negativeNan)), "c0ffc07f");
  assert.equal(hex(encodeLikeNumpy("F8_E5M2", negativeNan)), "fe7e");
});

test("masks multiply as numpy does: kept NaNs come out of the product as its arithmetic makes them", () => {
  const run = (dtype: Parameters<typeof maskElements>[0], bytes: number[], keep: number[], width: 1 | 2 | 4) => {
    const array = width === 1 ? new Uint8Array(bytes) : width === 2 ? new Uint16Array(bytes) : new Uint32Array(bytes);
    const masked = maskElements(dtype, new Uint8Array(array.buffer), new Uint8Array(keep), "multiply");
    return { masked, out: [...array].map((x) => x.toString(16)) };
  };
  // BF16 (ml_dtypes computes in float32): a NaN becomes 0x7FC0 with its sign, kept or masked.
  assert.deepEqual(run("BF16", [0x7feb, 0xffff, 0x3f80], [1, 0, 1], 2), { masked: 1, out: ["7fc0", "ffc0", "3f80"] });
  // F16 and F32: x86 quiets a signaling NaN, payload kept.
  assert.deepEqual(run("F16", [0x7c01, 0xfc02], [1, 0], 2).out, ["7e01", "fe02"]);
  assert.deepEqual(run("F32", [0x7f800001, 0x3f800000], [1, 1], 4), { masked: 0, out: ["7fc00001", "3f800000"] });
  // E5M2: 0x7D / 0x7F are NaNs that come back as 0x7E.
  assert.deepEqual(run("F8_E5M2", [0x7d, 0xff, 0x7c], [1, 1, 1], 1).out, ["7e", "fe", "7c"]);
  // C64 (a + bi)(1 + 0i) = (a - b·0) + (a·0 + b)i: a kept (-0, -1) becomes (+0, -1); a NaN part spreads.
  const c64 = new Uint32Array([0x80000000, 0xbf800000, 0xffc00000, 0x7f800000, 0x7fc00000, 0x3c13b1aa]);
  maskElements("C64", new Uint8Array(c64.buffer), new Uint8Array([1, 1, 0]), "multiply");
  assert.deepEqual(
    [...c64].map((x) => x.toString(16)),
    ["0", "bf800000", "ffc00000", "ffc00000", "7fc00000", "7fc00000"],
  );
});

test("edit --fill reads what Python's float() and int() read, and checks it even for an empty slice", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-numpy-rules-"));
  try {
    const file = path.join(dir, "w.safetensors");
    saveFile(file, {
      f: new Tensor("BF16", [4], new Uint8Array(8)),
      u: new Tensor("U64", [2], new Uint8Array(16)),
      i: new Tensor("I64", [2], new Uint8Array(16)),
      b: new Tensor("U8", [3], new Uint8Array(3)),
      d: new Tensor("F64", [1], new Uint8Array(8)),
    });
    const edit = (...args: string[]) => cli("edit", file, ...args, "--no-fsync", "--verify", "none");
    const bytes = (name: string) => {
      using reader = openFile(file, { backend: "pread" });
      return hex(reader.getTensor(name, { memory: "owned" }).data);
    };
    assert.equal((await edit("f", "--slice", ":2", "--fill", "-inf")).code, 0);
    assert.equal((await edit("f", "--slice", "2:", "--fill", "Infinity")).code, 0);
    assert.equal(bytes("f"), "80ff80ff807f807f");
    assert.equal((await edit("u", "--slice", "0", "--fill", "18446744073709551615")).code, 0);
    assert.equal((await edit("i", "--slice", "1", "--fill", "-9223372036854775808")).code, 0);
    assert.equal(bytes("u") + bytes("i"), `${"ff".repeat(8)}${"00".repeat(8)}${"00".repeat(8)}${"00".repeat(7)}80`);
    assert.equal((await edit("d", "--slice", ":", "--fill", "0.1")).code, 0);
    assert.equal(bytes("d"), "9a9999999999b93f");
    // Python's float("-nan") has its sign bit set, and numpy writes it so.
    assert.equal((await edit("f", "--slice", "1:3", "--fill", "-nan")).code, 0);
    assert.equal(bytes("f"), "80ffc0ffc0ff807f");
    assert.equal((await edit("d", "--slice", ":", "--fill", "-NaN")).code, 0);
    assert.equal(bytes("d"), "000000000000f8ff");
    // numpy refuses `w[2:2] = 300` for uint8 too; a refused fill writes nothing.
    const before = fs.readFileSync(file);
    for (const [slice, value] of [
      ["2:2", "300"],
      ["1:0", "-1"],
      [":0", "2.5"],
    ] as const) {
      const out = await edit("b", "--slice", slice, "--fill", value);
      assert.equal(out.code, 1, `${slice} ${value}: ${out.stderr}`);
      assert.match(out.stderr, /InvalidTensor/);
    }
    assert.equal((await edit("b", "--slice", ":", "--fill", "0x10")).code, 2); // Python's float() refuses it too
    assert.deepEqual(fs.readFileSync(file), before);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("diff's largest difference of complex values is numpy's abs(a - b) to the last bit", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-numpy-rules-"));
  try {
    const a = path.join(dir, "a.safetensors");
    const b = path.join(dir, "b.safetensors");
    saveFile(a, { c: new Tensor("C64", [1], new Uint8Array(8)) });
    const value = new Float32Array([3465.380615234375, -2562.3251953125]);
    saveFile(b, { c: new Tensor("C64", [1], new Uint8Array(value.buffer)) });
    const out = await cli("diff", a, b, "--json");
    assert.equal(out.code, 1);
    const [tensor] = (JSON.parse(out.stdout) as { tensors: { max_abs_diff: number }[] }).tensors;
    // numpy: larger · sqrt(fma(ratio, ratio, 1)); Math.hypot gives 4309.799672255708.
    assert.equal(tensor!.max_abs_diff, 4309.799672255709);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
