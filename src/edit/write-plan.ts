/**
 * Which bytes of a tensor a region write covers. A spec of whole leading rows (`"1024:1152"`, `"7:"`, `":"`, in
 * range, no step) is one contiguous range computed here directly; every other slice goes through the slice planner
 * (`planSlice`, `fetchRanges`) after the bounds check. The shortcut is for a process's first edit: the planner's
 * first run (parsing, normalizing, planning: its code compiled on first use) took 0.8–1.0 ms of a ~3.5 ms edit in a
 * fresh process, the shortcut a few µs; both give the same ranges (test/edit-plan.test.ts). Pure.
 */
import type { Dtype } from "../format/dtypes.js";
import { dtypeOf } from "../format/dtypes.js";
import {
  type ByteRange,
  type Dim,
  fetchRanges,
  parseSliceSpec,
  planSlice,
  type SliceIndex,
  type SlicePlan,
} from "../slice/index.js";
import { checkSliceBounds } from "./bounds.js";

export interface WritePlan {
  readonly elementCount: number;
  /** Bytes of the slice itself. */
  readonly byteLength: number;
  /** Byte ranges of the tensor to write (sorted, disjoint, relative to its first byte). */
  readonly ranges: readonly ByteRange[];
  /**
   * The ranges hold exactly the slice's bytes, in the slice's order (no gaps bridged, no negative steps): the new
   * bytes are then written as given, without reading the old ones.
   */
  readonly exact: boolean;
  /** The slice planner's plan (absent for leading rows, which are always exact). */
  readonly plan?: SlicePlan;
}

/**
 * `[start, stop)` of a spec of whole leading rows in range (`a:b`, `a:`, `:b`, `:`; non-negative decimal integers,
 * spaces allowed), or null for anything else, empty rows included. A loop over character codes: no regular
 * expression or string copies to create in the first edit of a process.
 */
function leadingRows(spec: string, rows: number): [number, number] | null {
  let start = -1;
  let value = -1;
  for (let i = 0; i < spec.length; i++) {
    const c = spec.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      // A digit after a space that ended a number ("1 2:") is not a number.
      if (value <= -2) return null;
      value = (value < 0 ? 0 : value * 10) + (c - 48);
      if (value > Number.MAX_SAFE_INTEGER / 10) return null;
    } else if (c === 32) {
      if (value >= 0) value = -2 - value; // ended: kept as -2 - n until ":" or the end
    } else if (c === 58 && start === -1) {
      start = value === -1 ? 0 : value < -1 ? -2 - value : value;
      value = -1;
    } else return null;
  }
  if (start === -1) return null;
  const stop = value === -1 ? rows : value < -1 ? -2 - value : value;
  return start < stop && stop <= rows ? [start, stop] : null;
}

/** The bytes `write(name, slice, ...)` covers in a tensor of `dtype` and `shape`; `InvalidSlice` & co. as planned. */
export function planWrite(dtype: Dtype, shape: readonly Dim[], slice: string | readonly SliceIndex[]): WritePlan {
  const rows = typeof slice === "string" && typeof shape[0] === "number" ? leadingRows(slice, shape[0]) : null;
  if (rows !== null) {
    let rowElements = 1;
    for (let i = 1; i < shape.length; i++) rowElements *= Number(shape[i]!);
    const rowBits = rowElements * dtypeOf(dtype).bits;
    if (rowBits % 8 === 0 && Number.isSafeInteger(rowBits)) {
      const [start, stop] = rows;
      const rowBytes = rowBits / 8;
      const byteLength = (stop - start) * rowBytes;
      const ranges = byteLength > 0 ? [{ start: start * rowBytes, end: stop * rowBytes }] : [];
      return { elementCount: (stop - start) * rowElements, byteLength, ranges, exact: true };
    }
  }
  return planned(dtype, shape, slice);
}

/** The slice planner's ranges (its code compiled only when a write needs it). */
function planned(dtype: Dtype, shape: readonly Dim[], slice: string | readonly SliceIndex[]): WritePlan {
  const index = typeof slice === "string" ? parseSliceSpec(slice) : slice;
  checkSliceBounds(shape, index);
  const plan = planSlice(dtype, shape, index);
  const ranges = fetchRanges(plan);
  let total = 0;
  for (const range of ranges) total += range.end - range.start;
  const exact = total === plan.byteLength && plan.strides.every((stride) => stride > 0);
  return { elementCount: plan.elementCount, byteLength: plan.byteLength, ranges, exact, plan };
}
