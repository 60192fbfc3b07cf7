/**
 * The five 8-bit float formats, matching torch's CPU conversions (`tensor.to(dtype)`) bit for bit.
 *
 * | dtype        | torch               | bias | max     | inf       | NaN codes          | -0 |
 * |--------------|---------------------|------|---------|-----------|--------------------|----|
 * | F8_E4M3      | float8_e4m3fn       | 7    | 448     | none      | 0x7F, 0xFF         | yes|
 * | F8_E5M2      | float8_e5m2         | 15   | 57344   | 0x7C/0xFC | 0x7D-0x7F, 0xFD-FF | yes|
 * | F8_E4M3FNUZ  | float8_e4m3fnuz     | 8    | 240     | none      | 0x80 only          | no |
 * | F8_E5M2FNUZ  | float8_e5m2fnuz     | 16   | 57344   | none      | 0x80 only          | no |
 * | F8_E8M0      | float8_e8m0fnu      | 127  | 2^127   | none      | 0xFF               | no (unsigned) |
 *
 * Encoding from float32 (all round-to-nearest-even from the exact float32, subnormals kept, except E8M0):
 * - F8_E4M3: overflow saturates to ±448, and so does ±inf; NaN -> 0x7F with the input's sign (0x7F / 0xFF).
 * - F8_E5M2: overflow (|x| >= 61440) -> ±inf; NaN -> 0x7F with the input's sign.
 * - F8_E4M3FNUZ / F8_E5M2FNUZ: overflow (|x| >= 248 / 61440), ±inf and every NaN -> 0x80 (the only NaN); results
 *   that are zero are +0 (0x00) whatever the input's sign.
 * - F8_E8M0 (a bare exponent, 2^(code-127)): the sign is ignored; inf and NaN -> 0xFF. Otherwise the result is the
 *   float32's exponent field, plus one when its mantissa fraction is 0.5 or more: the threshold between 2^e and
 *   2^(e+1) is the arithmetic midpoint 1.5 * 2^e and ties go up, not to even (torch's guard/round/sticky rule). A
 *   carry out of 254 gives 0xFF (NaN), so values from 1.5 * 2^127 up are NaN. Float32 subnormals (exponent field 0):
 *   ±0 and everything up to 2^-127 give 0x00 (which decodes to 2^-127), larger ones 0x01.
 *
 * Decoding to float32 is exact for finite values. NaN and special codes decode to these exact float32 bits (what
 * torch produces): F8_E4M3 NaN -> sign | 0x7FF00000; F8_E5M2 decodes as the F16 code `c << 8` (NaN quieted, payload
 * kept: 0x7D -> 0x7FE00000, 0x7E -> 0x7FC00000, 0x7F -> 0x7FE00000); FNUZ 0x80 -> 0x7F800001; F8_E8M0 0xFF ->
 * 0x7F800001 and 0x00 -> 0x00400000 (2^-127, a float32 subnormal).
 */
import { LITTLE_ENDIAN, miniToF32Bits, roundMagnitude, runAligned } from "./common.js";
import { f16ToF32Bits } from "./half.js";

/** The five 8-bit float dtypes. */
export type Float8Dtype = "F8_E4M3" | "F8_E5M2" | "F8_E4M3FNUZ" | "F8_E5M2FNUZ" | "F8_E8M0";

export function e4m3fnToF32Bits(c: number): number {
  if ((c & 0x7f) === 0x7f) return c & 0x80 ? 0xfff00000 : 0x7ff00000;
  return miniToF32Bits(c, 0x80, 3, 7);
}

export function e5m2ToF32Bits(c: number): number {
  return f16ToF32Bits(c << 8);
}

export function e4m3fnuzToF32Bits(c: number): number {
  return c === 0x80 ? 0x7f800001 : miniToF32Bits(c, 0x80, 3, 8);
}

export function e5m2fnuzToF32Bits(c: number): number {
  return c === 0x80 ? 0x7f800001 : miniToF32Bits(c, 0x80, 2, 16);
}

export function e8m0ToF32Bits(c: number): number {
  if (c === 0) return 0x00400000;
  if (c === 0xff) return 0x7f800001;
  return c << 23;
}

export function f32BitsToE4m3fn(x: number): number {
  const sign = (x >>> 24) & 0x80;
  const abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7f;
  const m = roundMagnitude(abs, 3, 7);
  return sign | Math.min(m, 0x7e);
}

export function f32BitsToE5m2(x: number): number {
  const sign = (x >>> 24) & 0x80;
  const abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7f;
  const m = roundMagnitude(abs, 2, 15);
  return sign | Math.min(m, 0x7c);
}

function fnuz(x: number, mbits: number, bias: number): number {
  const abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return 0x80;
  const m = roundMagnitude(abs, mbits, bias);
  if (m > 0x7f) return 0x80;
  return m === 0 ? 0 : ((x >>> 24) & 0x80) | m;
}

export function f32BitsToE4m3fnuz(x: number): number {
  return fnuz(x, 3, 8);
}

export function f32BitsToE5m2fnuz(x: number): number {
  return fnuz(x, 2, 16);
}

export function f32BitsToE8m0(x: number): number {
  let exp = (x >>> 23) & 0xff;
  if (exp === 0xff) return 0xff;
  const mant = x & 0x7fffff;
  // Guard = mantissa bit 22 (0.5); round up above one half, or at exactly one half unless the exponent field is 0.
  if (mant & 0x400000 && (mant & 0x3fffff || exp > 0)) exp++;
  return exp;
}

const DECODERS: Record<Float8Dtype, (c: number) => number> = {
  F8_E4M3: e4m3fnToF32Bits,
  F8_E5M2: e5m2ToF32Bits,
  F8_E4M3FNUZ: e4m3fnuzToF32Bits,
  F8_E5M2FNUZ: e5m2fnuzToF32Bits,
  F8_E8M0: e8m0ToF32Bits,
};

const tables = new Map<Float8Dtype, Uint32Array>();

/** The 256-entry code -> float32 bits table of an 8-bit format, built on first use. */
export function float8DecodeTable(dtype: Float8Dtype): Uint32Array {
  let table = tables.get(dtype);
  if (table === undefined) {
    const decodeOne = DECODERS[dtype];
    table = new Uint32Array(256);
    for (let c = 0; c < 256; c++) table[c] = decodeOne(c);
    tables.set(dtype, table);
  }
  return table;
}

/** Decode `count` codes of an 8-bit format into `o` (float32 bits), four per 32-bit load when possible. */
export function decodeFloat8(dtype: Float8Dtype, bytes: Uint8Array, count: number, o: Uint32Array): void {
  const table = float8DecodeTable(dtype);
  if (!LITTLE_ENDIAN || count < 64) {
    for (let i = 0; i < count; i++) o[i] = table[bytes[i]!]!;
    return;
  }
  runAligned(bytes, count, 1, (src, n, first) => {
    const quads = n >>> 2;
    const words = new Uint32Array(src.buffer, src.byteOffset, quads);
    for (let i = 0, j = first; i < quads; i++, j += 4) {
      const w = words[i]!;
      o[j] = table[w & 0xff]!;
      o[j + 1] = table[(w >>> 8) & 0xff]!;
      o[j + 2] = table[(w >>> 16) & 0xff]!;
      o[j + 3] = table[w >>> 24]!;
    }
    for (let k = quads * 4; k < n; k++) o[first + k] = table[src[k]!]!;
  });
}

/** Encode float32 bit patterns to codes of an 8-bit format in `out`. */
export function encodeFloat8(dtype: Float8Dtype, bits: Uint32Array, out: Uint8Array): void {
  const n = bits.length;
  switch (dtype) {
    case "F8_E4M3":
      for (let i = 0; i < n; i++) out[i] = f32BitsToE4m3fn(bits[i]!);
      return;
    case "F8_E5M2":
      for (let i = 0; i < n; i++) out[i] = f32BitsToE5m2(bits[i]!);
      return;
    case "F8_E4M3FNUZ":
      for (let i = 0; i < n; i++) out[i] = f32BitsToE4m3fnuz(bits[i]!);
      return;
    case "F8_E5M2FNUZ":
      for (let i = 0; i < n; i++) out[i] = f32BitsToE5m2fnuz(bits[i]!);
      return;
    case "F8_E8M0":
      for (let i = 0; i < n; i++) out[i] = f32BitsToE8m0(bits[i]!);
      return;
  }
}
