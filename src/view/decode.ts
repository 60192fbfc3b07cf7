/**
 * Element values of any dtype as float64, a piece at a time (the view's statistics never hold a whole tensor
 * decoded): float dtypes through the codecs (every F8/F6/F4/F16/BF16 value is exact in float32, so in float64),
 * integers exactly (I64/U64 rounded to float64 above 2^53; `exactInt64Range` gives their exact extremes), F64 as it
 * is, BOOL as 0/1, C64 as its interleaved real and imaginary parts.
 *
 * Pure code: no `node:` imports, runs in browsers.
 */

import { toFloat32 } from "../codecs/index.js";
import { type Dtype, dtypeOf } from "../format/dtypes.js";

/** Elements decoded per piece: 64 Ki, so scratch memory stays at 512 KiB whatever the tensor's size. */
export const PIECE_ELEMENTS = 65536;

/**
 * Where elements `[start, start + count)` lie: the byte range to read, and how many decoded elements to skip first
 * (F4 packs 2 elements per byte and F6 4 per 3 bytes, so a run may start inside a byte; it is widened to the
 * previous multiple of 8 elements, which starts on a byte for every dtype).
 */
export function elementBytes(dtype: Dtype, start: number, count: number): { begin: number; end: number; skip: number } {
  const bits = dtypeOf(dtype).bits;
  const from = bits < 8 ? start - (start % 8) : start;
  return { begin: (from * bits) / 8, end: Math.ceil(((start + count) * bits) / 8), skip: start - from };
}

/** Values per element: 2 for C64 (real, imaginary), else 1. */
export function valuesPerElement(dtype: Dtype): number {
  return dtype === "C64" ? 2 : 1;
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Call `visit(values, n)` with the float64 values of `count` elements held in `bytes` after skipping `skip` decoded
 * elements (`bytes` as `elementBytes` describes it); `values` is scratch, valid only during the call.
 */
export function forEachPiece(
  dtype: Dtype,
  bytes: Uint8Array,
  skip: number,
  count: number,
  visit: (values: Float64Array, n: number) => void,
): void {
  const bits = dtypeOf(dtype).bits;
  const out = new Float64Array(Math.min(PIECE_ELEMENTS, count) * valuesPerElement(dtype));
  if (bits < 8) {
    // Sub-byte: decode whole groups of 8 elements (byte aligned) into float32, then widen.
    const f32 = new Float32Array(PIECE_ELEMENTS + 8);
    let done = 0;
    while (done < count) {
      const n = Math.min(PIECE_ELEMENTS, count - done);
      const first = skip + done;
      const from = first - (first % 8);
      const decodeCount = first + n - from;
      const begin = (from * bits) / 8;
      const slice = bytes.subarray(begin, begin + Math.ceil((decodeCount * bits) / 8));
      toFloat32(dtype, slice, { count: decodeCount, out: f32 });
      for (let i = 0; i < n; i++) out[i] = f32[first - from + i]!;
      visit(out, n);
      done += n;
    }
    return;
  }
  const size = bits / 8;
  const data = view(bytes);
  const f32 = dtype === "C64" ? null : new Float32Array(PIECE_ELEMENTS);
  for (let done = 0; done < count; done += PIECE_ELEMENTS) {
    const n = Math.min(PIECE_ELEMENTS, count - done);
    const at = (skip + done) * size;
    switch (dtype) {
      case "F64":
        for (let i = 0; i < n; i++) out[i] = data.getFloat64(at + i * 8, true);
        break;
      case "I32":
        for (let i = 0; i < n; i++) out[i] = data.getInt32(at + i * 4, true);
        break;
      case "U32":
        for (let i = 0; i < n; i++) out[i] = data.getUint32(at + i * 4, true);
        break;
      case "I64":
        for (let i = 0; i < n; i++) out[i] = Number(data.getBigInt64(at + i * 8, true));
        break;
      case "U64":
        for (let i = 0; i < n; i++) out[i] = Number(data.getBigUint64(at + i * 8, true));
        break;
      case "C64":
        for (let i = 0; i < n * 2; i++) out[i] = data.getFloat32(at + i * 4, true);
        break;
      default: {
        // BOOL, U8, I8, U16, I16, F16, BF16, F8_*, F32: float32 holds every value exactly.
        const decoded = toFloat32(dtype, bytes.subarray(at, at + n * size), { count: n, out: f32! });
        for (let i = 0; i < n; i++) out[i] = decoded[i]!;
      }
    }
    visit(out, n * valuesPerElement(dtype));
  }
}

/** Exact smallest and largest I64/U64 element of `count` elements at element `skip` of `bytes`, or null if none. */
export function exactInt64Range(
  dtype: "I64" | "U64",
  bytes: Uint8Array,
  skip: number,
  count: number,
): { min: bigint; max: bigint } | null {
  if (count === 0) return null;
  const data = view(bytes);
  const read = dtype === "I64" ? data.getBigInt64.bind(data) : data.getBigUint64.bind(data);
  let min = read(skip * 8, true);
  let max = min;
  for (let i = 1; i < count; i++) {
    const v = read((skip + i) * 8, true);
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return { min, max };
}
