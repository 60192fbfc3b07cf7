/**
 * Writes refuse what reads clamp: numpy clamps a slice's ends to the axis (`a[5000:6000]` of 4096 rows is empty), which
 * for an edit would silently write less than asked. Pure.
 */
import { SafetensorError } from "../format/errors.js";
import { type Dim, ELLIPSIS, formatSliceSpec, type IndexInteger, type SliceIndex } from "../slice/index.js";

function outside(value: IndexInteger | null | undefined, dim: Dim): boolean {
  if (value === null || value === undefined) return false;
  const v = BigInt(value);
  const d = BigInt(dim);
  return v > d || v < -d;
}

/** `InvalidSlice` when a slice end of `index` lies outside its axis (integers are checked by the planner). */
export function checkSliceBounds(shape: readonly Dim[], index: readonly SliceIndex[]): void {
  const ellipsis = index.indexOf(ELLIPSIS);
  const after = ellipsis < 0 ? 0 : index.length - ellipsis - 1;
  index.forEach((item, i) => {
    if (typeof item !== "object" || item === null) return;
    const axis = ellipsis < 0 || i < ellipsis ? i : shape.length - after + (i - ellipsis - 1);
    const dim = shape[axis];
    if (dim === undefined) return; // too many indices: the planner says so
    if (outside(item.start, dim) || outside(item.stop, dim)) {
      throw new SafetensorError(
        "InvalidSlice",
        `slice [${formatSliceSpec(index)}] reaches outside axis ${axis} (size ${dim}): an edit never clamps`,
      );
    }
  });
}
