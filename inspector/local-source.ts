/**
 * Files dropped onto (or picked in) the page, read right here with the library's browser build: `open(file)` reads
 * the header and then only the picked tensor's bytes (Blob slices), so a 10 GB checkpoint is never read whole. A
 * shard set is its index plus the shard files, each opened with `open(file)`. Summaries and stats come from the same
 * pure modules the `view` server uses (src/view), so both modes show the same numbers.
 */
import { type AsyncSafetensorsFile, open } from "../src/async-file.js";
import type { Dtype } from "../src/format/dtypes.js";
import { SafetensorError } from "../src/format/errors.js";
import { parseIndex } from "../src/shards/index-json.js";
import { elementBytes } from "../src/view/decode.js";
import { heatmapOfRows, heatmapRowRanges, numelOf, planHeatmap, planSample, statsOfChunks } from "../src/view/stats.js";
import { summarizeFile, summarizeSharded, type ViewSummary } from "../src/view/summary.js";
import type { Inspectable, TensorReport, TensorRequest } from "./model.js";

/**
 * Blob reads in flight per file (the library's default for local sources is 4). Each read is a round trip to the
 * browser's file reader: picking a 10 GiB tensor (64 sampled blocks + heat-map rows) took ~9 s in headless Chromium
 * with 4 reads in flight and 4 Mi heat-map samples, ~3.7 s with 16 and 1 Mi (test/inspector.test.ts, on a machine
 * at load ~18).
 */
const BLOB_READS = { concurrency: 16 };
/**
 * Elements read for a heat map: 1 Mi (the server reads up to 4 Mi). A heat map of a tall tensor reads whole rows
 * spread over its bands, one read each; a quarter of the server's rows keeps a 10 GiB tensor at ~1,000 reads, and
 * the page says how many rows it read.
 */
const HEATMAP_SAMPLES = 1 << 20;

/**
 * The tensor's stats (and heat map) from its bytes only: sampled runs when it is large, as `/api/tensor` does.
 * TODO(viewsrv): the same as node-server.ts's tensorReport; use the pure one once it moves out of the Node server.
 */
async function report(
  summary: ViewSummary,
  files: readonly AsyncSafetensorsFile[],
  name: string,
  request: TensorRequest,
): Promise<TensorReport> {
  const entry = summary.tensor_index.find((t) => t.name === name);
  if (!entry) throw new SafetensorError("TensorNotFound", `no tensor named ${JSON.stringify(name)}`, { tensor: name });
  const file = files[entry.file]!;
  const dtype = entry.dtype as Dtype;
  const begin = entry.byte_range[0];
  const absolute = (r: { begin: number; end: number }) => ({ start: begin + r.begin, end: begin + r.end });
  const plan = planSample(numelOf(entry.shape));
  const runs = plan.runs.map(({ start, count }) => ({ ...elementBytes(dtype, start, count), count }));
  const bytes = await file.readRanges(runs.map(absolute));
  const result = statsOfChunks(
    dtype,
    runs.map((r, i) => ({ bytes: bytes[i]!, skip: r.skip, count: r.count })),
    plan.sampled,
    { bins: request.bins },
  );
  let heatmap: TensorReport["heatmap"] = null;
  const mapPlan =
    dtype === "C64" ? null : planHeatmap(entry.shape, { size: request.heatmap, maxSamples: HEATMAP_SAMPLES });
  if (mapPlan) {
    const rows = heatmapRowRanges(dtype, entry.shape, mapPlan);
    const rowBytes = await file.readRanges(rows.map(absolute));
    const chunks = rows.map((r, i) => ({ bytes: rowBytes[i]!, skip: r.skip, count: r.count }));
    heatmap = heatmapOfRows(dtype, entry.shape, mapPlan, chunks);
  }
  return {
    name,
    dtype: entry.dtype,
    shape: entry.shape,
    file: summary.placement[entry.file]!.file,
    byte_range: entry.byte_range,
    sampled: result.sampled,
    values: result.values,
    stats: result.stats,
    histogram: result.histogram,
    heatmap,
  };
}

class Dropped implements Inspectable {
  constructor(
    readonly label: string,
    private readonly shown: ViewSummary,
    private readonly files: readonly AsyncSafetensorsFile[],
  ) {}

  async summary(): Promise<ViewSummary> {
    return this.shown;
  }

  tensor(name: string, request: TensorRequest): Promise<TensorReport> {
    return report(this.shown, this.files, name, request);
  }
}

/** One .safetensors file, or a shard set (an index JSON and the shards it names, matched by file name). */
export async function openDropped(files: readonly File[]): Promise<Inspectable> {
  const indexes = files.filter((f) => f.name.endsWith(".json"));
  if (indexes.length > 1) {
    throw new SafetensorError(
      "InvalidIndex",
      `drop one index at a time (got ${indexes.map((f) => f.name).join(", ")})`,
    );
  }
  if (indexes.length === 0) {
    if (files.length !== 1) {
      throw new SafetensorError(
        "InvalidOption",
        `drop one .safetensors file, or a shard set with its index (.json); got ${files.length} files without an index`,
      );
    }
    const file = await open(files[0]!, BLOB_READS);
    return new Dropped(files[0]!.name, summarizeFile(file.header, { source: files[0]!.name }), [file]);
  }
  const indexFile = indexes[0]!;
  const index = parseIndex(await indexFile.text());
  // Dropped files carry no folders: a shard is found by its base name.
  const byName = new Map(files.map((f) => [f.name, f]));
  const missing = index.files.filter((name) => !byName.has(name.split("/").pop()!));
  if (missing.length) {
    throw new SafetensorError(
      "InvalidIndex",
      `the index names ${missing.length} shard(s) not dropped with it: ${missing.slice(0, 3).join(", ")}${missing.length > 3 ? ", …" : ""}`,
    );
  }
  const opened = await Promise.all(index.files.map((name) => open(byName.get(name.split("/").pop()!)!, BLOB_READS)));
  const headers = new Map(index.files.map((name, i) => [name, opened[i]!.header]));
  const summary = summarizeSharded({ indexPath: indexFile.name, index, headers }, { source: indexFile.name });
  // `placement` follows the index's file order, as `opened` does.
  return new Dropped(indexFile.name, summary, opened);
}
