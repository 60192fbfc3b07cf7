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
import { blockBytes, dequantize, QUANT_TYPES, quantize } from "../src/gguf/quants.js";
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
