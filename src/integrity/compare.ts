/**
 * Comparing two tensors of the same dtype and shape stored in files, chunk by chunk: chunks whose bytes are equal
 * are skipped without decoding (one `Buffer.compare`); only differing chunks are decoded, to count the elements that
 * differ (bit patterns: -0 against +0 and NaN payloads count as differences), the largest absolute difference of
 * their values, and which rows along dim 0 changed. Memory: two chunks of 1 Mi elements. Node-only.
 */
import { toFloat32 } from "../codecs/index.js";
import { type Dtype, dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { preadInto } from "../io/node-file.js";

/** Where a tensor's bytes are: an open descriptor and the absolute offset of its first byte. */
export interface StoredTensor {
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly byteLength: number;
  readonly fd: number;
  readonly offset: number;
}

export interface TensorChange {
  /** Elements whose bit patterns differ. */
  readonly elements: number;
  /** Largest |a - b| over the differing elements whose difference is a number (NaN pairs are counted apart). */
  readonly maxAbsDiff: number;
  /** Differing elements where either side is NaN. */
  readonly nanElements: number;
  /** Changed rows along dim 0, as sorted, disjoint, non-touching [start, end) pairs (a scalar is one row). */
  readonly rows: readonly (readonly [number, number])[];
  /** Elements per row (the product of the dims after the first). */
  readonly rowElements: number;
}

/** Elements per compared chunk: a multiple of 8, so that every chunk of every dtype (F4, F6 too) is whole bytes. */
const CHUNK_ELEMENTS = 1 << 20;

/** Numbers to subtract: float32 for floats and small integers, exact doubles for 32 and 64-bit integers and F64. */
function valuesOf(dtype: Dtype, bytes: Uint8Array, count: number): ArrayLike<number> {
  switch (dtype) {
    case "F64":
      return new Float64Array(bytes.buffer, bytes.byteOffset, count);
    case "I32":
      return new Int32Array(bytes.buffer, bytes.byteOffset, count);
    case "U32":
      return new Uint32Array(bytes.buffer, bytes.byteOffset, count);
    case "I64":
    case "U64": {
      const big =
        dtype === "I64"
          ? new BigInt64Array(bytes.buffer, bytes.byteOffset, count)
          : new BigUint64Array(bytes.buffer, bytes.byteOffset, count);
      return Float64Array.from(big, (value) => Number(value));
    }
    case "C64":
      return new Float32Array(bytes.buffer, bytes.byteOffset, count * 2);
    default:
      return toFloat32(dtype, bytes, { count });
  }
}

/** [hi, lo] with hi + lo = a · b exactly (Dekker's product: no FMA in JS). */
function twoProduct(a: number, b: number): [number, number] {
  const p = a * b;
  const split = (x: number) => {
    const c = 134217729 * x; // 2^27 + 1
    const hi = c - (c - x);
    return [hi, x - hi] as const;
  };
  const [ah, al] = split(a);
  const [bh, bl] = split(b);
  return [p, ah * bh - p + ah * bl + al * bh + al * bl];
}

/**
 * |x + iy| as numpy's `abs` of a complex computes it (its SIMD loop): larger · √(fma(ratio, ratio, 1)) with ratio =
 * smaller / larger. Neither libm's hypot nor V8's Math.hypot gives numpy's last bit every time (1 in 600 of random
 * float32 differences differed), this does on 200,000 of them. The fused multiply-add is emulated: the exact square
 * (Dekker), added to 1 with its rounding error.
 */
function hypot(x: number, y: number): number {
  if (!Number.isFinite(x) || !Number.isFinite(y)) return Math.hypot(x, y);
  const larger = Math.max(Math.abs(x), Math.abs(y));
  if (larger === 0) return 0;
  const ratio = Math.min(Math.abs(x), Math.abs(y)) / larger;
  const [square, error] = twoProduct(ratio, ratio);
  const sum = 1 + square; // square ≤ 1: the error of this sum is exact
  return Math.sqrt(sum + (1 - sum + square + error)) * larger;
}

/** Element-wise bit equality of two chunks; `differs(i)` for each differing element index. */
function forEachDiffering(dtype: Dtype, a: Uint8Array, b: Uint8Array, count: number, differs: (i: number) => void) {
  const bits = dtypeOf(dtype).bits;
  if (bits < 8) {
    const x = new Uint32Array(toFloat32(dtype, a, { count }).buffer);
    const y = new Uint32Array(toFloat32(dtype, b, { count }).buffer);
    for (let i = 0; i < count; i++) if (x[i] !== y[i]) differs(i);
    return;
  }
  const words = bits === 64 ? 2 : 1;
  const view = (bytes: Uint8Array) =>
    bits === 8
      ? bytes
      : bits === 16
        ? new Uint16Array(bytes.buffer, bytes.byteOffset, count)
        : new Uint32Array(bytes.buffer, bytes.byteOffset, count * words);
  const x = view(a);
  const y = view(b);
  if (words === 1) {
    for (let i = 0; i < count; i++) if (x[i] !== y[i]) differs(i);
  } else {
    for (let i = 0; i < count; i++) if (x[2 * i] !== y[2 * i] || x[2 * i + 1] !== y[2 * i + 1]) differs(i);
  }
}

/** Row ranges built from increasing row numbers. */
class RowRanges {
  readonly ranges: [number, number][] = [];
  add(row: number): void {
    const last = this.ranges[this.ranges.length - 1];
    if (last && last[1] === row) last[1] = row + 1;
    else if (!last || last[1] < row) this.ranges.push([row, row + 1]);
  }
}

/**
 * Compare two stored tensors of the same dtype and shape. Returns null when their bytes are equal, else what
 * changed.
 */
export function compareTensors(a: StoredTensor, b: StoredTensor): TensorChange | null {
  if (a.dtype !== b.dtype || a.byteLength !== b.byteLength || a.shape.join() !== b.shape.join()) {
    throw new SafetensorError("InvalidTensor", "only tensors of the same dtype and shape can be compared");
  }
  const { dtype } = a;
  const bits = dtypeOf(dtype).bits;
  const rowElements = a.shape.slice(1).reduce((n, d) => n * d, 1);
  const total = a.shape.reduce((n, d) => n * d, 1);
  const chunkBytes = Math.ceil((Math.min(CHUNK_ELEMENTS, total) * bits) / 8);
  // Fresh (not pooled) buffers: typed views over them are aligned.
  const x = new Uint8Array(chunkBytes);
  const y = new Uint8Array(chunkBytes);
  const rows = new RowRanges();
  let elements = 0;
  let nanElements = 0;
  let maxAbsDiff = 0;
  let changed = false;
  for (let first = 0; first < total; first += CHUNK_ELEMENTS) {
    const count = Math.min(CHUNK_ELEMENTS, total - first);
    const at = (first * bits) / 8;
    const length = Math.ceil((count * bits) / 8);
    const xa = x.subarray(0, length);
    const yb = y.subarray(0, length);
    preadInto(a.fd, xa, a.offset + at);
    preadInto(b.fd, yb, b.offset + at);
    if (Buffer.compare(xa, yb) === 0) continue;
    changed = true;
    const va = valuesOf(dtype, xa, count);
    const vb = valuesOf(dtype, yb, count);
    const complex = dtype === "C64";
    forEachDiffering(dtype, xa, yb, count, (i) => {
      elements++;
      rows.add(Math.floor((first + i) / rowElements));
      const d = complex ? hypot(va[2 * i]! - vb[2 * i]!, va[2 * i + 1]! - vb[2 * i + 1]!) : Math.abs(va[i]! - vb[i]!);
      if (Number.isNaN(d)) nanElements++;
      else if (d > maxAbsDiff) maxAbsDiff = d;
    });
  }
  if (!changed) return null;
  return { elements, maxAbsDiff, nanElements, rows: rows.ranges, rowElements };
}

/** Whether two stored byte ranges hold the same bytes (compared in 8 MiB chunks, stopping at the first difference). */
export function sameBytes(a: StoredTensor, b: StoredTensor): boolean {
  if (a.byteLength !== b.byteLength) return false;
  const size = Math.min(8 << 20, a.byteLength);
  const x = Buffer.allocUnsafe(size);
  const y = Buffer.allocUnsafe(size);
  for (let at = 0; at < a.byteLength; at += size) {
    const n = Math.min(size, a.byteLength - at);
    preadInto(a.fd, x.subarray(0, n), a.offset + at);
    preadInto(b.fd, y.subarray(0, n), b.offset + at);
    if (Buffer.compare(x.subarray(0, n), y.subarray(0, n)) !== 0) return false;
  }
  return true;
}
