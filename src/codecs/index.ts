/**
 * dtype codecs: decode any dtype's raw little-endian storage to float32 (`toFloat32`), and encode float32 values to
 * the float dtypes (`fromFloat32`), bit-exactly as the references do:
 *
 * - F16, BF16, F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0: torch's CPU `tensor.to(dtype)` (torch 2.13).
 * - F4, F6_E2M3, F6_E3M2: ml_dtypes' `astype` (0.6); torch cannot convert float4_e2m1fn_x2 and has no F6.
 *
 * Each format's overflow / NaN / negative-zero rules are documented in its module (half.ts, float8.ts, subbyte.ts)
 * and checked against tables generated from the references (scripts/gen_codec_tables.py, test/codecs.test.ts).
 * Packing of F4 (low nibble first) and F6 (little-endian bit stream, 4 elements in 3 bytes): see subbyte.ts.
 *
 * Pure code: no `node:` imports, runs in browsers.
 */
import { type Dtype, dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { inputBits, LITTLE_ENDIAN, u32View } from "./common.js";
import { decodeFloat8, encodeFloat8, type Float8Dtype } from "./float8.js";
import { decodeBf16, decodeF16, encodeBf16, encodeF16 } from "./half.js";
import { decodeNumeric, type NumericDtype } from "./numeric.js";
import { decodeSubByte, encodeSubByte, type SubByteDtype } from "./subbyte.js";

/** Options of `toFloat32`. */
export interface ToFloat32Options {
  /**
   * Number of elements to decode. Optional when the byte length holds a whole number of elements (always for 8, 16,
   * 32 and 64-bit dtypes; for F4 it is then 2 per byte, for F6 4 per 3 bytes). When given, the byte length must be
   * exactly `ceil(count * bits / 8)`: for F4 an odd count leaves the last high nibble unused, for F6 a count that is
   * not a multiple of 4 leaves the trailing bits of the last byte unused.
   */
  readonly count?: number;
  /** Destination; must hold at least `count` elements. The result is `out` itself, or its first `count` elements. */
  readonly out?: Float32Array;
}

/** Options of `fromFloat32`. */
export interface FromFloat32Options {
  /** Destination; must hold at least the encoded byte length. The result is `out` or its first bytes. */
  readonly out?: Uint8Array;
}

/** The dtypes `fromFloat32` can encode: every float dtype (C64 excluded). */
export type EncodableDtype = Float8Dtype | SubByteDtype | "F16" | "BF16" | "F32" | "F64";

const ENCODABLE: ReadonlySet<string> = new Set<EncodableDtype>([
  "F16",
  "BF16",
  "F8_E4M3",
  "F8_E5M2",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "F8_E8M0",
  "F4",
  "F6_E2M3",
  "F6_E3M2",
  "F32",
  "F64",
]);

/** True for the dtypes `toFloat32` decodes: every dtype except C64. */
export function canDecode(dtype: Dtype): boolean {
  return dtype !== "C64";
}

/** True for the dtypes `fromFloat32` encodes: the float dtypes except C64. */
export function canEncode(dtype: Dtype): dtype is EncodableDtype {
  return ENCODABLE.has(dtype);
}

function invalid(message: string): never {
  throw new SafetensorError("InvalidTensor", message);
}

function checkCount(count: number, what: string): void {
  if (!Number.isSafeInteger(count) || count < 0) invalid(`${what} must be a non-negative integer, got ${count}`);
}

/** Bytes that `count` elements of `dtype` occupy: `ceil(count * bits / 8)`. */
export function encodedByteLength(dtype: Dtype, count: number): number {
  checkCount(count, "element count");
  return Math.ceil((count * dtypeOf(dtype).bits) / 8);
}

/**
 * Element count of `byteLength` bytes of `dtype`: `count` itself when given (checked against the byte length), else
 * derived from the byte length, which must then hold a whole number of elements.
 */
export function elementCountOf(dtype: Dtype, byteLength: number, count?: number): number {
  const bits = dtypeOf(dtype).bits;
  if (count !== undefined) {
    checkCount(count, "count");
    const expected = Math.ceil((count * bits) / 8);
    if (expected !== byteLength) {
      invalid(`${count} elements of ${dtype} take ${expected} bytes, but ${byteLength} bytes were given`);
    }
    return count;
  }
  if ((byteLength * 8) % bits !== 0) {
    const per = bits === 6 ? "4 elements per 3 bytes" : `${bits / 8} bytes per element`;
    invalid(`${byteLength} bytes is not a whole number of ${dtype} elements (${per}); pass an explicit count`);
  }
  return (byteLength * 8) / bits;
}

/**
 * Decode raw little-endian storage of `dtype` to float32.
 *
 * `bytes` may start at any byte offset: misaligned input is copied chunk-wise into an aligned scratch buffer or read
 * through a DataView, never through a misaligned typed view. The third argument is either the options or, as a
 * shorthand, the `out` array; `out` must not share memory with `bytes`.
 *
 * float32 results are the reference's exact bits, NaN payloads included (except through JS numbers: F64 NaNs, and
 * F16 NaNs on engines with a native Float16Array, keep NaN-ness and sign only).
 *
 * Throws SafetensorError "UnsupportedDtype" for C64, "InvalidTensor" when the byte length does not match the element
 * count or `out` is too small.
 */
export function toFloat32(dtype: Dtype, bytes: Uint8Array, options?: ToFloat32Options | Float32Array): Float32Array {
  if (dtype === "C64") {
    throw new SafetensorError("UnsupportedDtype", "C64 (complex64) has no float32 conversion; read its raw values");
  }
  const opts: ToFloat32Options = options instanceof Float32Array ? { out: options } : (options ?? {});
  const count = elementCountOf(dtype, bytes.byteLength, opts.count);
  let out: Float32Array;
  if (opts.out === undefined) out = new Float32Array(count);
  else {
    if (opts.out.length < count) invalid(`out holds ${opts.out.length} elements, ${count} are needed`);
    out = opts.out.length === count ? opts.out : opts.out.subarray(0, count);
  }
  if (count === 0) return out;
  switch (dtype) {
    case "F16":
      decodeF16(bytes, count, out);
      break;
    case "BF16":
      decodeBf16(bytes, count, out);
      break;
    case "F8_E4M3":
    case "F8_E5M2":
    case "F8_E4M3FNUZ":
    case "F8_E5M2FNUZ":
    case "F8_E8M0":
      decodeFloat8(dtype, bytes, count, u32View(out));
      break;
    case "F4":
    case "F6_E2M3":
    case "F6_E3M2":
      decodeSubByte(dtype, bytes, count, u32View(out));
      break;
    default:
      decodeNumeric(dtype satisfies NumericDtype, bytes, count, out);
  }
  return out;
}

/**
 * Encode float32 values to the little-endian storage of a float dtype, rounding to nearest even and applying the
 * format's overflow / NaN rules exactly as torch (F16, BF16, F8_*) or ml_dtypes (F4, F6_*) do. F4 and F6 are packed
 * (see subbyte.ts); unused trailing bits are 0. A number array is first rounded to float32, so the result is the
 * encoding of `Math.fround(value)`. F32 is stored bit for bit (from a Float32Array) and F64 exactly.
 *
 * Throws SafetensorError "UnsupportedDtype" for integer, BOOL and C64 dtypes, "InvalidTensor" when `out` is too
 * small.
 */
export function fromFloat32(
  dtype: Dtype,
  values: Float32Array | readonly number[],
  options?: FromFloat32Options,
): Uint8Array {
  if (!canEncode(dtype)) {
    throw new SafetensorError("UnsupportedDtype", `cannot encode float32 values as ${dtype}: only float dtypes`);
  }
  const bits = inputBits(values);
  const count = bits.length;
  const byteLength = encodedByteLength(dtype, count);
  let out: Uint8Array;
  if (options?.out === undefined) out = new Uint8Array(byteLength);
  else {
    if (options.out.length < byteLength) invalid(`out holds ${options.out.length} bytes, ${byteLength} are needed`);
    out = options.out.length === byteLength ? options.out : options.out.subarray(0, byteLength);
  }
  switch (dtype) {
    case "F16":
      encodeF16(bits, out);
      break;
    case "BF16":
      encodeBf16(bits, out);
      break;
    case "F8_E4M3":
    case "F8_E5M2":
    case "F8_E4M3FNUZ":
    case "F8_E5M2FNUZ":
    case "F8_E8M0":
      encodeFloat8(dtype, bits, out);
      break;
    case "F4":
    case "F6_E2M3":
    case "F6_E3M2":
      out.fill(0);
      encodeSubByte(dtype, bits, out);
      break;
    case "F32": {
      const view = new DataView(out.buffer, out.byteOffset, byteLength);
      for (let i = 0; i < count; i++) view.setUint32(i * 4, bits[i]!, true);
      break;
    }
    case "F64": {
      const f32 = new Float32Array(bits.buffer, bits.byteOffset, count);
      if (LITTLE_ENDIAN && out.byteOffset % 8 === 0) new Float64Array(out.buffer, out.byteOffset, count).set(f32);
      else {
        const view = new DataView(out.buffer, out.byteOffset, byteLength);
        for (let i = 0; i < count; i++) view.setFloat64(i * 8, f32[i]!, true);
      }
      break;
    }
  }
  return out;
}
