/**
 * What the inspector shows about a file or a checkpoint, from headers alone: exactly `inspect --json` (same code,
 * same numbers), plus where each tensor lives (which file, absolute byte range), per-file and per-dtype totals,
 * parameter counts as the Hub counts them (`params.ts`) and the metadata made readable (`metadata.ts`).
 *
 * Numbers are JSON numbers: exact up to 2^53 (dims beyond that occur only in zero-element tensors).
 *
 * Pure code: no `node:` imports, runs in browsers.
 */

import { DTYPES } from "../format/dtypes.js";
import type { Header } from "../format/header.js";
import { checkShards } from "../shards/check.js";
import type { ShardIndex } from "../shards/index-json.js";
import { inspectJson, inspectShardedJson, parameterCount } from "./inspect-format.js";
import { describeMetadata, type MetadataView } from "./metadata.js";
import { countParameters, type Quantization, type QuantizationConfig } from "./params.js";

export interface InspectTensorJson {
  readonly name: string;
  readonly dtype: string;
  readonly shape: number[];
  readonly data_offsets: [number, number];
}

/** `inspect --json` of one file. */
export interface InspectFileJson {
  readonly file_bytes: number;
  readonly header_bytes: number;
  readonly metadata: Record<string, string> | null;
  readonly parameters: number;
  readonly tensors: InspectTensorJson[];
}

/** `inspect --json` of a checkpoint (directory or index). */
export interface InspectShardedJson {
  readonly index: string | null;
  readonly metadata: Record<string, unknown>;
  readonly parameters: number;
  readonly data_bytes: number;
  readonly warnings: string[];
  readonly shards: (InspectFileJson & { readonly file: string })[];
}

/** One file of the summary (a single file's summary has one). */
export interface FilePlacement {
  /** Shard file name relative to the checkpoint, or null for a single file. */
  readonly file: string | null;
  readonly file_bytes: number;
  readonly header_bytes: number;
  /** Absolute offset of the data region: 8 + header_bytes. */
  readonly data_start: number;
  readonly tensors: number;
  readonly bytes: number;
  /** Element count, as `inspect`. */
  readonly parameters: number;
}

export interface TensorEntry extends InspectTensorJson {
  /** Index into `placement`. */
  readonly file: number;
  /** Absolute byte range [begin, end) in its file. */
  readonly byte_range: [number, number];
  readonly bytes: number;
  /** Element count. */
  readonly parameters: number;
  /** Parameters as the Hub counts them. */
  readonly counted: number;
  /** Why `counted` differs from `parameters` (`packed x8`, `not a parameter (...)`, `scalar`). */
  readonly note?: string;
}

export interface DtypeTotal {
  readonly dtype: string;
  readonly tensors: number;
  readonly bytes: number;
  readonly parameters: number;
  readonly counted: number;
}

export interface SummaryExtras {
  readonly source: string;
  readonly totals: {
    readonly files: number;
    readonly file_bytes: number;
    readonly header_bytes: number;
    readonly data_bytes: number;
    readonly tensors: number;
    readonly parameters: number;
  };
  readonly hub_parameters: {
    readonly total: number;
    readonly by_dtype: Record<string, number>;
    readonly quantization: Quantization | null;
  };
  /** Per dtype, in `inspect`'s table order (dtype rank, widest first). */
  readonly dtypes: DtypeTotal[];
  readonly placement: FilePlacement[];
  /** Every tensor: file order for a file, the index's order for a checkpoint. */
  readonly tensor_index: TensorEntry[];
  /** The file's `__metadata__` (a checkpoint: its first shard's) as rows and surfaced facts. */
  readonly metadata_view: MetadataView;
}

export type ViewSummary =
  | ({ readonly kind: "file" } & InspectFileJson & SummaryExtras)
  | ({ readonly kind: "sharded" } & InspectShardedJson & SummaryExtras);

export interface SummaryOptions {
  /** Shown as the summary's `source` (a file name, or a URL without its query). */
  readonly source?: string;
  /** `quantization_config` from config.json; undefined infers the layout from the tensors, null counts elements. */
  readonly quantization?: QuantizationConfig | null;
}

const dtypeRank = (dtype: string) => DTYPES.indexOf(dtype as (typeof DTYPES)[number]);

function placementOf(file: string | null, header: Header): FilePlacement {
  return {
    file,
    file_bytes: header.fileLength,
    header_bytes: header.headerLength,
    data_start: header.dataStart,
    tensors: header.tensors.size,
    bytes: header.dataLength,
    parameters: Number(parameterCount(header)),
  };
}

function extras(
  source: string,
  files: readonly (readonly [string | null, Header])[],
  order: Iterable<readonly [string, number]>,
  options: SummaryOptions,
): SummaryExtras {
  const placement = files.map(([file, header]) => placementOf(file, header));
  const everything = files.flatMap(([, header]) => [...header.tensors.values()]);
  const counts = countParameters(everything, { quantization: options.quantization });
  const tensorIndex: TensorEntry[] = [];
  const dtypes = new Map<string, { tensors: number; bytes: number; parameters: number; counted: number }>();
  for (const [name, fileIndex] of order) {
    const header = files[fileIndex]![1];
    const info = header.tensors.get(name)!;
    const shape = (info.exactShape ?? info.shape).map(Number);
    const parameters = shape.reduce((a, b) => a * b, 1);
    const counted = counts.perTensor.get(name) ?? 0;
    const note = counts.notes.get(name);
    const begin = header.dataStart + info.dataOffsets[0];
    tensorIndex.push({
      name,
      dtype: info.dtype,
      shape,
      data_offsets: [info.dataOffsets[0], info.dataOffsets[1]],
      file: fileIndex,
      byte_range: [begin, begin + info.byteLength],
      bytes: info.byteLength,
      parameters,
      counted,
      ...(note === undefined ? {} : { note }),
    });
    const total = dtypes.get(info.dtype) ?? { tensors: 0, bytes: 0, parameters: 0, counted: 0 };
    total.tensors++;
    total.bytes += info.byteLength;
    total.parameters += parameters;
    total.counted += counted;
    dtypes.set(info.dtype, total);
  }
  const byDtype: Record<string, number> = {};
  for (const [dtype, n] of counts.byDtype) byDtype[dtype] = n;
  return {
    source,
    totals: {
      files: files.length,
      file_bytes: placement.reduce((s, p) => s + p.file_bytes, 0),
      header_bytes: placement.reduce((s, p) => s + p.header_bytes, 0),
      data_bytes: tensorIndex.reduce((s, t) => s + t.bytes, 0),
      tensors: tensorIndex.length,
      parameters: tensorIndex.reduce((s, t) => s + t.parameters, 0),
    },
    hub_parameters: { total: counts.total, by_dtype: byDtype, quantization: counts.quantization },
    dtypes: [...dtypes].map(([dtype, t]) => ({ dtype, ...t })).sort((a, b) => dtypeRank(b.dtype) - dtypeRank(a.dtype)),
    placement,
    tensor_index: tensorIndex,
    metadata_view: describeMetadata(files[0]?.[1].metadata ?? null),
  };
}

/** Summary of one file from its header. */
export function summarizeFile(header: Header, options: SummaryOptions = {}): ViewSummary {
  const inspect = JSON.parse(inspectJson(header)) as InspectFileJson;
  const order = [...header.tensors.keys()].map((name) => [name, 0] as const);
  return { kind: "file", ...inspect, ...extras(options.source ?? "", [[null, header]], order, options) };
}

export interface ShardedInput {
  /** The index file's path or URL, or null for a directory holding a single `model.safetensors`. */
  readonly indexPath: string | null;
  readonly index: ShardIndex;
  /** Every shard file's header. */
  readonly headers: ReadonlyMap<string, Header>;
}

/**
 * Summary of a checkpoint from its index and every shard's header, checked as `openSharded` checks them (a listed
 * tensor its shard lacks or a tensor in two shards throws `InvalidIndex`; other problems are `warnings`).
 */
export function summarizeSharded(input: ShardedInput, options: SummaryOptions = {}): ViewSummary {
  const checked = checkShards(input.index, input.headers);
  const headers = input.index.files.map((file) => [file, input.headers.get(file)!] as const);
  const inspect = JSON.parse(
    inspectShardedJson({
      indexPath: input.indexPath,
      metadata: input.index.metadata,
      headers,
      dataBytes: checked.dataBytes,
      warnings: checked.warnings,
    }),
  ) as InspectShardedJson;
  const fileIndex = new Map(input.index.files.map((file, i) => [file, i]));
  const order = [...checked.locations].map(([name, location]) => [name, fileIndex.get(location.file)!] as const);
  return { kind: "sharded", ...inspect, ...extras(options.source ?? input.indexPath ?? "", headers, order, options) };
}
