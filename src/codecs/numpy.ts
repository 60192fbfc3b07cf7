/**
 * Encoding as numpy (with ml_dtypes for BF16 and the F8s) assigns values: `w[index] = values` for an array `w` of
 * the dtype. Edits follow this, so that an edit equals numpy doing it byte for byte; `fromFloat32` (what `cast`
 * uses) follows torch's `.to()`. The two agree on every finite value that does not overflow; they differ in
 * (checked on 3.1 M float32 bit patterns against numpy 2.4 / ml_dtypes 0.6, and by test/numpy-diffcheck.test.ts):
 *
 * | dtype    | numpy / ml_dtypes                                           | torch (`fromFloat32`)            |
 * | -------- | ----------------------------------------------------------- | -------------------------------- |
 * | F16      | a NaN keeps its payload's top bits as they are (a signaling | quiet bit set                    |
 * |          | float32 NaN stays signaling)                                |                                  |
 * | BF16     | every NaN is 0x7FC0 with the input's sign                   | 0xFFFF                           |
 * | F8_E4M3  | overflow (rounding above 448) and ±inf give NaN (0x7F/0xFF) | saturate to ±448                 |
 * | F8_E5M2  | NaN is 0x7E with the input's sign                           | 0x7F                             |
 * | F8_E8M0  | negative numbers, ±0 give NaN (0xFF)                        | the sign ignored, 0 gives 0x00   |
 *
 * Numbers are JS doubles, converted as numpy converts float64: F64 exactly, F32 and BF16 rounded to float32 first
 * (ml_dtypes' bfloat16 goes through float32: double rounding is what it does), F16 rounded once from the double. The
 * F8s (and F4, F6) depend on how numpy gets the double: a Python float assigned (`w[i] = 0.1`: `encodeScalarLikeNumpy`,
 * the fill of an edit) is rounded once from the double, a float64 array (`w[i] = np.array([...])`:
 * `encodeLikeNumpy` of numbers) through float32 first. "Rounded once" goes through float32 rounded to odd, which
 * then rounds to the target exactly as the double would (float32 has more than two bits beyond every target's
 * precision). A `Float32Array` is taken as float32 values, a `Float64Array` as float64 ones with their NaNs' signs.
 * Pure (no `node:` imports).
 */

import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { f32ToBits, roundMagnitude } from "./common.js";
import { canEncode, type EncodableDtype, fromFloat32 } from "./index.js";

/** float32 bits of `x` rounded to odd: truncated toward zero, then the last bit set when that was inexact. */
function roundToOddBits(x: number): number {
  const r = Math.fround(x);
  if (r === x || Number.isNaN(x)) return f32ToBits(r);
  let bits = f32ToBits(r);
  if (Math.abs(r) > Math.abs(x)) bits = (bits - 1) >>> 0; // one step toward zero (r is not 0: |r| > |x| ≥ 0)
  return (bits | 1) >>> 0;
}

/** numpy's float32 → float16 rule for a NaN (npy_floatbits_to_halfbits): the payload's top 10 bits, never 0. */
function f16Nan(bits: number): number {
  const payload = (bits & 0x7fffff) >>> 13;
  return ((bits >>> 16) & 0x8000) | 0x7c00 | (payload === 0 ? 1 : payload);
}

/** Patch torch's encoding of `bits` (float32, in `out` at element i) where numpy's rule differs. */
function patchElement(dtype: Dtype, bits: number, out: Uint8Array, i: number): void {
  const nan = (bits & 0x7fffffff) > 0x7f800000;
  const sign8 = (bits >>> 24) & 0x80;
  switch (dtype) {
    case "F16":
      if (nan) {
        const h = f16Nan(bits);
        out[2 * i] = h & 0xff;
        out[2 * i + 1] = h >>> 8;
      }
      return;
    case "BF16":
      if (nan) {
        out[2 * i] = 0xc0;
        out[2 * i + 1] = sign8 | 0x7f;
      }
      return;
    case "F8_E4M3":
      // NaN, ±inf and magnitudes rounding above 448 (the largest code, 0x7E) are NaN.
      if (nan || roundMagnitude(bits & 0x7fffffff, 3, 7) > 0x7e) out[i] = sign8 | 0x7f;
      return;
    case "F8_E5M2":
      if (nan) out[i] = sign8 | 0x7e;
      return;
    case "F8_E8M0":
      // Unsigned: a negative number (-0 included) or zero has no code but NaN.
      if (sign8 !== 0 || (bits & 0x7fffffff) === 0) out[i] = 0xff;
      return;
  }
}

const PATCHED: ReadonlySet<string> = new Set(["F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0"]);

/**
 * `values` encoded in `dtype` as numpy assigns an array of them (see the module comment): a `Float32Array` as
 * float32 values, numbers as float64. `UnsupportedDtype` for a dtype that is not a float.
 */
export function encodeLikeNumpy(dtype: Dtype, values: Float32Array | Float64Array | readonly number[]): Uint8Array {
  return encode(dtype, values, false);
}

/** `count` copies of `value` encoded in `dtype` as numpy assigns a Python float (`w[index] = value`). */
export function encodeScalarLikeNumpy(dtype: Dtype, value: number, count = 1): Uint8Array {
  return encode(dtype, new Array<number>(count).fill(value), true);
}

/**
 * `count` copies of Python's `float("-nan")` as numpy assigns it, for the dtypes whose NaN has a sign numpy keeps
 * (F16, BF16, F32, F64, F8_E4M3, F8_E5M2); null for the others. A JS number cannot carry it: V8 may drop a NaN's sign
 * bit whenever it stores the number (arrays of numbers always do).
 */
export function negativeNanLikeNumpy(dtype: Dtype, count: number): Uint8Array | null {
  if (!SIGNED_NAN.has(dtype)) return null;
  const out = encode(dtype, new Float32Array(count).fill(Number.NaN), true);
  const width = out.length / count;
  for (let i = width - 1; i < out.length; i += width) out[i]! |= 0x80;
  return out;
}

const SIGNED_NAN: ReadonlySet<string> = new Set(["F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"]);

/**
 * float32 bits of the NaN whose float64 bits are `hi`:`lo`, as x86's cvtsd2ss makes it (numpy's float64 → float32
 * cast; ml_dtypes goes through it too): sign and top payload bits kept, quieted.
 */
function nanBitsOf(hi: number, lo: number): number {
  return ((hi & 0x80000000) | 0x7fc00000 | ((hi & 0xfffff) << 3) | (lo >>> 29)) >>> 0;
}

function encode(dtype: Dtype, values: Float32Array | Float64Array | readonly number[], scalar: boolean): Uint8Array {
  if (!canEncode(dtype)) {
    throw new SafetensorError("UnsupportedDtype", `cannot encode numbers as ${dtype}: only float dtypes`);
  }
  const encodable: EncodableDtype = dtype;
  if (!(values instanceof Float32Array)) {
    if (encodable === "F64") {
      if (values instanceof Float64Array) return new Uint8Array(values.slice().buffer);
      const out = new Uint8Array(values.length * 8);
      const view = new DataView(out.buffer);
      for (let i = 0; i < values.length; i++) view.setFloat64(i * 8, values[i]!, true);
      return out;
    }
    const bits = new Uint32Array(values.length);
    const direct = encodable === "F32" || encodable === "BF16" || (!scalar && encodable !== "F16");
    for (let i = 0; i < values.length; i++) bits[i] = direct ? f32ToBits(values[i]!) : roundToOddBits(values[i]!);
    if (values instanceof Float64Array) {
      // A NaN read out of the array as a number may lose its sign and payload (V8): taken from its bits.
      const words = new Uint32Array(values.buffer, values.byteOffset, values.length * 2);
      for (let i = 0; i < values.length; i++) {
        const hi = words[2 * i + 1]!;
        if ((hi & 0x7ff00000) === 0x7ff00000 && ((hi & 0xfffff) !== 0 || words[2 * i] !== 0)) {
          bits[i] = nanBitsOf(hi, words[2 * i]!);
        }
      }
    }
    return encode(dtype, new Float32Array(bits.buffer), scalar);
  }
  const out = fromFloat32(encodable, values);
  if (PATCHED.has(dtype)) {
    const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
    for (let i = 0; i < bits.length; i++) patchElement(dtype, bits[i]!, out, i);
  }
  return out;
}
