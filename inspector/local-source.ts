/**
 * Files dropped onto (or picked in) the page, read right here with the library's browser build: `open(file)` reads
 * the header and then only the picked tensor's bytes (Blob slices), so a 10 GB checkpoint is never read whole. A
 * shard set is its index plus the shard files, each opened with `open(file)`. Summaries and stats come from the same
 * pure modules the `view` server uses (src/view), so both modes show the same numbers.
 */

import { SafetensorError } from "../src/format/errors.js";
import { type AsyncSafetensorsFile, open } from "../src/read/async-file.js";
import { parseIndex } from "../src/shards/index-json.js";
import { tensorReport, type ViewTarget } from "../src/view/report.js";
import { summarizeFile, summarizeSharded, type ViewSummary } from "../src/view/summary.js";
import type { Inspectable, TensorReport, TensorRequest } from "./model.js";

/**
 * Blob reads in flight per file (the library's default for local sources is 4). Each read is a round trip to the
 * browser's file reader: picking a tall 10 GiB tensor ([2621440, 1024] F32: 64 sampled blocks + 4,096 heat-map
 * rows) took ~9 s in headless Chromium with 4 reads in flight, ~5 s with 16 (a machine at load ~18).
 */
const BLOB_READS = { concurrency: 16 };

/** Dropped files answer as `/api/tensor` does: the same `tensorReport` over Blob reads instead of file reads. */
class Dropped implements Inspectable {
  private readonly target: ViewTarget;

  constructor(
    readonly label: string,
    summary: ViewSummary,
    files: readonly AsyncSafetensorsFile[],
  ) {
    this.target = { summary, readRanges: (file, ranges) => files[file]!.readRanges(ranges) };
  }

  async summary(): Promise<ViewSummary> {
    return this.target.summary;
  }

  tensor(name: string, request: TensorRequest): Promise<TensorReport> {
    return tensorReport(this.target, name, request);
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
