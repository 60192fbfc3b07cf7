/**
 * The merge methods' arithmetic on float32 arrays of values already in the compute dtype, with each operation's
 * result rounded as torch rounds it (`round.ts`). Element-wise kernels (linear, task arithmetic and its sign
 * consensus, passthrough) take any chunk of a tensor; the rest need whole-tensor statistics (a magnitude rank, norms,
 * an angle) and take whole tensors. The definitions are the methods' papers as mergekit implements them (mergekit
 * 0.1.x, read for the rules: the order of operations, what is rounded where, the edge cases). Pure: runs in
 * browsers and in worker threads.
 */
import { toFloat32 } from "../codecs/index.js";
import { SafetensorError } from "../format/errors.js";
import type { MergeDtype } from "./config.js";
import { taskKernels } from "./fast-kernels.js";
import { blasNorm, pairwiseSum } from "./numpy-sums.js";
import { type Round, roundArray, rounder } from "./round.js";
import { keepSortedMagnitudes } from "./torch-sort.js";

const fround = Math.fround;

/** Σ values in float32 (torch's accumulation of a reduction over the models), rounded once to the compute dtype. */
export function sumRounded(weights: readonly number[], round: Round): number {
  return sumWeights(weights, round);
}

function sumWeights(weights: readonly number[], round: Round): number {
  let acc = 0;
  for (const w of weights) acc = fround(acc + w);
  return round(acc);
}

/*
 * The element-wise kernels run as passes over float32 arrays: a Float32Array store rounds to float32, and one
 * `roundArray` pass after each operation rounds to a 16-bit compute dtype (nothing for float32). A per-element
 * rounding call made a float16 linear merge of the bench's 2.37 GiB models take 259 s under load 13.5.
 */

/** linear: Σ w_i x_i, divided by Σ w_i when `normalize`. `weights` are already in the compute dtype. */
export function linearKernel(
  xs: readonly Float32Array[],
  weights: readonly number[],
  normalize: boolean,
  dtype: MergeDtype,
  out: Float32Array,
  count: number,
  scratch: Float32Array,
): void {
  const divisor = sumWeights(weights, rounder(dtype));
  if (dtype === "F32") {
    const w0 = weights[0]!;
    const x0 = xs[0]!;
    for (let i = 0; i < count; i++) out[i] = w0 * x0[i]!;
    for (let j = 1; j < xs.length; j++) {
      const w = weights[j]!;
      const x = xs[j]!;
      for (let i = 0; i < count; i++) out[i] = out[i]! + fround(w * x[i]!);
    }
  } else {
    for (let j = 0; j < xs.length; j++) {
      const w = weights[j]!;
      const x = xs[j]!;
      const product = j === 0 ? out : scratch;
      for (let i = 0; i < count; i++) product[i] = w * x[i]!;
      roundArray(product, count, dtype);
      if (j > 0) for (let i = 0; i < count; i++) out[i] = out[i]! + scratch[i]!;
    }
    roundArray(out, count, dtype);
  }
  if (normalize) {
    for (let i = 0; i < count; i++) out[i] = out[i]! / divisor;
    roundArray(out, count, dtype);
  }
}

/**
 * round(w · x) for every 16-bit code x of `dtype`: a product of a 16-bit input by its weight, rounded to that dtype,
 * is one of 65,536 values, so a linear merge of 16-bit models reads it from a table instead of decoding,
 * multiplying and rounding (15 passes over the data became 4; see `linearTable16Kernel`).
 */
export function productTable(dtype: "F16" | "BF16", weight: number): Float32Array {
  const codes = new Uint16Array(65536);
  for (let c = 0; c < 65536; c++) codes[c] = c;
  const table = toFloat32(dtype, new Uint8Array(codes.buffer), { count: 65536 });
  for (let c = 0; c < 65536; c++) table[c] = weight * table[c]!;
  roundArray(table, 65536, dtype);
  return table;
}

/**
 * linear over 16-bit inputs in their dtype: Σ table_j[code_j] in float32, rounded, divided by `divisor` (null: no
 * normalize). The result in `out` is float32 that `fromFloat32` rounds to the dtype as torch's last operation does.
 */
export function linearTable16Kernel(
  codes: readonly Uint16Array[],
  tables: readonly Float32Array[],
  divisor: number | null,
  dtype: "F16" | "BF16",
  out: Float32Array,
  count: number,
): void {
  const t0 = tables[0]!;
  const c0 = codes[0]!;
  if (codes.length === 2) {
    const t1 = tables[1]!;
    const c1 = codes[1]!;
    for (let i = 0; i < count; i++) out[i] = t0[c0[i]!]! + t1[c1[i]!]!;
  } else {
    for (let i = 0; i < count; i++) out[i] = t0[c0[i]!]!;
    for (let j = 1; j < codes.length; j++) {
      const t = tables[j]!;
      const c = codes[j]!;
      for (let i = 0; i < count; i++) out[i] = out[i]! + t[c[i]!]!;
    }
  }
  if (divisor === null) return;
  roundArray(out, count, dtype);
  for (let i = 0; i < count; i++) out[i] = out[i]! / divisor;
}

/** passthrough: the one input, times `scale` when given. */
export function passthroughKernel(
  x: Float32Array,
  scale: number | undefined,
  dtype: MergeDtype,
  out: Float32Array,
  count: number,
): void {
  if (scale === undefined) {
    out.set(x.subarray(0, count));
    return;
  }
  const s = fround(scale);
  for (let i = 0; i < count; i++) out[i] = x[i]! * s;
  roundArray(out, count, dtype);
}

/** x_i - base, in place (task vectors). */
export function subtractBase(xs: readonly Float32Array[], base: Float32Array, dtype: MergeDtype, count: number): void {
  const fast = taskKernels();
  for (const x of xs) {
    if (fast !== null && dtype !== "F32") {
      fast.subtract16(x, base, dtype, count);
      continue;
    }
    for (let i = 0; i < count; i++) x[i] = x[i]! - base[i]!;
    roundArray(x, count, dtype);
  }
}

export interface CombineOptions {
  /** TIES's sign election ("sum"): only deltas of the majority sign are mixed. */
  consensus: boolean;
  normalize: boolean;
  lambda: number;
}

/**
 * The task-arithmetic family's combination: weighted deltas (sparsified already), the sign election when
 * `consensus`, the sum divided by the weights that took part when `normalize`, times λ, added to the base. The
 * deltas are changed in place (weighted); `scratch` holds the per-entry divisors.
 */
export function combineKernel(
  base: Float32Array,
  deltas: readonly Float32Array[],
  weights: readonly number[],
  options: CombineOptions,
  dtype: MergeDtype,
  out: Float32Array,
  count: number,
  scratch: Float32Array,
): void {
  const n = deltas.length;
  const fast = taskKernels();
  if (fast !== null && options.consensus && n === 2 && dtype !== "F32") {
    const round = rounder(dtype);
    const divisors = [weights[0]!, weights[1]!, weights[0]! + weights[1]!].map((w) => round(fround(w)));
    const w = Float32Array.of(weights[0]!, weights[1]!, ...divisors);
    const [a, b] = deltas as [Float32Array, Float32Array];
    fast.consensus2(base, a, b, w, dtype, options.normalize, fround(options.lambda), count, out);
    return;
  }
  let plainDivisor = sumWeights(weights, rounder(dtype));
  if (Math.abs(plainDivisor) < 1e-8) plainDivisor = 1;
  for (let j = 0; j < n; j++) {
    const d = deltas[j]!;
    const w = weights[j]!;
    for (let i = 0; i < count; i++) d[i] = d[i]! * w;
    roundArray(d, count, dtype);
  }
  if (options.consensus && n === 2) {
    // Two task vectors (the common case), fused: each entry's divisor is one of three rounded weight sums.
    const [a, b] = deltas as [Float32Array, Float32Array];
    const round = rounder(dtype);
    const wa = round(fround(weights[0]!));
    const wb = round(fround(weights[1]!));
    const wab = round(fround(weights[0]! + weights[1]!));
    for (let i = 0; i < count; i++) {
      const x = a[i]!;
      const y = b[i]!;
      const sum = fround(x + y);
      const majority = sum >= 0 ? 1 : -1;
      const keepX = (x > 0 ? 1 : x < 0 ? -1 : 0) === majority;
      const keepY = (y > 0 ? 1 : y < 0 ? -1 : 0) === majority;
      out[i] = keepX ? (keepY ? sum : x) : keepY ? y : 0;
      scratch[i] = keepX ? (keepY ? wab : wa) : keepY ? wb : 1;
    }
    roundArray(out, count, dtype);
    if (options.normalize) {
      for (let i = 0; i < count; i++) out[i] = out[i]! / (scratch[i] === 0 ? 1 : scratch[i]!);
      roundArray(out, count, dtype);
    }
  } else if (options.consensus) {
    // The majority sign is that of Σ weighted (rounding keeps a sum's sign, so it is taken before rounding).
    for (let i = 0; i < count; i++) {
      let signWeight = 0;
      for (let j = 0; j < n; j++) signWeight = fround(signWeight + deltas[j]![i]!);
      const majority = signWeight >= 0 ? 1 : -1;
      let acc = 0;
      let wacc = 0;
      for (let j = 0; j < n; j++) {
        const v = deltas[j]![i]!;
        if ((v > 0 ? 1 : v < 0 ? -1 : 0) === majority) {
          acc = fround(acc + v);
          wacc = fround(wacc + weights[j]!);
        }
      }
      out[i] = acc;
      scratch[i] = wacc;
    }
    roundArray(out, count, dtype);
    roundArray(scratch, count, dtype);
    if (options.normalize) {
      for (let i = 0; i < count; i++) out[i] = out[i]! / (scratch[i] === 0 ? 1 : scratch[i]!);
      roundArray(out, count, dtype);
    }
  } else {
    const d0 = deltas[0]!;
    for (let i = 0; i < count; i++) out[i] = d0[i]!;
    for (let j = 1; j < n; j++) {
      const d = deltas[j]!;
      for (let i = 0; i < count; i++) out[i] = out[i]! + d[i]!;
    }
    roundArray(out, count, dtype);
    if (options.normalize) {
      for (let i = 0; i < count; i++) out[i] = out[i]! / plainDivisor;
      roundArray(out, count, dtype);
    }
  }
  if (options.lambda !== 1) {
    const lambda = fround(options.lambda);
    for (let i = 0; i < count; i++) out[i] = out[i]! * lambda;
    roundArray(out, count, dtype);
  }
  for (let i = 0; i < count; i++) out[i] = base[i]! + out[i]!;
  roundArray(out, count, dtype);
}

// ---------------------------------------------------------------------------------------------------------------
// Sparsification (whole tensors): which entries of a task vector survive, and the optional L1 rescale.

/** Uniform numbers in [0, 1) keyed by (seed, stream, index): the same seed gives the same drops, in any chunking. */
export function uniform(seed: number, stream: number, index: number): number {
  let h = Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(stream, 0xc2b2ae35) ^ Math.imul(index | 0, 0x27d4eb2f);
  h ^= Math.imul((index / 0x100000000) | 0, 0x165667b1);
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b);
  h ^= h >>> 16;
  return (h >>> 8) / 0x1000000;
}

/** A 32-bit key of a string (a tensor's name and an input's position), for `uniform`'s stream. */
export function streamKey(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

const absScratch = new Float32Array(1);
const absBits = new Uint32Array(absScratch.buffer);

/** |x|'s float32 bits: an unsigned integer that orders magnitudes as the values do. */
function magnitudeBits(x: number): number {
  absScratch[0] = x;
  return absBits[0]! & 0x7fffffff;
}

interface RankedValue {
  /** Magnitude bits of the value at that rank. */
  bits: number;
  /** Entries of smaller magnitude. */
  less: number;
  /** Entries of that magnitude. */
  equal: number;
}

/**
 * The magnitude at ascending rank `rank` (0-based) of `values`, by two 16-bit histogram passes over the magnitudes'
 * bits (no sort, no copy of the tensor).
 */
function magnitudeAtRank(values: Float32Array, rank: number): RankedValue {
  const n = values.length;
  const bits = new Uint32Array(values.buffer, values.byteOffset, n);
  const high = new Float64Array(65536);
  for (let i = 0; i < n; i++) high[(bits[i]! & 0x7fffffff) >>> 16]!++;
  let below = 0;
  let bucket = 0;
  while (below + high[bucket]! <= rank) below += high[bucket++]!;
  const low = new Float64Array(65536);
  for (let i = 0; i < n; i++) {
    const b = bits[i]! & 0x7fffffff;
    if (b >>> 16 === bucket) low[b & 0xffff]!++;
  }
  let lowBucket = 0;
  while (below + low[lowBucket]! <= rank) below += low[lowBucket++]!;
  return { bits: ((bucket << 16) | lowBucket) >>> 0, less: below, equal: low[lowBucket]! };
}

/**
 * Keep the entries at positions [from, to) of torch's ascending sort of the magnitudes. When no magnitude straddles
 * a boundary, the two boundary magnitudes decide (histograms only); otherwise torch's sort is replayed to know which
 * of the equal entries it puts inside (`torch-sort.ts`).
 */
function keepSortedRange(values: Float32Array, from: number, to: number, replay: boolean): void {
  const n = values.length;
  if (from >= to) {
    values.fill(0);
    return;
  }
  if (replay) {
    keepSortedMagnitudes(values, false, from, to);
    return;
  }
  const lo = magnitudeAtRank(values, from);
  const hi = magnitudeAtRank(values, to - 1);
  if (lo.less < from || hi.less + hi.equal > to) {
    keepSortedMagnitudes(values, false, from, to);
    return;
  }
  for (let i = 0; i < n; i++) {
    const b = magnitudeBits(values[i]!);
    if (b < lo.bits || b > hi.bits) values[i] = 0;
  }
}

/** TIES / magnitude: keep the `density` share of largest magnitudes (equal ones as torch's sort picks them). */
export function magnitudeSparsify(values: Float32Array, density: number, replay = false): void {
  if (density >= 1) return;
  const n = values.length;
  const k = Math.trunc(density * n);
  if (k <= 0) {
    throw new SafetensorError("InvalidMergeConfig", `density ${density} keeps no entry of a ${n}-entry tensor`);
  }
  if (replay) {
    keepSortedMagnitudes(values, true, 0, k);
    return;
  }
  const at = magnitudeAtRank(values, n - k);
  if (at.less < n - k) {
    // Some entries equal to the k-th largest magnitude are kept and some dropped: torch's sort decides which.
    keepSortedMagnitudes(values, true, 0, k);
    return;
  }
  for (let i = 0; i < n; i++) if (magnitudeBits(values[i]!) < at.bits) values[i] = 0;
}

/** Breadcrumbs: drop the `gamma` share of largest magnitudes and the smallest, keeping `density`. */
export function outlierSparsify(values: Float32Array, density: number, gamma: number, replay = false): void {
  if (density >= 1) return;
  const n = values.length;
  const target = Math.trunc(density * n);
  let top = Math.trunc(gamma * n);
  let bottom = n - target - top;
  if (bottom < 0) {
    top += bottom;
    bottom = 0;
  }
  // mergekit keeps sorted positions [bottom, -top): with top = 0 that slice is empty and nothing is kept.
  keepSortedRange(values, bottom, top === 0 ? bottom : n - top, replay);
}

/** DARE: keep each entry with probability `density` (seeded). */
export function randomSparsify(values: Float32Array, density: number, seed: number, stream: number): void {
  if (density >= 1) return;
  for (let i = 0; i < values.length; i++) if (!(uniform(seed, stream, i) < density)) values[i] = 0;
}

/** Sort keys of a row's entries: magnitude bits (31) times this, plus the column (exact in a double: 2^52). */
const ROW_KEY = 1 << 21;

/**
 * DELLA's MagPrune: in each row (a 1-D tensor is one row), keep entry j with probability
 * (density - ε) + 2ε · rank_j / (cols - 1), rank_j its ascending magnitude rank in the row (seeded).
 */
export function dellaSparsify(
  values: Float32Array,
  cols: number,
  density: number,
  epsilon: number,
  seed: number,
  stream: number,
): void {
  if (density >= 1) return;
  if (density <= 0) {
    values.fill(0);
    return;
  }
  if (density + epsilon >= 1 || density - epsilon <= 0) {
    throw new SafetensorError("InvalidMergeConfig", "epsilon must keep density ± epsilon inside (0, 1)");
  }
  if (cols > ROW_KEY) throw new SafetensorError("TooLarge", `della: rows of ${cols} entries (at most ${ROW_KEY})`);
  const rows = values.length / cols;
  const keys = new Float64Array(cols);
  const low = fround(density - epsilon);
  for (let r = 0; r < rows; r++) {
    const row = values.subarray(r * cols, (r + 1) * cols);
    for (let j = 0; j < cols; j++) keys[j] = magnitudeBits(row[j]!) * ROW_KEY + j;
    keys.sort();
    for (let rank = 0; rank < cols; rank++) {
      const j = keys[rank]! % ROW_KEY;
      const norm = cols > 1 ? fround(rank / (cols - 1)) : 0;
      const p = fround(low + fround(fround(norm * 2) * epsilon));
      if (!(uniform(seed, stream, r * cols + j) < p)) row[j] = 0;
    }
  }
}

/**
 * Rescale a sparsified task vector to the L1 norm it had (mergekit's `rescale`): `kept * (|before|₁ / |kept|₁)`,
 * unchanged when either norm is under 1e-7. Sums accumulate in doubles, then round to the compute dtype.
 */
export function l1Rescale(kept: Float32Array, beforeL1: number, round: Round): void {
  let after = 0;
  for (let i = 0; i < kept.length; i++) after += Math.abs(kept[i]!);
  const before = round(beforeL1);
  const afterR = round(after);
  if (before < 1e-7 || afterR < 1e-7) return;
  const ratio = round(before / afterR);
  for (let i = 0; i < kept.length; i++) kept[i] = round(kept[i]! * ratio);
}

export function l1Norm(values: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += Math.abs(values[i]!);
  return sum;
}

// ---------------------------------------------------------------------------------------------------------------
// Spherical and geometric methods (whole tensors).

function norm(values: Float32Array, from = 0, to = values.length, stride = 1): number {
  let sum = 0;
  for (let i = from; i < to; i += stride) sum += values[i]! * values[i]!;
  return Math.sqrt(sum);
}

/**
 * SLERP from `v0` (the base) to `v1` at `t`, in float32 as mergekit's numpy code runs it: each tensor normalized by
 * its norm (when above 1e-8), the angle from their dot product; nearly colinear tensors (|dot| > 0.9995) are lerped.
 * The norms and the dot product are summed in numpy's order (`numpy-sums.ts`); `out` holds the products meanwhile.
 * `shortValues`: the values are float16 or bfloat16 ones (`blasNorm`).
 */
export function slerpKernel(
  t: number,
  v0: Float32Array,
  v1: Float32Array,
  out: Float32Array,
  shortValues = false,
): void {
  const n = v0.length;
  const n0 = blasNorm(v0, shortValues);
  const n1 = blasNorm(v1, shortValues);
  for (let i = 0; i < n; i++) {
    const a = n0 > 1e-8 ? fround(v0[i]! / n0) : v0[i]!;
    const b = n1 > 1e-8 ? fround(v1[i]! / n1) : v1[i]!;
    out[i] = a * b;
  }
  const dot = pairwiseSum(out);
  const tf = fround(t);
  if (Math.abs(dot) > 0.9995) {
    const s0 = fround(1 - t);
    for (let i = 0; i < n; i++) out[i] = fround(fround(s0 * v0[i]!) + fround(tf * v1[i]!));
    return;
  }
  const theta0 = fround(Math.acos(dot));
  const sinTheta0 = fround(Math.sin(theta0));
  const thetaT = fround(theta0 * tf);
  const sinThetaT = fround(Math.sin(thetaT));
  const s0 = fround(fround(Math.sin(fround(theta0 - thetaT))) / sinTheta0);
  const s1 = fround(sinThetaT / sinTheta0);
  for (let i = 0; i < n; i++) out[i] = fround(fround(s0 * v0[i]!) + fround(s1 * v1[i]!));
}

/**
 * NuSLERP of `v0` and `v1` at `t`, in the compute dtype: over the whole tensor (`flatten`), or along each row of the
 * last dimension (`rowWise` false) or each column (`rowWise` true, mergekit's dim 0).
 */
export function nuslerpKernel(
  t: number,
  v0: Float32Array,
  v1: Float32Array,
  shape: readonly number[],
  flatten: boolean,
  rowWise: boolean,
  round: Round,
  out: Float32Array,
): void {
  const n = v0.length;
  let groups: number;
  let length: number;
  let index: (g: number, k: number) => number;
  if (flatten || shape.length < 2) {
    groups = 1;
    length = n;
    index = (_g, k) => k;
  } else if (!rowWise) {
    length = shape.at(-1)!;
    groups = n / length;
    index = (g, k) => g * length + k;
  } else {
    // dim 0 moved last: vectors run along the first dimension, one per position in the others.
    length = shape[0]!;
    groups = n / length;
    index = (g, k) => k * groups + g;
  }
  const a = fround(1 - t);
  const b = fround(t);
  for (let g = 0; g < groups; g++) {
    let s0 = 0;
    let s1 = 0;
    for (let k = 0; k < length; k++) {
      const i = index(g, k);
      s0 += v0[i]! * v0[i]!;
      s1 += v1[i]! * v1[i]!;
    }
    const n0 = Math.max(round(Math.sqrt(s0)), 1e-7);
    const n1 = Math.max(round(Math.sqrt(s1)), 1e-7);
    let dot = 0;
    for (let k = 0; k < length; k++) {
      const i = index(g, k);
      dot = fround(dot + round(round(v0[i]! / n0) * round(v1[i]! / n1)));
    }
    const cos = Math.min(1, Math.max(-1, round(dot)));
    const theta = round(Math.acos(cos));
    const sinTheta = round(Math.sin(theta));
    const colinear = Math.abs(sinTheta) < 1e-8;
    const c0 = round(Math.sin(round(a * theta)));
    const c1 = round(Math.sin(round(b * theta)));
    for (let k = 0; k < length; k++) {
      const i = index(g, k);
      out[i] = colinear
        ? round(round(a * v0[i]!) + round(b * v1[i]!))
        : round(round(round(c0 * v0[i]!) + round(c1 * v1[i]!)) / sinTheta);
    }
  }
}

/**
 * Model Stock: the base `w0` moved toward the average of `ws` by t = N·cos θ / (1 + (N - 1)·cos θ), θ the mean
 * pairwise angle of the task vectors, over the whole tensor or per row (`filterWise`). Task vectors are computed
 * into `ws`' arrays' copies, so `ws` stays as given.
 */
export function modelStockKernel(
  w0: Float32Array,
  ws: readonly Float32Array[],
  rowLength: number,
  round: Round,
  out: Float32Array,
): void {
  const n = w0.length;
  const N = ws.length;
  const rows = n / rowLength;
  const offsets = ws.map((w) => {
    const o = new Float32Array(n);
    for (let i = 0; i < n; i++) o[i] = round(w[i]! - w0[i]!);
    return o;
  });
  for (let r = 0; r < rows; r++) {
    const from = r * rowLength;
    const to = from + rowLength;
    const cosines: number[] = [];
    for (let i = 0; i < N; i++) {
      for (let j = i + 1; j < N; j++) {
        const product = round(round(norm(offsets[i]!, from, to)) * round(norm(offsets[j]!, from, to)));
        let dot = 0;
        for (let k = from; k < to; k++) dot = fround(dot + round(offsets[i]![k]! * offsets[j]![k]!));
        cosines.push(Math.min(1, Math.max(-1, round(round(dot) / Math.max(product, 1e-6)))));
      }
    }
    let mean = 0;
    for (const c of cosines) mean = fround(mean + c);
    const cos = round(round(mean) / cosines.length);
    const t = round(round(N * cos) / round(1 + round((N - 1) * cos)));
    const oneMinusT = round(1 - t);
    for (let k = from; k < to; k++) {
      let sum = ws[0]![k]!;
      for (let i = 1; i < N; i++) sum = round(sum + ws[i]![k]!);
      const avg = round(sum / N);
      out[k] = round(round(t * avg) + round(oneMinusT * w0[k]!));
    }
  }
}
