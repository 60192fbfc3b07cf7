/**
 * The two float32 reductions of mergekit's SLERP, replayed in numpy's order so that our angle is mergekit's:
 * `np.linalg.norm` (the square root of BLAS's sdot of the values with themselves) and `np.sum` (numpy's pairwise
 * summation). A float32 sum's rounding depends on its order, and a SLERP's output moves with its angle
 * (2026-12-03, this host, numpy 2.4.6):
 * - numpy's norms of the bench models' tensors are far from the norm summed in a double: ~4,100 units of float32 for
 *   the 45 M-entry MLP weights, ~16,600 for the 131 M-entry embedding. A SLERP with double-summed norms was 2,300 and
 *   10,800 units (at the tensor's largest magnitude) from mergekit's on them; with these replays the norms are
 *   numpy's bits. On a tiny Llama's down_proj, one unit of one norm moved the output by 3 units
 *   (`scripts/merge_acceptance.py --seed 1203`).
 * - The cost: a SLERP of the bench's two 2.37 GiB float16 models takes 38-39 s of CPU instead of 30 (by hand, twice
 *   each, alone). With fmaf32's tie check on every step it took 45 s; float16 and bfloat16 values need none
 *   (`blasNorm`'s `shortValues`), float32 ones do: without it, a tie that a double's rounding makes would be rounded
 *   the wrong way about once in 2^30 steps.
 * Pure.
 */

const fround = Math.fround;

/**
 * `fround(x * y + acc)` rounded once, as a fused multiply-add does, for float32 `x`, `y` and `acc`. The product is
 * exact in a double; the double sum rounds, and when that rounding lands exactly halfway between two float32 values,
 * the float32 rounding's tie could go the wrong way: the sum's lost part (Knuth's two-sum) says which side is right.
 */
export function fmaf32(x: number, y: number, acc: number): number {
  const p = x * y;
  const s = acc + p;
  const r = fround(s);
  if (r !== s) {
    // `2s - r` is exact (Sterbenz) and a float32 only when s is the midpoint between r and that neighbour.
    const other = 2 * s - r;
    if (fround(other) === other) {
      const bb = s - acc;
      const lost = acc - (s - bb) + (p - bb);
      if (lost > 0) return Math.max(r, other);
      if (lost < 0) return Math.min(r, other);
    }
  }
  return r;
}

/**
 * `np.linalg.norm(values)` for float32 values on x86-64: `sqrt(x.dot(x))`, where numpy's wheels' OpenBLAS runs its
 * AVX2 sdot kernel (Haswell and Zen; mergekit's reference runs here picked it). That kernel takes 32 entries at a
 * time into four 8-lane float32 accumulators with fused multiply-adds, folds the lanes (high half onto low half,
 * accumulators 0+1 and 2+3, then both, then two horizontal adds), and adds the last `n % 32` squares, each rounded
 * to float32, in a double. Other kernels (AVX-512, Arm) order the sum otherwise, so mergekit's own norms, and its
 * SLERP's output, change from machine to machine; this replay gives its bits where it picks this kernel. numpy's
 * wheels link a 64-bit-index OpenBLAS, so its `NPY_CBLAS_CHUNK` is the largest index and one call takes the whole
 * array (a 32-bit-index build would split it every 2^30 entries; not replayed).
 *
 * `shortValues`: every value has at most 12 significant bits (float16 and bfloat16 values). Then a square has at
 * most 24 and is a float32; where the double sum of a square and an accumulator is inexact, the smaller is under
 * 2^-28 of the larger, so the sum is nowhere near a float32 tie and rounding it to float32 is the fused rounding:
 * the tie check is skipped.
 */
export function blasNorm(values: Float32Array, shortValues = false): number {
  return fround(Math.sqrt(sdotSelf(values, 0, values.length, shortValues)));
}

function sdotSelf(x: Float32Array, from: number, to: number, shortValues: boolean): number {
  const whole = from + ((to - from) & ~31);
  let dot = 0;
  if (whole > from) {
    const lanes = new Float64Array(32);
    if (shortValues) {
      for (let i = from; i < whole; i += 32) {
        for (let l = 0; l < 32; l++) {
          const v = x[i + l]!;
          lanes[l] = fround(lanes[l]! + v * v);
        }
      }
    } else {
      for (let i = from; i < whole; i += 32) {
        for (let l = 0; l < 32; l++) {
          const v = x[i + l]!;
          lanes[l] = fmaf32(v, v, lanes[l]!);
        }
      }
    }
    const folded = new Float64Array(4);
    for (let j = 0; j < 4; j++) {
      const h = (k: number) => fround(lanes[8 * k + j]! + lanes[8 * k + j + 4]!);
      folded[j] = fround(fround(h(0) + h(1)) + fround(h(2) + h(3)));
    }
    dot = fround(fround(folded[0]! + folded[1]!) + fround(folded[2]! + folded[3]!));
  }
  for (let i = whole; i < to; i++) dot += fround(x[i]! * x[i]!);
  return fround(dot);
}

/**
 * `np.sum` of float32 values: numpy's pairwise summation (blocks of at most 128 entries summed in eight float32
 * accumulators, halves added recursively), from an identity of 0.
 */
export function pairwiseSum(values: Float32Array): number {
  return fround(0 + pairwise(values, 0, values.length));
}

function pairwise(a: Float32Array, from: number, n: number): number {
  if (n < 8) {
    let res = -0;
    for (let i = 0; i < n; i++) res = fround(res + a[from + i]!);
    return res;
  }
  if (n <= 128) {
    let r0 = a[from]!,
      r1 = a[from + 1]!,
      r2 = a[from + 2]!,
      r3 = a[from + 3]!;
    let r4 = a[from + 4]!,
      r5 = a[from + 5]!,
      r6 = a[from + 6]!,
      r7 = a[from + 7]!;
    const end = n - (n % 8);
    let i = 8;
    for (; i < end; i += 8) {
      const at = from + i;
      r0 = fround(r0 + a[at]!);
      r1 = fround(r1 + a[at + 1]!);
      r2 = fround(r2 + a[at + 2]!);
      r3 = fround(r3 + a[at + 3]!);
      r4 = fround(r4 + a[at + 4]!);
      r5 = fround(r5 + a[at + 5]!);
      r6 = fround(r6 + a[at + 6]!);
      r7 = fround(r7 + a[at + 7]!);
    }
    let res = fround(fround(fround(r0 + r1) + fround(r2 + r3)) + fround(fround(r4 + r5) + fround(r6 + r7)));
    for (; i < n; i++) res = fround(res + a[from + i]!);
    return res;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return fround(pairwise(a, from, half) + pairwise(a, from + half, n - half));
}
