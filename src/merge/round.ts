/**
 * Rounding to the dtype a merge computes in. mergekit runs its arithmetic as torch tensor operations in the config's
 * `dtype` (or the stored one): each operation on a bfloat16 or float16 tensor computes in float32 and rounds its
 * result to the tensor's dtype, and reductions (`sum`) accumulate in float32 and round once. The kernels reproduce
 * that by computing in doubles and rounding after each operation: a double result of +, -, *, / or sqrt on float32
 * operands, rounded to float32, is the correctly rounded float32 result (53 >= 2 * 24 + 2 bits), so `fround` after
 * each step gives torch's float32 bits, and rounding that to 16 bits gives its bfloat16/float16 bits. Pure.
 */
import { f16ToF32Bits, f32BitsToBf16, f32BitsToF16 } from "../codecs/half.js";
import type { MergeDtype } from "./config.js";

export type Round = (x: number) => number;

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 → bfloat16 → float32, round to nearest even (NaN stays NaN). */
export function roundBf16(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7fffffff) > 0x7f800000) return x;
  u32[0] = (f32BitsToBf16(bits) << 16) >>> 0;
  return f32[0]!;
}

/** float32 → float16 → float32, round to nearest even, with torch's overflow to infinity. */
export function roundF16(x: number): number {
  f32[0] = x;
  u32[0] = f16ToF32Bits(f32BitsToF16(u32[0]!));
  return f32[0]!;
}

/** The rounding of one operation's result in `dtype` (float32 first, then the 16-bit format). */
export function rounder(dtype: MergeDtype): Round {
  if (dtype === "F32") return Math.fround;
  if (dtype === "BF16") return roundBf16;
  return roundF16;
}

/** Round every element of `values` to `dtype` in place (a `.to(dtype)` of float32 values). */
export function roundAll(values: Float32Array, count: number, dtype: MergeDtype): void {
  if (dtype === "F32") return;
  const round = rounder(dtype);
  for (let i = 0; i < count; i++) values[i] = round(values[i]!);
}
