/**
 * Shared pieces of the codecs: float32 bit access, the generic round-to-nearest-even step every small float format
 * uses, and byte-order/alignment helpers. Pure code: no `node:` imports.
 */

/** True on little-endian hosts, where a Uint16Array/Uint32Array view reads the file's little-endian storage. */
export const LITTLE_ENDIAN: boolean = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** float32 bits (as an unsigned 32-bit number) of `value` rounded to float32. */
export function f32ToBits(value: number): number {
  scratchF32[0] = value;
  return scratchU32[0]!;
}

/** The float32 value whose bits are `bits`. */
export function bitsToF32(bits: number): number {
  scratchU32[0] = bits;
  return scratchF32[0]!;
}

/**
 * Round a finite, non-negative float32 (given as its bits, sign bit clear) to a binary float format with `mbits`
 * mantissa bits and exponent bias `bias`, round-to-nearest-even, with gradual underflow (subnormals) and no upper
 * bound. Returns the magnitude code `(biasedExponent << mbits) | mantissa`; a code above the format's largest finite
 * code means the value overflowed, and each caller applies its format's overflow rule.
 *
 * One rounding step from the exact float32 value, so there is no double rounding anywhere.
 */
export function roundMagnitude(abs: number, mbits: number, bias: number): number {
  let exp = abs >>> 23;
  let sig = abs & 0x7fffff;
  if (exp === 0) exp = 1;
  else sig |= 0x800000;
  // Biased exponent the value would have in the target format if it were normal there.
  const targetExp = exp - 127 + bias;
  let shift = 23 - mbits;
  let base = 0;
  if (targetExp >= 1) {
    // `sig >>> shift` keeps the implicit bit at position `mbits`, so adding (e - 1) << mbits yields e << mbits | m,
    // and a rounding carry out of the mantissa moves into the exponent by itself.
    base = (targetExp - 1) << mbits;
  } else {
    shift += 1 - targetExp;
    if (shift > 25) shift = 25; // everything below half the smallest subnormal rounds to zero
  }
  const kept = sig >>> shift;
  const rest = sig & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  return base + kept + (rest > half || (rest === half && (kept & 1) === 1) ? 1 : 0);
}

/**
 * The value of a small float code with no special encodings (the caller handles inf/NaN codes), as float32 bits.
 * Used to build decode tables.
 */
export function miniToF32Bits(code: number, signBit: number, mbits: number, bias: number): number {
  const mag = code & (signBit - 1);
  const exp = mag >>> mbits;
  const mant = mag & ((1 << mbits) - 1);
  const value = exp === 0 ? mant * 2 ** (1 - bias - mbits) : (1 + mant / 2 ** mbits) * 2 ** (exp - bias);
  return ((code & signBit ? 0x80000000 : 0) | f32ToBits(value)) >>> 0;
}

/** A Uint32Array over the same memory as `out` (always 4-byte aligned), to write exact float32 bit patterns. */
export function u32View(out: Float32Array): Uint32Array {
  return new Uint32Array(out.buffer, out.byteOffset, out.length);
}

/** float32 bit patterns of the input values: a view for a Float32Array, a rounded copy for a number array. */
export function inputBits(values: Float32Array | readonly number[]): Uint32Array {
  const f32 = values instanceof Float32Array ? values : Float32Array.from(values);
  return new Uint32Array(f32.buffer, f32.byteOffset, f32.length);
}

/**
 * A decode kernel: reads `count` elements from `src` (whose byteOffset is a multiple of 4, on a little-endian host)
 * and writes output elements `first` .. `first + count - 1`.
 */
export type AlignedKernel = (src: Uint8Array, count: number, first: number) => void;

const SCRATCH_BYTES = 1 << 16;
let scratch: Uint8Array | undefined;

/**
 * Run `kernel` over `count` elements of `bytes` (`bytesPerElement` each) with 4-byte-aligned input: directly when
 * `bytes` is aligned, else chunk by chunk through a reusable 64 KiB scratch buffer (a native copy per chunk, so
 * misaligned input decodes nearly as fast as aligned input and never needs a misaligned typed view).
 */
export function runAligned(bytes: Uint8Array, count: number, bytesPerElement: number, kernel: AlignedKernel): void {
  if (bytes.byteOffset % 4 === 0) {
    kernel(bytes, count, 0);
    return;
  }
  scratch ??= new Uint8Array(SCRATCH_BYTES);
  const perChunk = SCRATCH_BYTES / bytesPerElement;
  for (let first = 0; first < count; first += perChunk) {
    const n = Math.min(perChunk, count - first);
    scratch.set(bytes.subarray(first * bytesPerElement, (first + n) * bytesPerElement));
    kernel(scratch, n, first);
  }
}
