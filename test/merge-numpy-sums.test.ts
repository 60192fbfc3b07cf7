/**
 * The float32 reductions of mergekit's SLERP replayed in numpy's order (src/merge/numpy-sums.ts) against numpy's
 * own results (test/fixtures/merge/numpy-sums.json, made by scripts/gen_numpy_sums.py on an AVX2 x86-64 machine):
 * `np.linalg.norm` through OpenBLAS's sdot and `np.sum`'s pairwise summation, bit for bit, over lengths around the
 * kernels' block sizes (32 lanes, blocks of 8 and 128) up to a million entries; and the fused multiply-add's rounding
 * where a double's rounding would make a tie.
 */
import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import fc from "fast-check";
import { fromFloat32, toFloat32 } from "../src/codecs/index.js";
import { blasNorm, fmaf32, pairwiseSum } from "../src/merge/numpy-sums.js";
import { repoRoot } from "./helpers/corpus.js";

const fixture = JSON.parse(fs.readFileSync(path.join(repoRoot, "test/fixtures/merge/numpy-sums.json"), "utf8")) as {
  cases: { n: number; k: number; shift: number; norm: number; sum: number }[];
};

/** The script's formula: x_i = (b_i - 2^23) / 2^(23 + shift), every step exact in a double. */
function values(n: number, k: number, shift: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const a = (i * 40503 + k) % 65521;
    const b = (a * a * 31 + i) % 16777216;
    out[i] = (b - 8388608) / 2 ** (23 + shift);
  }
  return out;
}

function bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0]!;
}

test("blasNorm gives numpy's np.linalg.norm of float32 arrays bit for bit", () => {
  let unlikeDouble = 0;
  for (const { n, k, shift, norm } of fixture.cases) {
    const x = values(n, k, shift);
    assert.equal(bits(blasNorm(x)), norm, `n ${n}, k ${k}, shift ${shift}`);
    let sum = 0;
    for (const v of x) sum += v * v;
    if (bits(Math.sqrt(sum)) !== norm) unlikeDouble++;
  }
  // The replay is needed: summed in a double, the norms of the longer arrays come out otherwise.
  assert.ok(unlikeDouble >= 10, `only ${unlikeDouble} norms differ from the double sum's`);
});

test("pairwiseSum gives numpy's np.sum of float32 arrays bit for bit", () => {
  let unlikeDouble = 0;
  for (const { n, k, shift, sum } of fixture.cases) {
    const x = values(n, k, shift);
    const y = values(n, k + 1000, shift);
    const products = new Float32Array(n);
    for (let i = 0; i < n; i++) products[i] = x[i]! * y[i]!;
    assert.equal(bits(pairwiseSum(products)), sum, `n ${n}, k ${k}, shift ${shift}`);
    let double = 0;
    for (const v of products) double += v;
    if (bits(double) !== sum) unlikeDouble++;
  }
  assert.ok(unlikeDouble >= 10, `only ${unlikeDouble} sums differ from the double sum's`);
});

test("fmaf32 rounds x * y + acc once, where the double sum lands on a float32 tie", () => {
  // (1 + 2^-15)(1 - 2^-15) = 1 - 2^-30; plus 2^24 + 2 that is 2^24 + 3 - 2^-30, which a double rounds to the tie
  // 2^24 + 3 and float32's ties-to-even then to 2^24 + 4. Rounded once: 2^24 + 2.
  assert.equal(Math.fround(2 ** 24 + 2 + (1 + 2 ** -15) * (1 - 2 ** -15)), 2 ** 24 + 4);
  assert.equal(fmaf32(1 + 2 ** -15, 1 - 2 ** -15, 2 ** 24 + 2), 2 ** 24 + 2);
  // Above the tie: (1 + 2^-15)^2 = 1 + 2^-14 + 2^-30, no tie in the double: 2^24 + 4 either way.
  assert.equal(fmaf32(1 + 2 ** -15, 1 + 2 ** -15, 2 ** 24 + 2), 2 ** 24 + 4);
  // The other side: 2^24 + 1 - 2^-30 rounds to the tie 2^24 + 1, whose even neighbour 2^24 is also right.
  assert.equal(fmaf32(1 + 2 ** -15, 1 - 2 ** -15, 2 ** 24), 2 ** 24);
  // A tie below: -(2^24 + 2) - (1 - 2^-30) is -(2^24 + 3) + 2^-30: rounded once, -(2^24 + 2).
  assert.equal(fmaf32(-(1 + 2 ** -15), 1 - 2 ** -15, -(2 ** 24 + 2)), -(2 ** 24 + 2));
  // Exact sums and ordinary roundings are fround's.
  assert.equal(fmaf32(3, 5, 7), 22);
  assert.equal(fmaf32(0.1, 0.1, 1), Math.fround(0.1 * 0.1 + 1));
});

test("blasNorm's short-values path gives the fused path's bits for float16 and bfloat16 values", () => {
  // Values of at most 12 significant bits over magnitudes 2^-40..2^40, so that squares land far below and far above
  // the accumulators; and the fixture's arrays rounded to float16 and bfloat16.
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.integer({ min: -4095, max: 4095 }), fc.integer({ min: -52, max: 28 })), { maxLength: 700 }),
      (pairs) => {
        const values = Float32Array.from(pairs, ([m, e]) => m * 2 ** e);
        assert.equal(bits(blasNorm(values, true)), bits(blasNorm(values)));
      },
    ),
    { numRuns: 300 },
  );
  for (const { n, k, shift } of fixture.cases.filter((c) => c.n <= 70000)) {
    for (const dtype of ["F16", "BF16"] as const) {
      const rounded = toFloat32(dtype, fromFloat32(dtype, values(n, k, shift)), { count: n });
      assert.equal(bits(blasNorm(rounded, true)), bits(blasNorm(rounded)), `${dtype} n ${n}`);
    }
  }
});
