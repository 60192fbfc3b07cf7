/**
 * Plain numeric dtypes to float32, each value rounded once to the nearest float32 (ties to even), as torch's
 * `tensor.to(torch.float32)` does: F32 is copied bit for bit, F64 / I32 / U32 / I64 / U64 are rounded, I8 / U8 / I16
 * / U16 are exact, BOOL gives 1 for any nonzero byte and 0 otherwise. NaNs from F64 stay NaN (payload not kept).
 *
 * Reads work at any byte offset: aligned little-endian input uses a typed view, anything else a DataView.
 */
import { LITTLE_ENDIAN, u32View } from "./common.js";

export type NumericDtype = "BOOL" | "U8" | "I8" | "I16" | "U16" | "I32" | "U32" | "F32" | "F64" | "I64" | "U64";

function aligned(bytes: Uint8Array, size: number): boolean {
  return LITTLE_ENDIAN && bytes.byteOffset % size === 0;
}

function dataView(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * The unsigned 64-bit integer hi * 2^32 + lo as a double that rounds to the correctly rounded float32: exact below
 * 2^53, else rounded to 53 bits with round-to-odd (the dropped bits folded into the last kept bit), which makes the
 * following round-to-nearest-even to float32 give the same result as a single rounding of the exact integer.
 */
export function u64ToNumberForF32(hi: number, lo: number): number {
  if (hi < 0x200000) return hi * 4294967296 + lo;
  // 64-bit value >= 2^53: keep hi (up to 32 bits) and the top 21 bits of lo, sticky-OR the low 11 bits.
  const kept = (lo >>> 11) | ((lo & 0x7ff) !== 0 ? 1 : 0);
  return (hi * 2097152 + kept) * 2048;
}

/** Same for a signed 64-bit integer (hi as unsigned bits). */
export function i64ToNumberForF32(hi: number, lo: number): number {
  if (hi < 0x80000000) return u64ToNumberForF32(hi, lo);
  const nlo = (~lo + 1) >>> 0;
  const nhi = (~hi + (nlo === 0 ? 1 : 0)) >>> 0;
  return -u64ToNumberForF32(nhi, nlo);
}

/** Decode `count` elements of a plain numeric dtype into `out`. The caller checked the byte length. */
export function decodeNumeric(dtype: NumericDtype, bytes: Uint8Array, count: number, out: Float32Array): void {
  switch (dtype) {
    case "BOOL":
      for (let i = 0; i < count; i++) out[i] = bytes[i] === 0 ? 0 : 1;
      return;
    case "U8":
      out.set(bytes.subarray(0, count));
      return;
    case "I8":
      out.set(new Int8Array(bytes.buffer, bytes.byteOffset, count));
      return;
    case "I16":
      if (aligned(bytes, 2)) out.set(new Int16Array(bytes.buffer, bytes.byteOffset, count));
      else {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) out[i] = view.getInt16(i * 2, true);
      }
      return;
    case "U16":
      if (aligned(bytes, 2)) out.set(new Uint16Array(bytes.buffer, bytes.byteOffset, count));
      else {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) out[i] = view.getUint16(i * 2, true);
      }
      return;
    case "I32":
      if (aligned(bytes, 4)) out.set(new Int32Array(bytes.buffer, bytes.byteOffset, count));
      else {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) out[i] = view.getInt32(i * 4, true);
      }
      return;
    case "U32":
      if (aligned(bytes, 4)) out.set(new Uint32Array(bytes.buffer, bytes.byteOffset, count));
      else {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) out[i] = view.getUint32(i * 4, true);
      }
      return;
    case "F32": {
      // Bit-exact copy (NaN payloads included): copy bytes, never values.
      const o = u32View(out);
      if (aligned(bytes, 4)) o.set(new Uint32Array(bytes.buffer, bytes.byteOffset, count));
      else new Uint8Array(out.buffer, out.byteOffset, count * 4).set(bytes.subarray(0, count * 4));
      if (!LITTLE_ENDIAN) {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) o[i] = view.getUint32(i * 4, true);
      }
      return;
    }
    case "F64":
      if (aligned(bytes, 8)) out.set(new Float64Array(bytes.buffer, bytes.byteOffset, count));
      else {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) out[i] = view.getFloat64(i * 8, true);
      }
      return;
    case "I64":
    case "U64": {
      const convert = dtype === "I64" ? i64ToNumberForF32 : u64ToNumberForF32;
      if (aligned(bytes, 4)) {
        const words = new Uint32Array(bytes.buffer, bytes.byteOffset, count * 2);
        for (let i = 0, j = 0; i < count; i++, j += 2) out[i] = convert(words[j + 1]!, words[j]!);
      } else {
        const view = dataView(bytes);
        for (let i = 0; i < count; i++) out[i] = convert(view.getUint32(i * 8 + 4, true), view.getUint32(i * 8, true));
      }
      return;
    }
  }
}
