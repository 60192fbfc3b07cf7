/**
 * F16 (IEEE binary16) and BF16 (bfloat16), matching torch's CPU conversions bit for bit.
 *
 * Decoding (to float32) is exact for every finite value and infinity. NaN bits:
 * - F16: sign and payload kept, quiet bit set (F16C's vcvtph2ps, which torch uses): 0x7C01 -> 0x7FC02000. On the
 *   native `Float16Array` path (engines that have it) the engine converts, and only NaN-ness and sign are promised.
 * - BF16: the bits are shifted up unchanged (signaling NaNs stay signaling): 0x7F81 -> 0x7F810000.
 *
 * Encoding (from float32), round-to-nearest-even:
 * - F16: overflow (|x| >= 65520) -> ±inf; subnormals kept; NaN -> sign | 0x7E00 | (float32 mantissa >> 13), i.e.
 *   sign and the top 10 payload bits kept, quiet bit forced (as vcvtps2ph does).
 * - BF16: overflow -> ±inf (RNE carries into the exponent); every NaN -> 0xFFFF, whatever its sign and payload.
 *   That is torch's vectorized CPU kernel (AVX2 and AVX-512 builds, every tensor with at least one dimension,
 *   whatever its length). torch is not consistent here: its scalar path (0-dim tensors, ATEN_CPU_CAPABILITY=default)
 *   gives 0x7FC0 instead. Only this one rule differs between those paths; everything else in these tables is the same
 *   under AVX-512, AVX2 and the scalar path.
 */
import { LITTLE_ENDIAN, roundMagnitude, runAligned, u32View } from "./common.js";

/** float32 bits of an F16 code, as torch decodes it. */
export function f16ToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant === 0 ? 0 : 0x400000 | (mant << 13))) >>> 0;
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0;
  if (mant === 0) return sign >>> 0;
  // Subnormal: mant * 2^-24, renormalized.
  const top = 31 - Math.clz32(mant); // 0..9
  return (sign | ((top + 103) << 23) | ((mant << (23 - top)) & 0x7fffff)) >>> 0;
}

/** F16 code of float32 bits `x`, as torch encodes it. */
export function f32BitsToF16(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00 | ((abs >>> 13) & 0x3ff);
  if (abs >= 0x477ff000) return sign | 0x7c00; // >= 65520 (the tie above the largest finite 65504), and inf
  if (abs >= 0x38800000) {
    // Normal in F16: rebias and round the 13 dropped bits to nearest even.
    const r = abs - 0x38000000;
    return sign | ((r + 0xfff + ((r >>> 13) & 1)) >>> 13);
  }
  return sign | roundMagnitude(abs, 10, 15);
}

/** BF16 code of float32 bits `x`, as torch encodes it. */
export function f32BitsToBf16(x: number): number {
  if ((x & 0x7fffffff) > 0x7f800000) return 0xffff;
  return (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
}

let f16Table: Uint32Array | undefined;

/** The 64K-entry F16 -> float32 bits table, built on first use (256 KiB). */
function f16DecodeTable(): Uint32Array {
  if (f16Table === undefined) {
    const table = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) table[h] = f16ToF32Bits(h);
    f16Table = table;
  }
  return f16Table;
}

type Float16ArrayCtor = new (buffer: ArrayBufferLike, byteOffset: number, length: number) => ArrayLike<number>;

function nativeFloat16Array(): Float16ArrayCtor | undefined {
  return (globalThis as { Float16Array?: Float16ArrayCtor }).Float16Array;
}

/**
 * Decode `count` F16 values from `bytes` into `out`: the engine's Float16Array when it has one (and `native` is not
 * false), else the lookup table, two elements per 32-bit load.
 */
export function decodeF16(bytes: Uint8Array, count: number, out: Float32Array, native = true): void {
  const Native = native ? nativeFloat16Array() : undefined;
  if (!LITTLE_ENDIAN) {
    const table = f16DecodeTable();
    const o = u32View(out);
    for (let i = 0, j = 0; i < count; i++, j += 2) o[i] = table[bytes[j]! | (bytes[j + 1]! << 8)]!;
    return;
  }
  if (Native !== undefined) {
    runAligned(bytes, count, 2, (src, n, first) => {
      out.set(new Native(src.buffer, src.byteOffset, n), first);
    });
    return;
  }
  const table = f16DecodeTable();
  const o = u32View(out);
  runAligned(bytes, count, 2, (src, n, first) => {
    const pairs = n >>> 1;
    const words = new Uint32Array(src.buffer, src.byteOffset, pairs);
    for (let i = 0, j = first; i < pairs; i++, j += 2) {
      const w = words[i]!;
      o[j] = table[w & 0xffff]!;
      o[j + 1] = table[w >>> 16]!;
    }
    if (n & 1) o[first + n - 1] = table[src[2 * n - 2]! | (src[2 * n - 1]! << 8)]!;
  });
}

/** Decode `count` BF16 values from `bytes` into `out`: each is the top half of a float32. */
export function decodeBf16(bytes: Uint8Array, count: number, out: Float32Array): void {
  const o = u32View(out);
  if (!LITTLE_ENDIAN) {
    for (let i = 0, j = 0; i < count; i++, j += 2) o[i] = (bytes[j]! << 16) | (bytes[j + 1]! << 24);
    return;
  }
  runAligned(bytes, count, 2, (src, n, first) => {
    const pairs = n >>> 1;
    const words = new Uint32Array(src.buffer, src.byteOffset, pairs);
    for (let i = 0, j = first; i < pairs; i++, j += 2) {
      const w = words[i]!;
      o[j] = w << 16;
      o[j + 1] = w & 0xffff0000;
    }
    if (n & 1) o[first + n - 1] = (src[2 * n - 2]! << 16) | (src[2 * n - 1]! << 24);
  });
}

/** Encode float32 bit patterns to little-endian F16 codes in `out` (2 bytes each). */
export function encodeF16(bits: Uint32Array, out: Uint8Array): void {
  const n = bits.length;
  if (LITTLE_ENDIAN && out.byteOffset % 2 === 0) {
    const words = new Uint16Array(out.buffer, out.byteOffset, n);
    for (let i = 0; i < n; i++) words[i] = f32BitsToF16(bits[i]!);
  } else {
    for (let i = 0, j = 0; i < n; i++, j += 2) {
      const code = f32BitsToF16(bits[i]!);
      out[j] = code & 0xff;
      out[j + 1] = code >>> 8;
    }
  }
}

/** Encode float32 bit patterns to little-endian BF16 codes in `out` (2 bytes each). */
export function encodeBf16(bits: Uint32Array, out: Uint8Array): void {
  const n = bits.length;
  if (LITTLE_ENDIAN && out.byteOffset % 2 === 0) {
    const words = new Uint16Array(out.buffer, out.byteOffset, n);
    for (let i = 0; i < n; i++) words[i] = f32BitsToBf16(bits[i]!);
  } else {
    for (let i = 0, j = 0; i < n; i++, j += 2) {
      const code = f32BitsToBf16(bits[i]!);
      out[j] = code & 0xff;
      out[j + 1] = code >>> 8;
    }
  }
}
