/**
 * Statistics and a histogram of a tensor's values, and a heat map of a 2-D tensor, for the inspector.
 *
 * Values are decoded to float64 (`decode.ts`: exact for every dtype but I64/U64 beyond 2^53; C64 counts its real
 * and imaginary parts as values). `min`, `max`, `mean`, `std` (population, ddof 0) are over the finite values;
 * `nan`, `inf` and `zeros` count values. The histogram is `numpy.histogram(finite_values.astype(float64), bins=N)`
 * bin for bin: edges from numpy's linspace rule (`i * step + first`, the last edge exactly the maximum; a constant
 * input widened by 0.5 on both sides; no values: edges over [0, 1]), each value's bin from
 * `trunc((x - first) / (last - first) * N)` corrected by one against the edges, every bin half-open but the last,
 * which is closed. Where numpy refuses ("Too many bins for data range": edges not strictly increasing, only possible
 * for F64 data spanning a few ulps) the bin count is halved until it is valid, and `bins` says how many were used.
 *
 * Tensors of more than `maxSamples` elements are sampled: `blocks` contiguous runs of `block_elements` elements
 * evenly spaced across the tensor (deterministic, always including the first elements), so a local or remote
 * reader reads only those byte ranges. `sampled` is `false` or says how.
 *
 * Pure code: no `node:` imports, runs in browsers.
 */
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { elementBytes, exactInt64Range, forEachPiece, valuesPerElement } from "./decode.js";

export const DEFAULT_BINS = 64;
export const MAX_BINS = 10_000;
/** 4 Mi elements: at most 32 MiB read for F64, 8 MiB for BF16, whatever the tensor's size. */
export const DEFAULT_MAX_SAMPLES = 4 * 1024 * 1024;
/** Elements per sampled run: 64 Ki (128 KiB of BF16), large enough that a ranged read is not mostly overhead. */
export const SAMPLE_BLOCK_ELEMENTS = 65536;

export interface StatsOptions {
  /** Histogram bins (default 64, at most 10,000). */
  readonly bins?: number;
  /** Tensors with more elements are sampled (default 4 Mi). */
  readonly maxSamples?: number;
}

export interface Sampling {
  readonly method: "blocks";
  /** Elements read. */
  readonly elements: number;
  /** Elements in the tensor. */
  readonly of: number;
  readonly blocks: number;
  readonly block_elements: number;
}

/** Runs of elements to read: `[start, start + count)`, ascending, disjoint. */
export interface SamplePlan {
  readonly runs: readonly { readonly start: number; readonly count: number }[];
  readonly sampled: Sampling | false;
}

export interface Stats {
  /** Values counted (elements read; twice that for C64). */
  readonly count: number;
  readonly finite: number;
  readonly min: number | null;
  readonly max: number | null;
  readonly mean: number | null;
  readonly std: number | null;
  readonly nan: number;
  readonly inf: number;
  readonly zeros: number;
  /** I64/U64 only: exact extremes as decimal strings (`min`/`max` are rounded to float64 above 2^53). */
  readonly exact_min?: string;
  readonly exact_max?: string;
}

export interface Histogram {
  readonly bins: number;
  /** `bins + 1` edges; numpy's float64 values. */
  readonly edges: number[];
  readonly counts: number[];
}

export interface TensorStats {
  readonly stats: Stats;
  readonly histogram: Histogram;
  readonly sampled: Sampling | false;
  /** `elements`, or `complex parts` for C64 (real and imaginary parts counted as values). */
  readonly values: "elements" | "complex parts";
}

/** A run of elements and the bytes holding it, as `elementBytes` describes them. */
export interface ElementChunk {
  readonly bytes: Uint8Array;
  readonly skip: number;
  readonly count: number;
}

export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const dim of shape) n *= dim;
  return n;
}

function checkCount(value: number, name: string, max: number): number {
  if (!Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new SafetensorError("InvalidOption", `${name} must be an integer from 1 to ${max}, got ${value}`);
  }
  return value;
}

/** Which elements a statistic of `numel` elements reads. */
export function planSample(numel: number, maxSamples: number = DEFAULT_MAX_SAMPLES): SamplePlan {
  checkCount(maxSamples, "maxSamples", Number.MAX_SAFE_INTEGER);
  if (numel <= maxSamples) return { runs: numel === 0 ? [] : [{ start: 0, count: numel }], sampled: false };
  const block = Math.min(SAMPLE_BLOCK_ELEMENTS, maxSamples);
  const blocks = Math.max(1, Math.floor(maxSamples / block));
  const runs: { start: number; count: number }[] = [];
  // Evenly spaced starts: run i begins at floor(i * (numel - block) / (blocks - 1)), the last one at the end.
  for (let i = 0; i < blocks; i++) {
    const start = blocks === 1 ? 0 : Math.floor((i * (numel - block)) / (blocks - 1));
    runs.push({ start, count: block });
  }
  return {
    runs,
    sampled: { method: "blocks", elements: blocks * block, of: numel, blocks, block_elements: block },
  };
}

/** The chunks of `plan` from a tensor's whole bytes. */
export function chunksOf(dtype: Dtype, data: Uint8Array, plan: SamplePlan): ElementChunk[] {
  return plan.runs.map(({ start, count }) => {
    const { begin, end, skip } = elementBytes(dtype, start, count);
    return { bytes: data.subarray(begin, end), skip, count };
  });
}

/** numpy.linspace(first, last, bins + 1) in float64. */
function linspaceEdges(first: number, last: number, bins: number): number[] {
  const delta = last - first;
  const step = delta / bins;
  const edges = new Array<number>(bins + 1);
  for (let i = 0; i < bins; i++) edges[i] = step === 0 ? (i / bins) * delta + first : i * step + first;
  edges[bins] = last;
  return edges;
}

function increasing(edges: readonly number[]): boolean {
  for (let i = 1; i < edges.length; i++) if (!(edges[i - 1]! < edges[i]!)) return false;
  return true;
}

/** Histogram edges and a bin finder for finite values in [min, max] (`count` of them), numpy's rules. */
function histogramBins(min: number, max: number, count: number, requested: number) {
  let first = count === 0 ? 0 : min;
  let last = count === 0 ? 1 : max;
  if (first === last) {
    first -= 0.5;
    last += 0.5;
  }
  let bins = requested;
  let edges = linspaceEdges(first, last, bins);
  while (bins > 1 && !increasing(edges)) {
    bins = Math.max(1, Math.floor(bins / 2));
    edges = linspaceEdges(first, last, bins);
  }
  const delta = last - first;
  const binOf = (x: number): number => {
    let index = Math.trunc(((x - first) / delta) * bins);
    if (index >= bins) index = bins - 1;
    if (x < edges[index]!) index--;
    else if (index !== bins - 1 && x >= edges[index + 1]!) index++;
    return index;
  };
  return { bins, edges, binOf };
}

/** Statistics of the elements in `chunks` (a whole tensor, or the runs of a sample plan). */
export function statsOfChunks(
  dtype: Dtype,
  chunks: readonly ElementChunk[],
  sampled: Sampling | false,
  options: StatsOptions = {},
): TensorStats {
  const requested = checkCount(options.bins ?? DEFAULT_BINS, "bins", MAX_BINS);
  let count = 0;
  let finite = 0;
  let nan = 0;
  let inf = 0;
  let zeros = 0;
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  // Sum per piece, then Kahan-compensated across pieces: float64 error stays near one rounding per piece.
  let sum = 0;
  let carry = 0;
  for (const chunk of chunks) {
    forEachPiece(dtype, chunk.bytes, chunk.skip, chunk.count, (values, n) => {
      let piece = 0;
      for (let i = 0; i < n; i++) {
        const x = values[i]!;
        if (x === 0) zeros++;
        if (x - x === 0) {
          finite++;
          piece += x;
          if (x < min) min = x;
          if (x > max) max = x;
        } else if (Number.isNaN(x)) nan++;
        else inf++;
      }
      count += n;
      const y = piece - carry;
      const t = sum + y;
      carry = t - sum - y;
      sum = t;
    });
  }
  const mean = finite > 0 ? sum / finite : null;
  const { bins, edges, binOf } = histogramBins(min, max, finite, requested);
  const counts = new Array<number>(bins).fill(0);
  let squares = 0;
  for (const chunk of chunks) {
    forEachPiece(dtype, chunk.bytes, chunk.skip, chunk.count, (values, n) => {
      let piece = 0;
      for (let i = 0; i < n; i++) {
        const x = values[i]!;
        if (x - x !== 0) continue;
        const d = x - mean!;
        piece += d * d;
        counts[binOf(x)]!++;
      }
      squares += piece;
    });
  }
  let exact: { exact_min: string; exact_max: string } | undefined;
  if (dtype === "I64" || dtype === "U64") {
    let lo: bigint | null = null;
    let hi: bigint | null = null;
    for (const chunk of chunks) {
      const range = exactInt64Range(dtype, chunk.bytes, chunk.skip, chunk.count);
      if (!range) continue;
      if (lo === null || range.min < lo) lo = range.min;
      if (hi === null || range.max > hi) hi = range.max;
    }
    if (lo !== null && hi !== null) exact = { exact_min: String(lo), exact_max: String(hi) };
  }
  return {
    stats: {
      count,
      finite,
      min: finite > 0 ? min : null,
      max: finite > 0 ? max : null,
      mean,
      std: finite > 0 ? Math.sqrt(squares / finite) : null,
      nan,
      inf,
      zeros,
      ...exact,
    },
    histogram: { bins, edges, counts },
    sampled,
    values: valuesPerElement(dtype) === 2 ? "complex parts" : "elements",
  };
}

export interface TensorLike {
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /** The tensor's whole bytes. */
  readonly data: Uint8Array;
}

/** Statistics and histogram of a tensor in memory (sampled when it has more than `maxSamples` elements). */
export function tensorStats(tensor: TensorLike, options: StatsOptions = {}): TensorStats {
  const plan = planSample(numelOf(tensor.shape), options.maxSamples);
  return statsOfChunks(tensor.dtype, chunksOf(tensor.dtype, tensor.data, plan), plan.sampled, options);
}

// ---- heat map ----

export const DEFAULT_HEATMAP_SIZE = 64;
export const MAX_HEATMAP_SIZE = 512;

export interface HeatmapOptions {
  /** Cells per side at most (default 64, at most 512). */
  readonly size?: number;
  /** At most this many elements are read (default 4 Mi): whole rows, evenly spaced inside each band of rows. */
  readonly maxSamples?: number;
}

/** Which rows a heat map reads: for each band of `row_step` rows, evenly spaced rows within it. */
export interface HeatmapPlan {
  readonly rows: number;
  readonly cols: number;
  readonly row_step: number;
  readonly col_step: number;
  /** Row indices to read, ascending; every band has at least one. */
  readonly readRows: readonly number[];
  /** True when some rows of a band were skipped. */
  readonly sampled: boolean;
}

export interface Heatmap {
  /** Cells down and across. */
  readonly rows: number;
  readonly cols: number;
  /** Tensor rows and columns per cell (the last cell of each side may hold fewer). */
  readonly row_step: number;
  readonly col_step: number;
  /** Mean of |x| over the finite values of each cell, row-major; null for a cell with none. */
  readonly values: (number | null)[];
  readonly sampled: false | { readonly rows_read: number; readonly of: number };
}

/** Null when the tensor is not 2-D or one row alone exceeds `maxSamples`. */
export function planHeatmap(shape: readonly number[], options: HeatmapOptions = {}): HeatmapPlan | null {
  const size = checkCount(options.size ?? DEFAULT_HEATMAP_SIZE, "heatmap size", MAX_HEATMAP_SIZE);
  const maxSamples = checkCount(options.maxSamples ?? DEFAULT_MAX_SAMPLES, "maxSamples", Number.MAX_SAFE_INTEGER);
  if (shape.length !== 2) return null;
  const [height, width] = shape as [number, number];
  if (height === 0 || width === 0) return null;
  const rowStep = Math.ceil(height / size);
  const colStep = Math.ceil(width / size);
  const rows = Math.ceil(height / rowStep);
  const cols = Math.ceil(width / colStep);
  const perBand = Math.max(1, Math.min(rowStep, Math.floor(maxSamples / (width * rows))));
  if (width > maxSamples) return null;
  const readRows: number[] = [];
  for (let band = 0; band < rows; band++) {
    const first = band * rowStep;
    const inBand = Math.min(rowStep, height - first);
    const take = Math.min(perBand, inBand);
    for (let k = 0; k < take; k++) readRows.push(first + Math.floor((k * inBand) / take));
  }
  return { rows, cols, row_step: rowStep, col_step: colStep, readRows, sampled: readRows.length < height };
}

/** The heat map from the rows `plan.readRows` names, each row's chunk in that order. */
export function heatmapOfRows(
  dtype: Dtype,
  shape: readonly number[],
  plan: HeatmapPlan,
  rowChunks: readonly ElementChunk[],
) {
  if (dtype === "C64") throw new SafetensorError("UnsupportedDtype", "no heat map for C64 (complex) tensors");
  const width = shape[1]!;
  const sums = new Float64Array(plan.rows * plan.cols);
  const counts = new Float64Array(plan.rows * plan.cols);
  plan.readRows.forEach((row, i) => {
    const chunk = rowChunks[i]!;
    const base = Math.floor(row / plan.row_step) * plan.cols;
    let column = 0;
    forEachPiece(dtype, chunk.bytes, chunk.skip, chunk.count, (values, n) => {
      for (let j = 0; j < n; j++, column++) {
        const x = values[j]!;
        if (x - x !== 0) continue;
        const cell = base + Math.floor(column / plan.col_step);
        sums[cell]! += Math.abs(x);
        counts[cell]!++;
      }
    });
    if (column !== width) throw new SafetensorError("InvalidTensor", `row ${row} has ${column} elements, not ${width}`);
  });
  const values = Array.from(sums, (s, i) => (counts[i]! > 0 ? s / counts[i]! : null));
  return {
    rows: plan.rows,
    cols: plan.cols,
    row_step: plan.row_step,
    col_step: plan.col_step,
    values,
    sampled: plan.sampled ? { rows_read: plan.readRows.length, of: shape[0]! } : false,
  } satisfies Heatmap;
}

/** Byte ranges of the rows a heat map reads, relative to the tensor's first byte. */
export function heatmapRowRanges(dtype: Dtype, shape: readonly number[], plan: HeatmapPlan) {
  return plan.readRows.map((row) => ({ ...elementBytes(dtype, row * shape[1]!, shape[1]!), count: shape[1]! }));
}

/** Heat map (block means of |x|) of a 2-D tensor in memory; null when it is not 2-D or a row is too long. */
export function heatmap(tensor: TensorLike, options: HeatmapOptions = {}): Heatmap | null {
  const plan = planHeatmap(tensor.shape, options);
  if (!plan) return null;
  const chunks = heatmapRowRanges(tensor.dtype, tensor.shape, plan).map(({ begin, end, skip, count }) => ({
    bytes: tensor.data.subarray(begin, end),
    skip,
    count,
  }));
  return heatmapOfRows(tensor.dtype, tensor.shape, plan, chunks);
}
