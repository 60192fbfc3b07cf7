/**
 * One chunk of a tensor's rows from checkpoint bytes to GGUF bytes: decode (F32, F16, BF16 to float32, exactly),
 * Gemma's `+ 1`, encode (F32; F16 rounding to nearest even as numpy's astype; BF16 as gguf-py rounds; or a block
 * quantizer). The Q/K permutation is a reordering of whole rows, done on the source bytes (`permuteRows`). Pure,
 * so that worker threads and browsers run the same code.
 */
import { decodeBf16, decodeF16, f32BitsToF16 } from "../codecs/half.js";
import type { Dtype } from "../format/dtypes.js";
import type { TensorType } from "./plan.js";
import { type Q8Kernel, wasmQ8Kernel } from "./q8-kernel.js";
import { blockBytes, isQuantType, QK, quantize, quantizeQ8_0FromF16 } from "./quants.js";

/** Bytes per element of a source dtype the converter reads. */
export function sourceBytes(dtype: Dtype): number {
  return dtype === "F32" ? 4 : 2;
}

/** Output bytes for `count` elements of `type` (rows whole blocks). */
export function outputBytes(type: TensorType, count: number): number {
  if (isQuantType(type)) return (count / QK) * blockBytes(type);
  return type === "F32" ? count * 4 : count * 2;
}

/**
 * Reorder rows as llama.cpp's converter permutes Q and K: per head of `d` rows, output row `2j + k` is input row
 * `k * d/2 + j` (reshape(heads, 2, d/2, ...).swapaxes(1, 2)). `src` and `out` hold `rows` rows of `rowBytes` bytes,
 * a whole number of heads.
 */
export function permuteRows(src: Uint8Array, out: Uint8Array, rows: number, rowBytes: number, headRows: number): void {
  const half = headRows / 2;
  for (let h = 0; h < rows; h += headRows) {
    for (let j = 0; j < half; j++) {
      for (let k = 0; k < 2; k++) {
        const from = (h + k * half + j) * rowBytes;
        const to = (h + 2 * j + k) * rowBytes;
        out.set(src.subarray(from, from + rowBytes), to);
      }
    }
  }
}

const LE = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Decode `count` source elements to float32. */
export function decodeSource(dtype: Dtype, bytes: Uint8Array, count: number, out: Float32Array): void {
  if (dtype === "F16") decodeF16(bytes, count, out);
  else if (dtype === "BF16") decodeBf16(bytes, count, out);
  else if (dtype === "F32") {
    if (LE && bytes.byteOffset % 4 === 0) out.set(new Float32Array(bytes.buffer, bytes.byteOffset, count));
    else {
      const view = new DataView(bytes.buffer, bytes.byteOffset, count * 4);
      for (let i = 0; i < count; i++) out[i] = view.getFloat32(i * 4, true);
    }
  } else throw new RangeError(`cannot decode ${dtype}`);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Gemma's norm + 1, in float32; for F16 sources rounded back to F16 as torch's half addition does. */
export function addOne(values: Float32Array, count: number, sourceDtype: Dtype): void {
  for (let i = 0; i < count; i++) {
    let v = Math.fround(values[i]! + 1);
    if (sourceDtype === "F16") {
      f32[0] = v;
      const h = f32BitsToF16(u32[0]!);
      v = halfToFloat(h);
    }
    values[i] = v;
  }
}

function halfToFloat(h: number): number {
  const tmp = new Float32Array(1);
  decodeF16(new Uint8Array([h & 0xff, h >>> 8]), 1, tmp, false);
  return tmp[0]!;
}

let preferredQ8: Q8Kernel | null = null;

/**
 * A faster F16 to Q8_0 kernel giving the same bytes, used before the WebAssembly one: the Node adapters pass the
 * native addon's (native/gguf_q8.c, node-q8-native.ts); null goes back to WebAssembly.
 */
export function preferQ8Kernel(kernel: Q8Kernel | null): void {
  preferredQ8 = kernel;
}

/**
 * Source bytes straight to output bytes when a fused kernel exists (F16 to Q8_0), else false. `src` must be
 * 2-byte aligned.
 */
export function convertDirect(
  dtype: Dtype,
  type: TensorType,
  src: Uint8Array,
  count: number,
  out: Uint8Array,
): boolean {
  if (dtype !== "F16" || type !== "Q8_0" || !LE) return false;
  const simd = preferredQ8 ?? wasmQ8Kernel();
  if (simd !== null) simd(src, count, out);
  else if (src.byteOffset % 2 === 0) quantizeQ8_0FromF16(new Uint16Array(src.buffer, src.byteOffset, count), out);
  else return false;
  return true;
}

/** Encode `count` float32 values as `type` into `out` (little-endian; quantized types in 32-value blocks). */
export function encodeOutput(type: TensorType, src: Float32Array, count: number, out: Uint8Array): void {
  const values = count === src.length ? src : src.subarray(0, count);
  if (isQuantType(type)) {
    quantize(type, values, out);
    return;
  }
  if (type === "F32") {
    if (LE && out.byteOffset % 4 === 0) new Float32Array(out.buffer, out.byteOffset, count).set(values);
    else {
      const view = new DataView(out.buffer, out.byteOffset, count * 4);
      for (let i = 0; i < count; i++) view.setFloat32(i * 4, values[i]!, true);
    }
    return;
  }
  const bits = new Uint32Array(values.buffer, values.byteOffset, count);
  if (type === "F16") {
    for (let i = 0; i < count; i++) {
      const h = f32BitsToF16(bits[i]!);
      out[2 * i] = h & 0xff;
      out[2 * i + 1] = h >>> 8;
    }
    return;
  }
  // BF16 as gguf-py rounds it: NaNs made quiet (their top 16 bits kept), then round to nearest even.
  for (let i = 0; i < count; i++) {
    let x = bits[i]!;
    if ((x & 0x7fffffff) > 0x7f800000) x = ((x & 0xffff0000) | 0x00400000) >>> 0;
    const b = Math.floor((x + 0x7fff + ((x >>> 16) & 1)) / 65536) & 0xffff;
    out[2 * i] = b & 0xff;
    out[2 * i + 1] = b >>> 8;
  }
}
