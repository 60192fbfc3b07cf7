/**
 * Files dropped onto (or picked in) the page, read right here with the library's browser build: `open(file)` reads
 * the header and then only the picked tensor's bytes (Blob slices), so a 10 GB checkpoint is never read whole. A
 * shard set is its index plus the shard files, opened with `openShardedAsync` over those Files.
 */
import { type AsyncSafetensorsFile, open } from "../src/async-file.js";
import { SafetensorError } from "../src/format/errors.js";
import type { Header } from "../src/format/header.js";
import { type AsyncShardedFile, openShardedAsync } from "../src/remote/sharded.js";
import { Tensor } from "../src/tensor.js";
import { heatmap, tensorStats } from "./interim-stats.js";
import type { Inspectable, ShardRow, Summary, SummaryTensor, TensorDetail, TensorRequest } from "./model.js";

/** Most bytes read for one tensor's stats; larger tensors are sampled by rows (or by evenly spaced runs when 1-D). */
export const MAX_STATS_BYTES = 16 << 20;
const RUNS = 64;

function tensorsOf(header: Header, shard?: string): SummaryTensor[] {
  return [...header.tensors.values()].map((info) => ({
    name: info.name,
    dtype: info.dtype,
    shape: [...info.shape],
    data_offsets: [info.dataOffsets[0], info.dataOffsets[1]],
    ...(shard === undefined ? {} : { shard }),
  }));
}

function metadataObject(metadata: ReadonlyMap<string, unknown> | null): Record<string, unknown> | null {
  if (!metadata) return null;
  // An object with a null prototype: `__proto__` is a real metadata key.
  const out: Record<string, unknown> = Object.create(null);
  for (const [k, v] of metadata) out[k] = v instanceof Map ? Object.fromEntries(v) : v;
  return out;
}

const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);
const parametersOf = (tensors: readonly SummaryTensor[]) => tensors.reduce((a, t) => a + numel(t.shape), 0);

/** Reads a tensor, or a sample of it when it is larger than `MAX_STATS_BYTES`. */
async function readSample(
  file: AsyncSafetensorsFile,
  name: string,
): Promise<{ tensor: Tensor; sampled: false | Record<string, unknown>; rowStep: number }> {
  const info = file.info(name);
  const shape = info.shape;
  if (info.byteLength <= MAX_STATS_BYTES || shape.length === 0) {
    return { tensor: await file.getTensor(name), sampled: false, rowStep: 1 };
  }
  const ratio = Math.ceil(info.byteLength / MAX_STATS_BYTES);
  if (shape.length >= 2 && shape[0]! >= 2) {
    const step = Math.min(ratio, shape[0]!);
    const tensor = await file.getSlice(name).get(`::${step}`);
    return {
      tensor,
      sampled: { method: "rows", row_step: step, rows: tensor.shape[0], of_rows: shape[0] },
      rowStep: step,
    };
  }
  // 1-D: RUNS evenly spaced contiguous runs (whole bytes even for 4- and 6-bit dtypes: runs of 8 elements).
  const total = shape[0]!;
  const want = Math.ceil(total / ratio);
  const run = Math.max(8, Math.floor(want / RUNS / 8) * 8);
  const gap = Math.floor(total / RUNS / 8) * 8;
  const pieces: Tensor[] = [];
  for (let i = 0; i < RUNS && i * gap + run <= total; i++) {
    pieces.push(await file.getSlice(name).get(`${i * gap}:${i * gap + run}`));
  }
  const bytes = new Uint8Array(pieces.reduce((a, p) => a + p.data.byteLength, 0));
  let at = 0;
  for (const p of pieces) {
    bytes.set(p.data, at);
    at += p.data.byteLength;
  }
  const tensor = new Tensor(info.dtype, [pieces.length * run], bytes);
  return {
    tensor,
    sampled: { method: "runs", runs: pieces.length, run_length: run, elements: tensor.shape[0] },
    rowStep: 1,
  };
}

async function detailOf(
  file: AsyncSafetensorsFile,
  name: string,
  request: TensorRequest,
  shard?: string,
): Promise<TensorDetail> {
  const info = file.info(name);
  const range = file.byteRange(name);
  const { tensor, sampled, rowStep } = await readSample(file, name);
  const computed = tensorStats(tensor, { bins: request.bins });
  const detail: TensorDetail = {
    name,
    dtype: info.dtype,
    shape: [...info.shape],
    byte_range: [range.offset, range.offset + range.length],
    sampled: sampled || computed.sampled,
    stats: computed.stats,
    histogram: computed.histogram,
    ...(shard === undefined ? {} : { shard }),
  };
  if (info.shape.length === 2 && request.heatmap > 0) {
    const map = heatmap(tensor, { size: request.heatmap });
    if (map) detail.heatmap = { ...map, row_step: map.row_step * rowStep };
  }
  return detail;
}

class LocalFile implements Inspectable {
  constructor(
    readonly label: string,
    private readonly file: AsyncSafetensorsFile,
  ) {}

  async summary(): Promise<Summary> {
    const header = this.file.header;
    const tensors = tensorsOf(header);
    return {
      file: this.label,
      file_bytes: header.fileLength,
      header_bytes: header.headerLength,
      metadata: metadataObject(header.metadata),
      parameters: parametersOf(tensors),
      tensors,
    };
  }

  tensor(name: string, request: TensorRequest): Promise<TensorDetail> {
    return detailOf(this.file, name, request);
  }
}

class LocalShards implements Inspectable {
  constructor(
    readonly label: string,
    private readonly set: AsyncShardedFile,
  ) {}

  async summary(): Promise<Summary> {
    const tensors: SummaryTensor[] = [];
    const shards: ShardRow[] = [];
    let fileBytes = 0;
    let headerBytes = 0;
    for (const file of this.set.shards) {
      const header = this.set.shard(file).header;
      const own = tensorsOf(header, file);
      tensors.push(...own);
      fileBytes += header.fileLength;
      headerBytes += header.headerLength;
      shards.push({ file, file_bytes: header.fileLength, header_bytes: header.headerLength, tensors: own.length });
    }
    return {
      index: this.label,
      file_bytes: fileBytes,
      header_bytes: headerBytes,
      metadata: metadataObject(this.set.metadata()),
      parameters: parametersOf(tensors),
      tensors,
      shards,
      warnings: [...this.set.warnings],
    };
  }

  tensor(name: string, request: TensorRequest): Promise<TensorDetail> {
    const shard = this.set.shardOf(name);
    return detailOf(this.set.shard(shard), name, request, shard);
  }
}

/** One .safetensors file, or a shard set (an index JSON and the shards it names, by file name). */
export async function openDropped(files: readonly File[]): Promise<Inspectable> {
  const indexes = files.filter((f) => f.name.endsWith(".json"));
  if (indexes.length > 1) {
    throw new SafetensorError(
      "InvalidIndex",
      `drop one index at a time (got ${indexes.map((f) => f.name).join(", ")})`,
    );
  }
  if (indexes.length === 1) {
    const index = indexes[0]!;
    const byName = new Map(files.map((f) => [f.name, f]));
    const set = await openShardedAsync({
      readIndex: () => index.text(),
      openShard: (name) => {
        // Dropped files carry no folders: a shard is found by its base name.
        const file = byName.get(name.split("/").pop()!);
        if (!file) throw new SafetensorError("InvalidIndex", `the index names ${name}, which was not dropped with it`);
        return open(file);
      },
    });
    return new LocalShards(index.name, set);
  }
  if (files.length !== 1) {
    throw new SafetensorError(
      "InvalidOption",
      `drop one .safetensors file, or a shard set with its index (.json); got ${files.length} files without an index`,
    );
  }
  return new LocalFile(files[0]!.name, await open(files[0]!));
}
