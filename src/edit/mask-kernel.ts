/**
 * The arithmetic of masks, on raw little-endian bytes, never decoding weights. Pure.
 *
 * - `keepOf`: which elements a mask keeps: 1[G > 0] for an element-wise mask of any dtype but C64 (BOOL and unsigned
 *   integers: nonzero; signed integers and floats: greater than zero, so NaN, -0 and 0 are not kept), or one bit per
 *   element packed as numpy's `packbits` does (bit order big: element 0 is the most significant bit of byte 0; little:
 *   the least significant).
 * - `maskElements`: W ⊙ keep in place. Mode "multiply" is the product numpy computes for `w * (g > 0)`: a masked
 *   finite weight becomes a zero of its own sign (-0.0 for a negative weight; +0 in the FNUZ float8s, which have no
 *   -0), a NaN stays as it is, an infinity becomes the default NaN of x86 (sign set, quiet: 0xFE00 in F16, 0xFFC0
 *   BF16, 0xFFC00000 F32); integers and BOOL become 0; C64 follows the complex product (a + bi)(0 + 0i). Mode "zero" (numpy's `np.where(g > 0, w, 0)`) writes +0 /
 *   0 / False whatever the weight was.
 */
import { toFloat32 } from "../codecs/index.js";
import type { Dtype } from "../format/dtypes.js";
import { dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";

export type MaskMode = "multiply" | "zero";
export type BitOrder = "big" | "little";

/** How a float format stores special values, for the multiply rule. */
interface FloatBits {
  readonly sign: number;
  readonly exponent: number;
  readonly mantissa: number;
  /** Has infinities (exponent all ones, mantissa 0) and NaNs (exponent all ones, mantissa ≠ 0). */
  readonly ieee: boolean;
  /** The NaN that inf × 0 gives (x86's default NaN, converted to the format). */
  readonly defaultNan: number;
  /** No -0: zero is all bits clear (FNUZ); the NaN is the sign bit alone. */
  readonly unsignedZero: boolean;
}

const FLOATS: Partial<Record<Dtype, FloatBits>> = {
  F16: { sign: 0x8000, exponent: 0x7c00, mantissa: 0x03ff, ieee: true, defaultNan: 0xfe00, unsignedZero: false },
  BF16: { sign: 0x8000, exponent: 0x7f80, mantissa: 0x007f, ieee: true, defaultNan: 0xffc0, unsignedZero: false },
  F32: {
    sign: 0x80000000,
    exponent: 0x7f800000,
    mantissa: 0x007fffff,
    ieee: true,
    defaultNan: 0xffc00000,
    unsignedZero: false,
  },
  F8_E5M2: { sign: 0x80, exponent: 0x7c, mantissa: 0x03, ieee: true, defaultNan: 0xfe, unsignedZero: false },
  // E4M3FN: no infinities; the only NaNs are S.1111.111.
  F8_E4M3: { sign: 0x80, exponent: 0x78, mantissa: 0x07, ieee: false, defaultNan: 0xff, unsignedZero: false },
  F8_E4M3FNUZ: { sign: 0x80, exponent: 0x78, mantissa: 0x07, ieee: false, defaultNan: 0x80, unsignedZero: true },
  F8_E5M2FNUZ: { sign: 0x80, exponent: 0x7c, mantissa: 0x03, ieee: false, defaultNan: 0x80, unsignedZero: true },
};

/** `UnsupportedDtype` for weights a mask cannot be applied to (sub-byte packing; E8M0, which has no zero). */
export function checkMaskable(dtype: Dtype, tensor: string): void {
  const bits = dtypeOf(dtype).bits;
  if (bits % 8 !== 0 || dtype === "F8_E8M0") {
    throw new SafetensorError(
      "UnsupportedDtype",
      `cannot apply a mask to ${dtype} weights (${dtype === "F8_E8M0" ? "E8M0 has no zero" : "packed sub-byte elements"})`,
      { tensor },
    );
  }
}

/** One byte per element, 1 where an element-wise mask of `dtype` keeps it (G > 0). */
export function keepOf(dtype: Dtype, bytes: Uint8Array, count: number): Uint8Array {
  const keep = new Uint8Array(count);
  const kind = dtypeOf(dtype).kind;
  if (kind === "bool" || (kind === "uint" && dtype === "U8")) {
    for (let i = 0; i < count; i++) keep[i] = bytes[i] === 0 ? 0 : 1;
    return keep;
  }
  if (kind === "uint") {
    // Any nonzero byte of the element (exact for U64, which float32 would round but never to 0).
    const width = dtypeOf(dtype).bits / 8;
    for (let i = 0; i < count; i++) {
      let any = 0;
      for (let b = 0; b < width; b++) any |= bytes[i * width + b]!;
      keep[i] = any === 0 ? 0 : 1;
    }
    return keep;
  }
  // Signed integers and floats: the sign survives the float32 conversion, so does "> 0" (NaN compares false).
  const values = toFloat32(dtype, bytes, { count });
  for (let i = 0; i < count; i++) keep[i] = values[i]! > 0 ? 1 : 0;
  return keep;
}

/** Bits `first`…`first + count - 1` of a packbits array, one byte per element. */
export function keepOfPacked(packed: Uint8Array, first: number, count: number, order: BitOrder): Uint8Array {
  const keep = new Uint8Array(count);
  for (let i = 0; i < count; i++) {
    const j = first + i;
    const shift = order === "big" ? 7 - (j & 7) : j & 7;
    keep[i] = (packed[j >> 3]! >> shift) & 1;
  }
  return keep;
}

function multiplyWord(word: number, f: FloatBits): number {
  const magnitude = word & ~f.sign & (f.exponent | f.mantissa);
  const exponentAllOnes = (word & f.exponent) === f.exponent;
  if (f.unsignedZero) return word === f.sign ? word : 0; // the lone NaN stays, everything else is +0
  if (f.ieee && exponentAllOnes) return (word & f.mantissa) === 0 ? f.defaultNan : word; // inf × 0, NaN × 0
  if (!f.ieee && magnitude === (f.exponent | f.mantissa)) return word; // E4M3FN's NaN
  return (word & f.sign) >>> 0;
}

/**
 * Apply `keep` (one byte per element) to `count` elements of `dtype` in `bytes` (aligned: byteOffset a multiple of
 * the element size) in place. Returns how many elements were masked (keep = 0).
 */
export function maskElements(dtype: Dtype, bytes: Uint8Array, keep: Uint8Array, mode: MaskMode): number {
  const width = dtypeOf(dtype).bits / 8;
  const count = keep.length;
  let masked = 0;
  for (let i = 0; i < count; i++) if (keep[i] === 0) masked++;
  if (masked === 0) return 0;
  const float = FLOATS[dtype];
  if (mode === "zero" || (float === undefined && dtype !== "F64" && dtype !== "C64")) {
    for (let i = 0; i < count; i++) if (keep[i] === 0) bytes.fill(0, i * width, (i + 1) * width);
    return masked;
  }
  if (dtype === "F64") {
    // Two words per element, the high word (sign, exponent, top of the mantissa) second.
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count * 2);
    for (let i = 0; i < count; i++) {
      if (keep[i] !== 0) continue;
      const hi = words[2 * i + 1]!;
      const lo = words[2 * i]!;
      if ((hi & 0x7ff00000) === 0x7ff00000) {
        if ((hi & 0x000fffff) === 0 && lo === 0) {
          words[2 * i + 1] = 0xfff80000; // inf × 0: x86's default NaN
          words[2 * i] = 0;
        }
        continue; // NaN × 0 = the same NaN
      }
      words[2 * i + 1] = (hi & 0x80000000) >>> 0;
      words[2 * i] = 0;
    }
    return masked;
  }
  if (dtype === "C64") {
    // (a + bi)(0 + 0i) = (a·0 - b·0) + (a·0 + b·0)i: for finite parts, real -0 only when a < 0 ≤ b's sign bit
    // clear, imaginary -0 only when both signs are set; a non-finite part gives NaN in both (x86's default).
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count * 2);
    for (let i = 0; i < count; i++) {
      if (keep[i] !== 0) continue;
      const a = words[2 * i]!;
      const b = words[2 * i + 1]!;
      if ((a & 0x7f800000) === 0x7f800000 || (b & 0x7f800000) === 0x7f800000) {
        words[2 * i] = 0xffc00000;
        words[2 * i + 1] = 0xffc00000;
        continue;
      }
      const aNeg = a >>> 31 === 1;
      const bNeg = b >>> 31 === 1;
      words[2 * i] = aNeg && !bNeg ? 0x80000000 : 0;
      words[2 * i + 1] = aNeg && bNeg ? 0x80000000 : 0;
    }
    return masked;
  }
  const f = float!;
  if (width === 1) {
    for (let i = 0; i < count; i++) if (keep[i] === 0) bytes[i] = multiplyWord(bytes[i]!, f);
  } else if (width === 2) {
    const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, count);
    for (let i = 0; i < count; i++) if (keep[i] === 0) halves[i] = multiplyWord(halves[i]!, f);
  } else {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count);
    for (let i = 0; i < count; i++) if (keep[i] === 0) words[i] = multiplyWord(words[i]!, f);
  }
  return masked;
}
