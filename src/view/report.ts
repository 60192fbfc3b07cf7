/**
 * `/api/tensor`'s answer, for the server and for files dropped on the page alike: a tensor's statistics, histogram
 * and (2-D) heat map, reading only that tensor's bytes through `readRanges` (all of them up to `maxSamples`
 * elements, else the blocks of `planSample`; for the heat map, the rows of `planHeatmap`).
 *
 * Pure code: no `node:` imports, runs in browsers.
 */
import { tensorNotFound } from "../format/suggest.js";
import { elementBytes } from "./decode.js";
import {
  DEFAULT_MAX_SAMPLES,
  type Heatmap,
  heatmapOfRows,
  heatmapRowRanges,
  numelOf,
  planHeatmap,
  planSample,
  statsOfChunks,
  type TensorStats,
} from "./stats.js";
import type { TensorEntry, ViewSummary } from "./summary.js";

/** Absolute byte range [start, end) of one file. */
export interface ByteRange {
  readonly start: number;
  readonly end: number;
}

/** What tensor reports read from: a summary, and byte ranges of each of its files. */
export interface ViewTarget {
  readonly summary: ViewSummary;
  /** Absolute byte ranges of file `file` (an index into `summary.placement`), one buffer per range, in order. */
  readRanges(file: number, ranges: readonly ByteRange[]): Promise<Uint8Array[]>;
}

export interface TensorReport {
  readonly name: string;
  readonly dtype: string;
  readonly shape: number[];
  /** The shard file holding it, or null for a single file. */
  readonly file: string | null;
  readonly byte_range: [number, number];
  readonly sampled: TensorStats["sampled"];
  readonly values: TensorStats["values"];
  readonly stats: TensorStats["stats"];
  readonly histogram: TensorStats["histogram"];
  /** Present when asked for: null when the tensor is not 2-D (or C64, or one row exceeds maxSamples). */
  readonly heatmap?: Heatmap | null;
}

export interface TensorQuery {
  readonly bins?: number;
  readonly heatmap?: number;
  readonly maxSamples?: number;
}

const entries = new WeakMap<ViewSummary, Map<string, TensorEntry>>();

/** `/api/tensor`'s answer: the tensor's statistics and histogram (and heat map), reading only its bytes. */
export async function tensorReport(target: ViewTarget, name: string, query: TensorQuery = {}): Promise<TensorReport> {
  let byName = entries.get(target.summary);
  if (!byName) {
    byName = new Map(target.summary.tensor_index.map((t) => [t.name, t]));
    entries.set(target.summary, byName);
  }
  const entry = byName.get(name);
  if (!entry) throw tensorNotFound(name, byName.keys());
  const dtype = entry.dtype as Parameters<typeof elementBytes>[0];
  const maxSamples = query.maxSamples ?? DEFAULT_MAX_SAMPLES;
  const begin = entry.byte_range[0];
  const absolute = (r: { begin: number; end: number }) => ({ start: begin + r.begin, end: begin + r.end });
  const plan = planSample(numelOf(entry.shape), maxSamples);
  const runs = plan.runs.map(({ start, count }) => ({ ...elementBytes(dtype, start, count), count }));
  const bytes = await target.readRanges(entry.file, runs.map(absolute));
  const chunks = runs.map((r, i) => ({ bytes: bytes[i]!, skip: r.skip, count: r.count }));
  const result = statsOfChunks(dtype, chunks, plan.sampled, { bins: query.bins });
  let heatmap: Heatmap | null | undefined;
  if (query.heatmap !== undefined) {
    const mapPlan = dtype === "C64" ? null : planHeatmap(entry.shape, { size: query.heatmap, maxSamples });
    if (mapPlan) {
      const rows = heatmapRowRanges(dtype, entry.shape, mapPlan);
      const rowBytes = await target.readRanges(entry.file, rows.map(absolute));
      heatmap = heatmapOfRows(
        dtype,
        entry.shape,
        mapPlan,
        rows.map((r, i) => ({ bytes: rowBytes[i]!, skip: r.skip, count: r.count })),
      );
    } else heatmap = null;
  }
  return {
    name,
    dtype: entry.dtype,
    shape: entry.shape,
    file: target.summary.placement[entry.file]!.file,
    byte_range: entry.byte_range,
    sampled: result.sampled,
    values: result.values,
    stats: result.stats,
    histogram: result.histogram,
    ...(heatmap === undefined ? {} : { heatmap }),
  };
}
