/**
 * `diffCheckpoints(A, B)`: what differs between two files or sharded checkpoints, tensor by tensor and in metadata.
 * Tensors of the same name, dtype and shape are compared chunk by chunk (compare.ts): equal bytes are found with a
 * byte comparison and never decoded; a changed tensor reports how many elements differ, the largest absolute
 * difference of their values (decoded as float) and the changed row ranges along dim 0. Node-only.
 */
import { mergedMetadata, openCheckpoint, type SourceTensor } from "../edit/checkpoint.js";
import type { Dtype } from "../format/dtypes.js";
import { compareCodePoints } from "../format/serialize.js";
import { compareTensors, sameBytes } from "./compare.js";

/** How a tensor compares: the same bytes, changed values, on one side only, or another dtype or shape. */
export type TensorDiffStatus = "same" | "changed" | "only_a" | "only_b" | "dtype_changed" | "shape_changed";

/** A tensor's dtype and shape on one side of a diff. */
export interface TensorSide {
  readonly dtype: Dtype;
  readonly shape: readonly number[];
}

/** One tensor's comparison: its status, and for `changed` how many elements and rows differ and by how much. */
export interface TensorDiff {
  readonly name: string;
  readonly status: TensorDiffStatus;
  readonly a?: TensorSide;
  readonly b?: TensorSide;
  /** changed: elements whose bit patterns differ, of `total`. */
  readonly elements?: number;
  readonly total?: number;
  /** changed: the largest |a - b| (NaN pairs are counted in `nanElements` instead). */
  readonly maxAbsDiff?: number;
  readonly nanElements?: number;
  /** changed: [start, end) ranges of changed rows along dim 0 (the first `maxRowRanges`), and how many in all. */
  readonly rows?: readonly (readonly [number, number])[];
  readonly rowRanges?: number;
  readonly changedRows?: number;
  /** dtype_changed / shape_changed: whether the bytes are nevertheless the same (a reshape or reinterpretation). */
  readonly sameBytes?: boolean;
}

/** A metadata key whose value differs between A and B. */
export interface MetadataDiff {
  readonly key: string;
  /** Absent on the side that lacks the key. */
  readonly a?: string;
  readonly b?: string;
}

/** What `diffCheckpoints` found. */
export interface CheckpointDiff {
  /** True when every tensor is the same and the metadata too. */
  readonly same: boolean;
  /** Every tensor of either side, by name (code point order). */
  readonly tensors: readonly TensorDiff[];
  readonly metadata: readonly MetadataDiff[];
  /** Warnings from opening sharded checkpoints. */
  readonly warnings: readonly string[];
}

/** Options of `diffCheckpoints`. */
export interface DiffOptions {
  /** Row ranges listed per changed tensor (default 1000); `rowRanges` still counts them all. */
  maxRowRanges?: number;
}

const side = (t: SourceTensor): TensorSide => ({ dtype: t.dtype, shape: t.shape });

function diffTensor(name: string, a: SourceTensor, b: SourceTensor, maxRowRanges: number): TensorDiff {
  const sides = { a: side(a), b: side(b) };
  if (a.dtype !== b.dtype || a.shape.join() !== b.shape.join()) {
    const status = a.dtype !== b.dtype ? "dtype_changed" : "shape_changed";
    return { name, status, ...sides, sameBytes: sameBytes(a, b) };
  }
  const change = compareTensors(a, b);
  if (!change) return { name, status: "same", ...sides };
  return {
    name,
    status: "changed",
    ...sides,
    elements: change.elements,
    total: a.shape.reduce((n, d) => n * d, 1),
    maxAbsDiff: change.maxAbsDiff,
    nanElements: change.nanElements,
    rows: change.rows.slice(0, maxRowRanges),
    rowRanges: change.rows.length,
    changedRows: change.rows.reduce((n, [s, e]) => n + e - s, 0),
  };
}

export function diffMetadata(
  a: ReadonlyMap<string, string> | null,
  b: ReadonlyMap<string, string> | null,
): MetadataDiff[] {
  const keys = [...new Set([...(a?.keys() ?? []), ...(b?.keys() ?? [])])].sort(compareCodePoints);
  const out: MetadataDiff[] = [];
  for (const key of keys) {
    const x = a?.get(key);
    const y = b?.get(key);
    if (x === y) continue;
    out.push({ key, ...(x === undefined ? {} : { a: x }), ...(y === undefined ? {} : { b: y }) });
  }
  return out;
}

/** Compare A and B: each a safetensors file, a checkpoint directory or an index file. */
export function diffCheckpoints(aPath: string, bPath: string, options: DiffOptions = {}): CheckpointDiff {
  const maxRowRanges = options.maxRowRanges ?? 1000;
  const a = openCheckpoint(aPath);
  try {
    const b = openCheckpoint(bPath);
    try {
      const left = new Map(a.tensors.map((t) => [t.name, t]));
      const right = new Map(b.tensors.map((t) => [t.name, t]));
      const names = [...new Set([...left.keys(), ...right.keys()])].sort(compareCodePoints);
      const tensors = names.map((name): TensorDiff => {
        const x = left.get(name);
        const y = right.get(name);
        if (x && y) return diffTensor(name, x, y, maxRowRanges);
        return x ? { name, status: "only_a", a: side(x) } : { name, status: "only_b", b: side(y!) };
      });
      const metadata = diffMetadata(mergedMetadata(a.files).metadata, mergedMetadata(b.files).metadata);
      return {
        same: metadata.length === 0 && tensors.every((t) => t.status === "same"),
        tensors,
        metadata,
        warnings: [...a.warnings, ...b.warnings],
      };
    } finally {
      b.close();
    }
  } finally {
    a.close();
  }
}
