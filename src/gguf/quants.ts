/**
 * Block quantizers and dequantizers for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1, bit-exact with gguf-py's reference
 * (`gguf.quants.quantize` / `dequantize`, which llama.cpp's converter uses): its float32 arithmetic step by step
 * (`Math.fround` after every operation, which is exact emulation for +, -, *, / of float32 operands), its rounding
 * (`np_roundf`: half away from zero for Q8_0; `trunc(x + 8.5)`-style for the 4- and 5-bit types), its choice of
 * the first largest magnitude in a block, and its float32 -> float16 scale conversion (round to nearest even).
 *
 * Pure: typed arrays in, typed arrays out. One block is 32 values.
 */
import { f16ToF32Bits, f32BitsToF16 } from "../codecs/half.js";
import { QUANT_TYPES, type QuantTypeName } from "./constants.js";
import type { GgmlTypeName } from "./types.js";

export const QK = 32;

export { QUANT_TYPES, type QuantTypeName };

export function isQuantType(name: string): name is QuantTypeName {
  return (QUANT_TYPES as readonly string[]).includes(name);
}

const BLOCK_BYTES: Record<QuantTypeName, number> = { Q8_0: 34, Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24 };

export function blockBytes(type: QuantTypeName): number {
  return BLOCK_BYTES[type];
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function toF16(x: number): number {
  f32[0] = x;
  return f32BitsToF16(u32[0]!);
}

function fromF16(h: number): number {
  u32[0] = f16ToF32Bits(h);
  return f32[0]!;
}

const fr = Math.fround;

function quantizeQ8_0(src: Float32Array, out: Uint8Array): void {
  const blocks = src.length / QK;
  const q = new Int8Array(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < blocks; b++) {
    const base = b * QK;
    let amax = 0;
    for (let i = 0; i < QK; i++) {
      const a = Math.abs(src[base + i]!);
      if (a > amax) amax = a;
    }
    q8Block(src, base, amax, out, q, b * 34);
  }
}

/**
 * One Q8_0 block: scale `amax / 127` and values rounded as gguf-py's np_roundf (half away from zero). np_roundf's
 * floor(|v|) + floor(2 * frac(|v|)) is floor(|v| + 0.5) exactly: |v| + 0.5 is exact in float64 for |v| < 2^52.
 */
function q8Block(src: Float32Array, base: number, amax: number, out: Uint8Array, q: Int8Array, o: number): void {
  const d = fr(amax / 127);
  const id = d === 0 ? 0 : fr(1 / d);
  const h = toF16(d);
  out[o] = h & 0xff;
  out[o + 1] = h >>> 8;
  for (let i = 0; i < QK; i++) {
    const v = fr(src[base + i]! * id);
    q[o + 2 + i] = v < 0 ? -Math.floor(0.5 - v) : Math.floor(v + 0.5);
  }
}

let f16Values: Float32Array | undefined;

/** float32 values of every F16 code (256 KiB, built on first use). */
function f16Table(): Float32Array {
  if (f16Values === undefined) {
    const bits = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) bits[h] = f16ToF32Bits(h);
    f16Values = new Float32Array(bits.buffer);
  }
  return f16Values;
}

/**
 * Q8_0 straight from F16 codes (the common checkpoint dtype): each block decoded into a 32-value buffer through a
 * table and quantized, with no float32 copy of the whole chunk. Same bytes as decode + `quantize`.
 */
export function quantizeQ8_0FromF16(codes: Uint16Array, out: Uint8Array): void {
  const table = f16Table();
  const blocks = codes.length / QK;
  const buf = new Float32Array(QK);
  const q = new Int8Array(out.buffer, out.byteOffset, out.byteLength);
  for (let b = 0; b < blocks; b++) {
    const base = b * QK;
    let amax = 0;
    for (let i = 0; i < QK; i++) {
      const v = table[codes[base + i]!]!;
      buf[i] = v;
      const a = Math.abs(v);
      if (a > amax) amax = a;
    }
    q8Block(buf, 0, amax, out, q, b * 34);
  }
}

/** Index of the first element of largest magnitude in block [base, base + 32) (numpy's argmax of abs). */
function argmaxAbs(src: Float32Array, base: number): number {
  let best = base;
  let amax = Math.abs(src[base]!);
  for (let i = base + 1; i < base + QK; i++) {
    const a = Math.abs(src[i]!);
    if (a > amax) {
      amax = a;
      best = i;
    }
  }
  return best;
}

function clampByte(x: number, hi: number): number {
  // numpy: trunc(...).astype(uint8).clip(0, hi); the values here are in [0, 2 * hi], never negative.
  return Math.max(0, Math.min(hi, Math.trunc(x)));
}

function quantizeSymmetric(src: Float32Array, out: Uint8Array, bits: 4 | 5): void {
  const blocks = src.length / QK;
  const levels = bits === 4 ? -8 : -16;
  const offset = bits === 4 ? 8.5 : 16.5;
  const hi = bits === 4 ? 15 : 31;
  const size = bits === 4 ? 18 : 22;
  const q = new Uint8Array(QK);
  for (let b = 0; b < blocks; b++) {
    const base = b * QK;
    const max = src[argmaxAbs(src, base)]!;
    const d = fr(max / levels);
    const id = d === 0 ? 0 : fr(1 / d);
    for (let i = 0; i < QK; i++) q[i] = clampByte(fr(fr(src[base + i]! * id) + offset), hi);
    const o = b * size;
    const h = toF16(d);
    out[o] = h & 0xff;
    out[o + 1] = h >>> 8;
    packNibbles(q, out, bits === 4 ? o + 2 : o + 6, bits === 5 ? o + 2 : -1);
  }
}

function quantizeAffine(src: Float32Array, out: Uint8Array, bits: 4 | 5): void {
  const blocks = src.length / QK;
  const hi = bits === 4 ? 15 : 31;
  const size = bits === 4 ? 20 : 24;
  const q = new Uint8Array(QK);
  for (let b = 0; b < blocks; b++) {
    const base = b * QK;
    let max = src[base]!;
    let min = max;
    for (let i = 1; i < QK; i++) {
      const v = src[base + i]!;
      if (v > max) max = v;
      if (v < min) min = v;
    }
    const d = fr(fr(max - min) / hi);
    const id = d === 0 ? 0 : fr(1 / d);
    for (let i = 0; i < QK; i++) q[i] = clampByte(fr(fr(fr(src[base + i]! - min) * id) + 0.5), hi);
    const o = b * size;
    const hd = toF16(d);
    const hm = toF16(min);
    out[o] = hd & 0xff;
    out[o + 1] = hd >>> 8;
    out[o + 2] = hm & 0xff;
    out[o + 3] = hm >>> 8;
    packNibbles(q, out, bits === 4 ? o + 4 : o + 8, bits === 5 ? o + 4 : -1);
  }
}

/** Low nibbles of q[0..16) and q[16..32) into 16 bytes at `at`; with `highAt` >= 0 the fifth bits into 4 bytes there. */
function packNibbles(q: Uint8Array, out: Uint8Array, at: number, highAt: number): void {
  for (let j = 0; j < 16; j++) out[at + j] = (q[j]! & 0x0f) | ((q[j + 16]! << 4) & 0xff);
  if (highAt >= 0) {
    for (let k = 0; k < 4; k++) {
      let byte = 0;
      for (let bit = 0; bit < 8; bit++) byte |= ((q[k * 8 + bit]! >>> 4) & 1) << bit;
      out[highAt + k] = byte;
    }
  }
}

/**
 * Quantize `src` (a whole number of 32-value blocks, in row order) into `out`, which must hold
 * `src.length / 32 * blockBytes(type)` bytes.
 */
export function quantize(type: QuantTypeName, src: Float32Array, out: Uint8Array): void {
  if (src.length % QK !== 0) throw new RangeError(`${src.length} values is not a whole number of ${QK}-value blocks`);
  if (out.length < (src.length / QK) * BLOCK_BYTES[type]) throw new RangeError("output too small");
  if (type === "Q8_0") quantizeQ8_0(src, out);
  else if (type === "Q4_0" || type === "Q5_0") quantizeSymmetric(src, out, type === "Q4_0" ? 4 : 5);
  else quantizeAffine(src, out, type === "Q4_1" ? 4 : 5);
}

/** Dequantize whole blocks of `src` into float32 values, as gguf-py's `dequantize` computes them. */
export function dequantize(type: QuantTypeName, src: Uint8Array, out: Float32Array): void {
  const size = BLOCK_BYTES[type];
  const blocks = Math.floor(src.length / size);
  if (out.length < blocks * QK) throw new RangeError("output too small");
  for (let b = 0; b < blocks; b++) {
    const o = b * size;
    const base = b * QK;
    const d = fromF16(src[o]! | (src[o + 1]! << 8));
    if (type === "Q8_0") {
      for (let i = 0; i < QK; i++) out[base + i] = fr(d * ((src[o + 2 + i]! << 24) >> 24));
      continue;
    }
    const affine = type === "Q4_1" || type === "Q5_1";
    const m = affine ? fromF16(src[o + 2]! | (src[o + 3]! << 8)) : 0;
    const five = type === "Q5_0" || type === "Q5_1";
    const qhAt = o + (affine ? 4 : 2);
    const qsAt = qhAt + (five ? 4 : 0);
    const qh = five ? (src[qhAt]! | (src[qhAt + 1]! << 8) | (src[qhAt + 2]! << 16) | (src[qhAt + 3]! << 24)) >>> 0 : 0;
    for (let i = 0; i < QK; i++) {
      const byte = src[qsAt + (i & 15)]!;
      let q = i < 16 ? byte & 0x0f : byte >>> 4;
      if (five) q |= ((qh >>> i) & 1) << 4;
      out[base + i] = affine ? fr(fr(d * q) + m) : fr(d * (q - (five ? 16 : 8)));
    }
  }
}

/** Whether a row of `rowLength` values can be stored as `type` (whole blocks). */
export function fitsBlocks(type: GgmlTypeName, rowLength: number): boolean {
  return !isQuantType(type) || rowLength % QK === 0;
}
