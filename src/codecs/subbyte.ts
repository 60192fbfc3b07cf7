/**
 * The packed sub-byte formats F4 (float4_e2m1fn) and F6_E2M3 / F6_E3M2 (float6_e2m3fn / float6_e3m2fn), from the
 * OCP Microscaling (MX) spec. None has inf or NaN; all have a negative zero.
 *
 * Packing (bit order inside the stored bytes):
 *
 * - F4, two elements per byte: element 2k is the LOW nibble of byte k, element 2k+1 the HIGH nibble. This is torch's
 *   `float4_e2m1fn_x2` layout ("val1 : val0" = bits 7654 : 3210, c10/util/Float4_e2m1fn_x2.h), and safetensors
 *   stores such a tensor's bytes verbatim with the last dimension doubled, so it is what F4 files contain. An odd
 *   element count leaves the high nibble of the last byte unused (written as 0).
 *
 * - F6, four elements per three bytes: a little-endian bit stream. Element i occupies bits [6i, 6i + 6) of the
 *   stream, where stream bit b is bit (b mod 8) of byte floor(b / 8), and each element's own bits keep their order
 *   (its least significant bit first). So for one group of 3 bytes b0 b1 b2 and elements e0..e3:
 *     b0 = e0 | (e1 & 0x03) << 6
 *     b1 = e1 >> 2 | (e2 & 0x0F) << 4
 *     b2 = e2 >> 4 | e3 << 2
 *   which is the same rule as F4's (low bits first) applied to 6-bit elements. The safetensors reference defines F6
 *   only as 6 bits per element and neither torch nor ml_dtypes has a packed F6 type (ml_dtypes stores one element
 *   per byte), so no ecosystem convention exists to follow. Unused trailing bits are written as 0.
 *
 * Values (the element code is S|E|M from the most significant bit):
 * - F4 E2M1, bias 1: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
 * - F6 E2M3, bias 1: ±{0, 0.125, ..., 7.5} (max 7.5).
 * - F6 E3M2, bias 3: ±{0, 0.0625, ..., 28} (max 28).
 *
 * Encoding from float32 matches ml_dtypes' `astype` (torch cannot convert to float4_e2m1fn_x2, and has no F6):
 * round-to-nearest-even from the exact float32 with subnormals; overflow and ±inf saturate to the signed maximum;
 * -0 and negative values that round to zero give -0; NaN gives ZERO WITH THE OPPOSITE SIGN BIT (+NaN -> -0 code,
 * -NaN -> +0 code), which is what ml_dtypes 0.6 does.
 */
import { miniToF32Bits, roundMagnitude } from "./common.js";

/** The packed float dtypes narrower than a byte: F4 (two per byte) and the two F6 (four per three bytes). */
export type SubByteDtype = "F4" | "F6_E2M3" | "F6_E3M2";

interface SubByteSpec {
  readonly bits: 4 | 6;
  readonly mbits: number;
  readonly bias: number;
  readonly signBit: number;
  readonly maxMag: number;
}

const SPECS: Record<SubByteDtype, SubByteSpec> = {
  F4: { bits: 4, mbits: 1, bias: 1, signBit: 0x8, maxMag: 0x7 },
  F6_E2M3: { bits: 6, mbits: 3, bias: 1, signBit: 0x20, maxMag: 0x1f },
  F6_E3M2: { bits: 6, mbits: 2, bias: 3, signBit: 0x20, maxMag: 0x1f },
};

export function subByteBits(dtype: SubByteDtype): 4 | 6 {
  return SPECS[dtype].bits;
}

/** The element code (4 or 6 bits) of float32 bits `x`, as ml_dtypes encodes it. */
export function f32BitsToSubByte(dtype: SubByteDtype, x: number): number {
  const { mbits, bias, signBit, maxMag } = SPECS[dtype];
  return encodeOne(x, mbits, bias, signBit, maxMag);
}

function encodeOne(x: number, mbits: number, bias: number, signBit: number, maxMag: number): number {
  const sign = x >>> 31 === 1 ? signBit : 0;
  const abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign ^ signBit;
  return sign | Math.min(roundMagnitude(abs, mbits, bias), maxMag);
}

/** float32 bits of an element code. */
export function subByteToF32Bits(dtype: SubByteDtype, code: number): number {
  const { mbits, bias, signBit } = SPECS[dtype];
  return miniToF32Bits(code, signBit, mbits, bias);
}

const tables = new Map<SubByteDtype, Uint32Array>();

function decodeTable(dtype: SubByteDtype): Uint32Array {
  let table = tables.get(dtype);
  if (table === undefined) {
    const n = 1 << SPECS[dtype].bits;
    table = new Uint32Array(n);
    for (let c = 0; c < n; c++) table[c] = subByteToF32Bits(dtype, c);
    tables.set(dtype, table);
  }
  return table;
}

/** Decode `count` packed elements of `bytes` into `o` (float32 bits). The caller checked the byte length. */
export function decodeSubByte(dtype: SubByteDtype, bytes: Uint8Array, count: number, o: Uint32Array): void {
  const table = decodeTable(dtype);
  if (SPECS[dtype].bits === 4) {
    const pairs = count >>> 1;
    for (let k = 0, i = 0; k < pairs; k++, i += 2) {
      const b = bytes[k]!;
      o[i] = table[b & 0x0f]!;
      o[i + 1] = table[b >>> 4]!;
    }
    if (count & 1) o[count - 1] = table[bytes[pairs]! & 0x0f]!;
    return;
  }
  const groups = Math.floor(count / 4);
  let i = 0;
  let j = 0;
  for (let g = 0; g < groups; g++, i += 4, j += 3) {
    const v = bytes[j]! | (bytes[j + 1]! << 8) | (bytes[j + 2]! << 16);
    o[i] = table[v & 0x3f]!;
    o[i + 1] = table[(v >>> 6) & 0x3f]!;
    o[i + 2] = table[(v >>> 12) & 0x3f]!;
    o[i + 3] = table[v >>> 18]!;
  }
  if (i < count) {
    // 1-3 trailing elements in the last 1-3 bytes.
    let v = 0;
    for (let k = 0; j + k < bytes.length && k < 3; k++) v |= bytes[j + k]! << (8 * k);
    for (let shift = 0; i < count; i++, shift += 6) o[i] = table[(v >>> shift) & 0x3f]!;
  }
}

/** Encode float32 bit patterns into packed bytes in `out` (exactly the packed length, zero-filled by the caller). */
export function encodeSubByte(dtype: SubByteDtype, bits: Uint32Array, out: Uint8Array): void {
  const { mbits, bias, signBit, maxMag } = SPECS[dtype];
  const n = bits.length;
  if (SPECS[dtype].bits === 4) {
    const pairs = n >>> 1;
    for (let k = 0, i = 0; k < pairs; k++, i += 2) {
      out[k] =
        encodeOne(bits[i]!, mbits, bias, signBit, maxMag) |
        (encodeOne(bits[i + 1]!, mbits, bias, signBit, maxMag) << 4);
    }
    if (n & 1) out[pairs] = encodeOne(bits[n - 1]!, mbits, bias, signBit, maxMag);
    return;
  }
  for (let i = 0; i < n; i++) {
    const code = encodeOne(bits[i]!, mbits, bias, signBit, maxMag);
    const bit = i * 6;
    const k = bit >>> 3;
    const shift = bit & 7;
    out[k]! |= (code << shift) & 0xff;
    if (shift > 2) out[k + 1]! |= code >>> (8 - shift);
  }
}
