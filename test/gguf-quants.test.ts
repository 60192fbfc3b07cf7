/**
 * The block quantizers against gguf-py's (`gguf.quants.quantize` / `dequantize`, from scripts/gen_gguf_fixtures.py):
 * bit-exact blocks for edge cases (zeros, ties, negative maxima, tiny and huge values, subnormal scales) and 200
 * random blocks over ten decades, and the same dequantized values.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { decodeF16 } from "../src/codecs/half.js";
import { nativeQ8Kernel } from "../src/gguf/node-q8-native.js";
import { wasmQ8Kernel } from "../src/gguf/q8-kernel.js";
import { blockBytes, dequantize, QUANT_TYPES, quantize, quantizeQ8_0FromF16 } from "../src/gguf/quants.js";
import { repoRoot } from "./helpers/corpus.js";

const fixture = JSON.parse(fs.readFileSync(path.join(repoRoot, "test/fixtures/gguf/quants.json"), "utf8")) as {
  values: number[];
  blocks: Record<string, string>;
  dequantized: Record<string, string>;
};
const values = new Float32Array(new Uint32Array(fixture.values).buffer);

for (const type of QUANT_TYPES) {
  const key = type.toLowerCase();
  test(`${type}: blocks and dequantized values equal gguf-py's`, () => {
    const out = new Uint8Array((values.length / 32) * blockBytes(type));
    quantize(type, values, out);
    assert.equal(Buffer.from(out).toString("hex"), fixture.blocks[key]);
    const back = new Float32Array(values.length);
    dequantize(type, out, back);
    const digest = createHash("sha256").update(new Uint8Array(back.buffer)).digest("hex");
    assert.equal(digest, fixture.dequantized[key]);
  });
}

test("quantize refuses a partial block and a short output", () => {
  assert.throws(() => quantize("Q8_0", new Float32Array(31), new Uint8Array(34)), RangeError);
  assert.throws(() => quantize("Q4_0", new Float32Array(64), new Uint8Array(18)), RangeError);
});

/** Every F16 code, then random ones, without NaN and infinity (they make a whole block's scale NaN/inf, where numpy's
 * int8 cast is undefined), and blocks of subnormal values (subnormal and zero scales). */
function f16Codes(): Uint16Array {
  const n = 65536 * 3;
  const codes = new Uint16Array(n);
  for (let i = 0; i < 65536; i++) codes[i] = i;
  let seed = 1;
  for (let i = 65536; i < n; i++) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    codes[i] = seed >>> 16;
  }
  for (let i = 0; i < n; i++) if ((codes[i]! & 0x7c00) === 0x7c00) codes[i] = codes[i]! & 0xbbff;
  for (let b = 0; b < 64; b++)
    for (let i = 0; i < 32; i++) codes[b * 32 + i] = ((b * 7 + i) & 0x3ff) | (i & 1 ? 0x8000 : 0);
  return codes;
}

test("the WebAssembly SIMD Q8_0 kernel gives the JavaScript kernel's bytes, for every F16 code", (t) => {
  const simd = wasmQ8Kernel();
  if (simd === null) {
    t.skip("this engine has no WebAssembly SIMD");
    return;
  }
  const codes = f16Codes();
  const n = codes.length;
  const js = new Uint8Array((n / 32) * 34);
  const wasm = new Uint8Array((n / 32) * 34);
  quantizeQ8_0FromF16(codes, js);
  simd(new Uint8Array(codes.buffer), n, wasm);
  assert.equal(Buffer.compare(Buffer.from(js), Buffer.from(wasm)), 0);
  const values = new Float32Array(n);
  decodeF16(new Uint8Array(codes.buffer), n, values);
  const direct = new Uint8Array((n / 32) * 34);
  quantize("Q8_0", values, direct);
  assert.equal(Buffer.compare(Buffer.from(js), Buffer.from(direct)), 0);
});

test("the native Q8_0 kernel gives the JavaScript kernel's bytes, for every F16 code, at any alignment", (t) => {
  const native = nativeQ8Kernel();
  if (native === null) {
    t.skip("the copy addon (build/Release/safetensors_copy.node, with q8FromF16) is not built: npm install builds it");
    return;
  }
  const codes = f16Codes();
  const n = codes.length;
  const js = new Uint8Array((n / 32) * 34);
  quantizeQ8_0FromF16(codes, js);
  for (const shift of [0, 1]) {
    const src = new Uint8Array(n * 2 + shift);
    src.set(new Uint8Array(codes.buffer), shift);
    const out = new Uint8Array((n / 32) * 34);
    native(src.subarray(shift), n, out);
    assert.equal(Buffer.compare(Buffer.from(js), Buffer.from(out)), 0, `offset ${shift}`);
  }
});
