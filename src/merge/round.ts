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

/**
 * Round `count` float32 values to `dtype` in place, by their bits: one pass without calls for the normal range (the
 * measured cost of a per-element `rounder` call was most of a float16 merge), the rest through `rounder`. Does
 * nothing for float32 (a Float32Array store has rounded already).
 */
export function roundArray(values: Float32Array, count: number, dtype: MergeDtype): void {
  if (dtype === "F32") return;
  const bits = new Uint32Array(values.buffer, values.byteOffset, count);
  if (dtype === "BF16") {
    for (let i = 0; i < count; i++) {
      const u = bits[i]!;
      // NaN keeps its bits; everything else rounds to nearest even (infinity stays infinity, overflow becomes it).
      if ((u & 0x7fffffff) <= 0x7f800000) bits[i] = ((u + 0x7fff + ((u >>> 16) & 1)) & 0xffff0000) >>> 0;
    }
    return;
  }
  for (let i = 0; i < count; i++) {
    const u = bits[i]!;
    const a = u & 0x7fffffff;
    // Normal float16 range [2^-14, 65520): drop 13 mantissa bits, rounding to nearest even (a carry moves the
    // exponent, which stays below the overflow bound). Zero stays; subnormals, overflow, inf and NaN take the codec.
    if (a >= 0x38800000 && a < 0x477ff000) bits[i] = ((u + 0xfff + ((u >>> 13) & 1)) & 0xffffe000) >>> 0;
    else if (a !== 0) values[i] = roundF16(values[i]!);
  }
}
