/**
 * Read planning: which bytes of a row-major tensor a basic index selects, in output order, as a compact strided loop
 * nest of equal-length contiguous chunks (never one object per run: `[:, ::2]` of a 4096×11008 tensor is 22M chunks).
 *
 * Offsets are byte offsets relative to the tensor's first byte. The structure:
 *
 *     for i0 < loops[0].count, …, for ik < loops[k].count:
 *       chunk at offset + i0 * loops[0].stride + … + ik * loops[k].stride, chunkLength bytes long
 *
 * Loops are the selected axes with more than one index (outermost first); trailing axes whose selection is
 * contiguous fold into the chunk. Strides are negative for negative steps (the output is then in reverse memory
 * order). A "run" is a maximal sequence of consecutive chunks that are adjacent in memory; chunks almost always are
 * the runs, except that the last chunk of an inner loop can touch the first of the next (`[:, ::2]` over an odd
 * width), which `runs()` merges.
 */
import { type Dtype, dtypeInfo } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { type AxisSelection, normalizeIndex } from "./normalize.js";
import { type Dim, formatSliceSpec, type SliceIndex } from "./spec.js";

/** A half-open byte range `[start, end)` relative to the tensor's first byte. */
export interface ByteRange {
  readonly start: number;
  readonly end: number;
}

/** One level of the loop nest: `count` (≥ 2) iterations, `stride` bytes apart (negative for negative steps). */
export interface PlanLoop {
  readonly count: number;
  readonly stride: number;
}

const MAX = Number.MAX_SAFE_INTEGER;

/** How a numpy basic index reads a tensor: the output shape and the byte runs it selects, computed before any read. */
export class SlicePlan {
  /** @internal counts of `loops`, outermost first. */
  readonly counts: readonly number[];
  /** @internal strides of `loops` in bytes. */
  readonly strides: readonly number[];

  constructor(
    readonly dtype: Dtype,
    /** The tensor's shape (dims as `number` when safe). */
    readonly inputShape: readonly Dim[],
    /** Per input axis: what the index selects. */
    readonly axes: readonly AxisSelection[],
    /** The output shape. */
    readonly shape: readonly Dim[],
    /** The tensor's size in bytes. */
    readonly tensorByteLength: number,
    /** Elements in the output. */
    readonly elementCount: number,
    /** Bytes in the output: chunkLength × chunkCount. */
    readonly byteLength: number,
    /** Byte offset of the first chunk (0 when the output is empty). */
    readonly offset: number,
    /** Bytes per chunk (0 when the output is empty). */
    readonly chunkLength: number,
    /** Number of chunks: the product of the loop counts (1 with no loops; 0 when the output is empty). */
    readonly chunkCount: number,
    /** The loop nest, outermost first (empty when the output is a single chunk or empty). */
    readonly loops: readonly PlanLoop[],
    /** Number of maximal runs `runs()` yields (≤ chunkCount). */
    readonly runCount: number,
    /** Start of the covering span: the lowest byte any chunk reads. */
    readonly spanStart: number,
    /** End of the covering span (exclusive); spanStart = spanEnd = 0 when the output is empty. */
    readonly spanEnd: number,
  ) {
    this.counts = loops.map((loop) => loop.count);
    this.strides = loops.map((loop) => loop.stride);
  }

  /** True when the output is one contiguous chunk of the tensor (`gather` can return a view). */
  get isContiguous(): boolean {
    return this.chunkCount === 1;
  }

  /** The covering span `[min offset, max offset end)` of all chunks. */
  span(): ByteRange {
    return { start: this.spanStart, end: this.spanEnd };
  }

  /** Call `fn(start)` for every chunk's start offset, in output order (chunks are `chunkLength` bytes). */
  forEachChunk(fn: (start: number) => void): void {
    if (this.chunkCount === 0) return;
    const m = this.counts.length;
    if (m === 0) {
      fn(this.offset);
      return;
    }
    const innerCount = this.counts[m - 1]!;
    const innerStride = this.strides[m - 1]!;
    forEachRow(this, (rowStart) => {
      let p = rowStart;
      for (let i = 0; i < innerCount; i++, p += innerStride) fn(p);
    });
  }

  /** Call `fn(start, end)` for every maximal run (merged adjacent chunks), in output order. */
  forEachRun(fn: (start: number, end: number) => void): void {
    if (this.chunkCount === 0) return;
    const length = this.chunkLength;
    let runStart = -1;
    let runEnd = -1;
    this.forEachChunk((start) => {
      if (start === runEnd) runEnd += length;
      else {
        if (runStart >= 0) fn(runStart, runEnd);
        runStart = start;
        runEnd = start + length;
      }
    });
    fn(runStart, runEnd);
  }

  /** The chunks' start offsets in output order. */
  *chunkStarts(): IterableIterator<number> {
    if (this.chunkCount === 0) return;
    const m = this.counts.length;
    const counts = this.counts;
    const strides = this.strides;
    if (m === 0) {
      yield this.offset;
      return;
    }
    const index = new Array<number>(m).fill(0);
    let p = this.offset;
    for (;;) {
      yield p;
      let k = m - 1;
      for (; k >= 0; k--) {
        p += strides[k]!;
        if (++index[k]! < counts[k]!) break;
        p -= strides[k]! * counts[k]!;
        index[k] = 0;
      }
      if (k < 0) return;
    }
  }

  /** The maximal runs in output order (consecutive chunks adjacent in memory are merged). */
  *runs(): IterableIterator<ByteRange> {
    const length = this.chunkLength;
    let runStart = -1;
    let runEnd = -1;
    for (const start of this.chunkStarts()) {
      if (start === runEnd) runEnd += length;
      else {
        if (runStart >= 0) yield { start: runStart, end: runEnd };
        runStart = start;
        runEnd = start + length;
      }
    }
    if (runStart >= 0) yield { start: runStart, end: runEnd };
  }
}

/** @internal Call `fn(rowStart)` for every position of all loops but the innermost (once if there is ≤ 1 loop). */
export function forEachRow(plan: SlicePlan, fn: (rowStart: number) => void): void {
  const counts = plan.counts;
  const strides = plan.strides;
  const outer = counts.length - 1;
  if (outer <= 0) {
    fn(plan.offset);
    return;
  }
  if (outer === 1) {
    const count = counts[0]!;
    const stride = strides[0]!;
    let p = plan.offset;
    for (let i = 0; i < count; i++, p += stride) fn(p);
    return;
  }
  const index = new Array<number>(outer).fill(0);
  let p = plan.offset;
  for (;;) {
    fn(p);
    let k = outer - 1;
    for (; k >= 0; k--) {
      p += strides[k]!;
      if (++index[k]! < counts[k]!) break;
      p -= strides[k]! * counts[k]!;
      index[k] = 0;
    }
    if (k < 0) return;
  }
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

function describeShape(shape: readonly Dim[]): string {
  return `[${shape.join(", ")}]`;
}

/**
 * Plan the read of `tensor[index]` for a row-major tensor of `dtype` and `shape` (numpy basic indexing, see
 * `normalizeIndex`). Throws `SafetensorError`:
 * - "InvalidSlice" for an index numpy rejects (or `None`);
 * - "MisalignedSlice" when the dtype packs several elements per byte (F4, F6_*) and some run would not start and
 *   end on a byte boundary (like the reference), or when the tensor itself is not a whole number of bytes;
 * - "TooLarge" for a non-empty tensor of more than 2^53 - 1 bytes or elements (no file can hold one);
 * - "UnknownDtype" / "InvalidTensor" for a bad dtype or shape.
 */
export function planSlice(dtype: Dtype, shape: readonly Dim[], index: readonly SliceIndex[]): SlicePlan {
  const info = dtypeInfo(dtype);
  if (info === undefined) throw new SafetensorError("UnknownDtype", `unknown dtype ${JSON.stringify(dtype)}`);
  const normalized = normalizeIndex(shape, index);
  const axes = normalized.axes;
  const dims = axes.map((axis) => axis.size);
  const bits = info.bits;
  // Elements per aligned group (g) and bytes per group (f): x elements are x / g * f bytes when g divides x.
  const g = 8 / gcd(bits, 8);
  const f = (bits * g) / 8;

  // The tensor's size, exactly, refusing what no file can hold.
  let elements = 1;
  let zero = false;
  let huge = false;
  for (const dim of dims) {
    if (dim === 0) zero = true;
    else if (typeof dim === "bigint") huge = true;
    else if (!huge) {
      elements *= dim;
      if (elements > MAX) huge = true;
    }
  }
  if (zero) elements = 0;
  else if (huge || elements / g > Math.floor(MAX / f)) {
    throw new SafetensorError(
      "TooLarge",
      `a ${dtype} tensor of shape ${describeShape(dims)} is larger than 2^53 - 1 bytes or elements`,
    );
  }
  if (elements % g !== 0) {
    throw new SafetensorError(
      "MisalignedSlice",
      `a ${dtype} tensor of shape ${describeShape(dims)} has ${elements} ${bits}-bit elements: not a whole number of bytes`,
    );
  }
  const tensorBytes = (elements / g) * f;

  if (normalized.empty) {
    return new SlicePlan(dtype, dims, axes, normalized.shape, tensorBytes, 0, 0, 0, 0, 0, [], 0, 0, 0);
  }

  // Non-empty output: every dim is ≥ 1 and a safe number, and all values below are bounded by `elements`.
  const n = dims.length;
  let base = 0; // element offset of the first chunk
  let outCount = 1;
  const loopCounts: number[] = [];
  const loopStrides: number[] = []; // in elements
  let stride = 1;
  const axisStrides = new Array<number>(n);
  for (let d = n - 1; d >= 0; d--) {
    axisStrides[d] = stride;
    stride *= dims[d] as number;
  }
  for (let d = 0; d < n; d++) {
    const axis = axes[d]!;
    const count = axis.count as number;
    base += (axis.start as number) * axisStrides[d]!;
    outCount *= count;
    if (count > 1) {
      loopCounts.push(count);
      loopStrides.push((axis.step as number) * axisStrides[d]!);
    }
  }
  // Fold contiguous inner loops into the chunk.
  let chunk = 1; // elements
  while (loopCounts.length > 0 && loopStrides[loopStrides.length - 1] === chunk) {
    chunk *= loopCounts.pop()!;
    loopStrides.pop();
  }

  if (g > 1) {
    let problem: string | undefined;
    if (chunk % g !== 0) problem = `runs of ${chunk} element${chunk === 1 ? "" : "s"} (${chunk * bits} bits)`;
    else if (base % g !== 0) problem = `a run starting at element ${base} (bit ${base * bits})`;
    else {
      const bad = loopStrides.find((s) => s % g !== 0);
      if (bad !== undefined) problem = `runs ${Math.abs(bad)} elements (${Math.abs(bad) * bits} bits) apart`;
    }
    if (problem !== undefined) {
      throw new SafetensorError(
        "MisalignedSlice",
        `slice [${formatSliceSpec(index)}] of a ${dtype} tensor of shape ${describeShape(dims)} reads ${problem}: ` +
          `${dtype} packs ${bits}-bit elements, so every run must start and end on a byte boundary`,
      );
    }
  }

  const toBytes = (x: number): number => (x / g) * f;
  const offset = toBytes(base);
  const chunkLength = toBytes(chunk);
  const m = loopCounts.length;
  const loops: PlanLoop[] = [];
  let chunkCount = 1;
  let spanStart = offset;
  let spanEnd = offset + chunkLength;
  for (let k = 0; k < m; k++) {
    const count = loopCounts[k]!;
    const s = toBytes(loopStrides[k]!);
    loops.push({ count, stride: s });
    chunkCount *= count;
    if (s < 0) spanStart += (count - 1) * s;
    else spanEnd += (count - 1) * s;
  }
  // Runs: chunks minus the loop carries at which the next chunk starts where the previous one ended. At a carry of
  // level k (loop k advances, all inner loops restart), the next chunk is delta_k bytes after the previous chunk's
  // start; there are (c_0 × … × c_{k-1}) × (c_k - 1) such carries.
  let runCount = chunkCount;
  let innerBack = 0; // Σ_{j>k} (c_j - 1) × stride_j
  let outerProduct = chunkCount;
  for (let k = m - 1; k >= 0; k--) {
    const loop = loops[k]!;
    outerProduct /= loop.count;
    if (loop.stride - innerBack === chunkLength) runCount -= outerProduct * (loop.count - 1);
    innerBack += (loop.count - 1) * loop.stride;
  }
  return new SlicePlan(
    dtype,
    dims,
    axes,
    normalized.shape,
    tensorBytes,
    outCount,
    chunkLength * chunkCount,
    offset,
    chunkLength,
    chunkCount,
    loops,
    runCount,
    spanStart,
    spanEnd,
  );
}

export interface FetchOptions {
  /** Merge ranges whose gap is at most this many bytes (default 4096): reading a small gap beats another request. */
  readonly maxGap?: number;
  /**
   * At most this many ranges (default 16384). When the plan needs more, gaps are bridged from the innermost loop
   * outwards until it fits (down to one range: the covering span). Bounds memory and work for huge run counts.
   */
  readonly maxRanges?: number;
}

export const DEFAULT_MAX_GAP = 4096;
export const DEFAULT_MAX_RANGES = 16384;

/**
 * The byte ranges worth reading for `plan`: sorted, disjoint, non-adjacent, covering every run, with gaps of at most
 * `maxGap` bytes bridged, and at most `maxRanges` of them. Fetch them (e.g. into a `plan.span()`-sized buffer at
 * `range.start - span.start`, or as separate pieces) and pass the bytes to `gather` / `gatherPieces`.
 */
export function fetchRanges(plan: SlicePlan, options: FetchOptions = {}): ByteRange[] {
  const maxGap = options.maxGap ?? DEFAULT_MAX_GAP;
  const maxRanges = Math.max(1, Math.floor(options.maxRanges ?? DEFAULT_MAX_RANGES));
  if (!(maxGap >= 0)) throw new SafetensorError("InvalidSlice", `maxGap must be ≥ 0, got ${maxGap}`);
  if (plan.chunkCount === 0) return [];
  // The same chunks in ascending memory order: flip negative strides. Each loop's stride is at least the extent of
  // everything inside it (row-major), so the nest then enumerates disjoint chunks in ascending order.
  let offset = plan.offset;
  const counts = plan.counts.slice();
  const strides = plan.strides.map((stride, k) => {
    if (stride >= 0) return stride;
    offset += (counts[k]! - 1) * stride;
    return -stride;
  });
  // extent[k]: bytes from the start of the first chunk of loop k's block to the end of its last chunk.
  let length = plan.chunkLength;
  let product = plan.chunkCount;
  // Fold the innermost loop into the chunk while its gaps are small enough, or while there would be too many ranges.
  while (counts.length > 0) {
    const k = counts.length - 1;
    const gap = strides[k]! - length;
    if (gap > maxGap && product <= maxRanges) break;
    length += (counts[k]! - 1) * strides[k]!;
    product /= counts[k]!;
    counts.pop();
    strides.pop();
  }
  const ranges: ByteRange[] = [];
  let start = offset;
  let end = offset + length;
  const m = counts.length;
  if (m > 0) {
    const index = new Array<number>(m).fill(0);
    let p = offset;
    for (;;) {
      let k = m - 1;
      for (; k >= 0; k--) {
        p += strides[k]!;
        if (++index[k]! < counts[k]!) break;
        p -= strides[k]! * counts[k]!;
        index[k] = 0;
      }
      if (k < 0) break;
      if (p - end <= maxGap) end = p + length;
      else {
        ranges.push({ start, end });
        start = p;
        end = p + length;
      }
    }
  }
  ranges.push({ start, end });
  return ranges;
}
