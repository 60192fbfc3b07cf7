/**
 * The arithmetic of masks, on raw little-endian bytes, never decoding weights. Pure.
 *
 * - `keepOf`: which elements a mask keeps: 1[G > 0] for an element-wise mask of any dtype but C64 (BOOL and unsigned
 *   integers: nonzero; signed integers and floats: greater than zero, so NaN, -0 and 0 are not kept), or one bit per
 *   element packed as numpy's `packbits` does (bit order big: element 0 is the most significant bit of byte 0; little:
 *   the least significant).
 * - `maskElements`: W ⊙ keep in place. Mode "multiply" is the product numpy computes for `w * (g > 0)`, every
 *   element multiplied by 1 or 0 in the weight's arithmetic (x86's): a masked finite weight becomes a zero of its own
 *   sign (-0.0 for a negative weight; +0 in the FNUZ float8s, which have no -0), an infinity the default NaN of x86
 *   (sign set, quiet: 0xFE00 in F16, 0xFFC0 BF16, 0xFFC00000 F32); a NaN, kept or masked, comes out as numpy's
 *   arithmetic gives it: quieted (payload kept) in F16, F32 and F64, 0x7FC0 / 0x7E with its sign in BF16 and F8_E5M2
 *   (ml_dtypes computes in float32 and converts back); integers and BOOL become 0; C64 follows the complex product
 *   (a + bi)(k + 0i) = (a·k - b·0) + (a·0 + b·k)i term by term (so a kept (-0, -1) becomes (+0, -1), and a NaN or
 *   infinite part spreads NaN to the other). Mode "zero" (numpy's `np.where(g > 0, w, 0)`) writes +0 / 0 / False
 *   whatever the weight was, and leaves kept weights as they are.
 */
import { toFloat32 } from "../codecs/index.js";
import type { Dtype } from "../format/dtypes.js";
import { dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";

/**
 * How masked weights become zero: "multiply" is numpy's `w * (g > 0)` (signed zeros, NaN rules), "zero" is
 * `np.where(g > 0, w, 0)`.
 */
export type MaskMode = "multiply" | "zero";
/**
 * Bit order of a packed mask: "big" (numpy's `packbits` default: element 0 in the most significant bit) or "little".
 */
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
  /** What numpy's arithmetic makes of a NaN: its bits OR `quiet` (F16/F32: x86 quiets it), or ... */
  readonly quiet?: number;
  /** ... this NaN with the input's sign (ml_dtypes converts every float32 NaN to it). */
  readonly canonicalNan?: number;
}

const FLOATS: Partial<Record<Dtype, FloatBits>> = {
  F16: {
    sign: 0x8000,
    exponent: 0x7c00,
    mantissa: 0x03ff,
    ieee: true,
    defaultNan: 0xfe00,
    unsignedZero: false,
    quiet: 0x0200,
  },
  BF16: {
    sign: 0x8000,
    exponent: 0x7f80,
    mantissa: 0x007f,
    ieee: true,
    defaultNan: 0xffc0,
    unsignedZero: false,
    canonicalNan: 0x7fc0,
  },
  F32: {
    sign: 0x80000000,
    exponent: 0x7f800000,
    mantissa: 0x007fffff,
    ieee: true,
    defaultNan: 0xffc00000,
    unsignedZero: false,
    quiet: 0x00400000,
  },
  F8_E5M2: {
    sign: 0x80,
    exponent: 0x7c,
    mantissa: 0x03,
    ieee: true,
    defaultNan: 0xfe,
    unsignedZero: false,
    canonicalNan: 0x7e,
  },
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

/** A NaN as numpy's arithmetic returns it (see FloatBits). */
function nanOut(word: number, f: FloatBits): number {
  if (f.quiet !== undefined) return (word | f.quiet) >>> 0;
  if (f.canonicalNan !== undefined) return ((word & f.sign) | f.canonicalNan) >>> 0;
  return word;
}

/** word × 0. */
function multiplyWord(word: number, f: FloatBits): number {
  const magnitude = word & ~f.sign & (f.exponent | f.mantissa);
  const exponentAllOnes = (word & f.exponent) === f.exponent;
  if (f.unsignedZero) return word === f.sign ? word : 0; // the lone NaN stays, everything else is +0
  if (f.ieee && exponentAllOnes) return (word & f.mantissa) === 0 ? f.defaultNan : nanOut(word, f); // inf × 0, NaN × 0
  if (!f.ieee && magnitude === (f.exponent | f.mantissa)) return word; // E4M3FN's NaN
  return (word & f.sign) >>> 0;
}

/** word × 1: itself, but a NaN as numpy's arithmetic returns it. */
function keepWord(word: number, f: FloatBits): number {
  if (!f.ieee || (word & f.exponent) !== f.exponent || (word & f.mantissa) === 0) return word;
  return nanOut(word, f);
}

const F32_DEFAULT_NAN = 0xffc00000;
const isNan32 = (x: number) => (x & 0x7fffffff) > 0x7f800000;
const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** float32 x × k (k = 1 or +0) with x86's NaN rules, as bits. */
function mul32(x: number, k: number): number {
  if (isNan32(x)) return (x | 0x00400000) >>> 0;
  if (k === 1) return x;
  if ((x & 0x7fffffff) === 0x7f800000) return F32_DEFAULT_NAN;
  return (x & 0x80000000) >>> 0;
}

/** float32 x + y (or x - y) with x86's NaN rules (the first NaN operand, quieted), as bits. */
function add32(x: number, y: number, subtract: boolean): number {
  if (isNan32(x)) return (x | 0x00400000) >>> 0;
  if (isNan32(y)) return (y | 0x00400000) >>> 0;
  u32Scratch[0] = x;
  const a = f32Scratch[0]!;
  u32Scratch[0] = y;
  const b = f32Scratch[0]!;
  const sum = subtract ? a - b : a + b;
  if (Number.isNaN(sum)) return F32_DEFAULT_NAN; // inf - inf
  f32Scratch[0] = sum; // exact: one operand is a zero or both are the same infinity
  return u32Scratch[0]!;
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
  const float = FLOATS[dtype];
  if (mode === "zero" || (float === undefined && dtype !== "F64" && dtype !== "C64")) {
    if (masked === 0) return 0;
    for (let i = 0; i < count; i++) if (keep[i] === 0) bytes.fill(0, i * width, (i + 1) * width);
    return masked;
  }
  // "multiply" also rewrites kept NaNs (and C64's kept signed zeros) as numpy's arithmetic does.
  if (dtype === "F64") {
    // Two words per element, the high word (sign, exponent, top of the mantissa) second.
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count * 2);
    for (let i = 0; i < count; i++) {
      const hi = words[2 * i + 1]!;
      const lo = words[2 * i]!;
      if ((hi & 0x7ff00000) === 0x7ff00000) {
        if ((hi & 0x000fffff) === 0 && lo === 0) {
          if (keep[i] !== 0) continue;
          words[2 * i + 1] = 0xfff80000; // inf × 0: x86's default NaN
          words[2 * i] = 0;
        } else words[2 * i + 1] = (hi | 0x00080000) >>> 0; // NaN × k: the same NaN, quieted
        continue;
      }
      if (keep[i] !== 0) continue;
      words[2 * i + 1] = (hi & 0x80000000) >>> 0;
      words[2 * i] = 0;
    }
    return masked;
  }
  if (dtype === "C64") {
    // (a + bi)(k + 0i) = (a·k - b·0) + (a·0 + b·k)i, each operation in float32 as numpy's loop does it.
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count * 2);
    for (let i = 0; i < count; i++) {
      const a = words[2 * i]!;
      const b = words[2 * i + 1]!;
      const k = keep[i] === 0 ? 0 : 1;
      words[2 * i] = add32(mul32(a, k), mul32(b, 0), true);
      words[2 * i + 1] = add32(mul32(a, 0), mul32(b, k), false);
    }
    return masked;
  }
  const f = float!;
  if (width === 1) {
    for (let i = 0; i < count; i++) bytes[i] = keep[i] === 0 ? multiplyWord(bytes[i]!, f) : keepWord(bytes[i]!, f);
  } else if (width === 2) {
    const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, count);
    for (let i = 0; i < count; i++) {
      halves[i] = keep[i] === 0 ? multiplyWord(halves[i]!, f) : keepWord(halves[i]!, f);
    }
  } else {
    const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count);
    for (let i = 0; i < count; i++) {
      words[i] = keep[i] === 0 ? multiplyWord(words[i]!, f) : keepWord(words[i]!, f);
    }
  }
  return masked;
}
