/**
 * `extractLora` (Node): a PEFT LoRA adapter from the difference of a fine-tuned model and its base, by truncated SVD
 * of each linear layer's ΔW (`extract.ts` says which tensors and how, `svd.ts` computes). One module at a time:
 * memory is the largest ΔW in float32, its transposed copy and its Gram matrix (a small multiple of the largest
 * tensor) plus the factors made so far (the adapter itself). Tensors saved whole are streamed from the fine-tune at
 * write time. The adapter directory is committed at once (`shards/save-commit.ts`: old files or new, never a mix).
 */
import { fromFloat32, toFloat32 } from "../codecs/index.js";
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { throwIfAborted } from "../io/async-source.js";
import type { NodeOpenOptions } from "../read/node-async.js";
import { elementBytes, elementCount } from "./execute.js";
import {
  deltaDtype,
  type ExtractPlanOptions,
  extractedAdapterConfig,
  keptRank,
  type LoraModulePlan,
  loraFactors,
  loraTensorNames,
  planExtraction,
  savedTensorName,
  tiedOutputEmbedding,
} from "./extract.js";
import { type OutputTensorSpec, writeCheckpoint } from "./node-output.js";
import { type ModelSource, openModel } from "./node-source.js";
import { frobeniusSquared, type SvdMethod, truncatedSvd } from "./svd.js";

export interface ExtractProgress {
  modulesDone: number;
  modulesTotal: number;
  /** Bytes read and written so far, and in all (the bar's measure). */
  bytesDone: number;
  bytesTotal: number;
}

export interface ExtractLoraOptions extends ExtractPlanOptions, NodeOpenOptions {
  /** The factors' dtype (default: that of TUNED − BASE, as torch computes it: the models' dtype when they agree). */
  dtype?: "F32" | "F16" | "BF16";
  /** `auto` (default): exact SVD while a matrix's m·n·min(m, n) is at most `exactMaxWork`, randomized above. */
  svd?: SvdMethod;
  exactMaxWork?: number;
  /** Randomized SVD: extra columns (default 16), power iterations (default 4), seed (default 0). */
  oversample?: number;
  powerIterations?: number;
  seed?: number;
  fsync?: boolean;
  onProgress?: (progress: ExtractProgress) => void;
}

export interface ExtractedModule {
  module: string;
  rank: number;
  /** Share of ‖ΔW‖²_F the kept singular values hold (1 when ΔW is zero): 1 − (error / ‖ΔW‖)². */
  retained: number;
  method: "exact" | "randomized";
}

export interface ExtractSummary {
  files: string[];
  /** The adapter's r (= lora_alpha): the largest kept rank. */
  rank: number;
  modules: ExtractedModule[];
  /** modules_to_save keys, and the tensors saved whole. */
  modulesToSave: string[];
  saved: number;
  /** Fine-tune tensors in the adapter neither as factors nor whole (excluded, buffers). */
  skipped: string[];
  warnings: string[];
  bytesRead: number;
  bytesWritten: number;
}

/** Row blocks of this many bytes are read at a time to build ΔW (16 MiB). */
const READ_PIECE = 16 << 20;

/** TUNED − BASE of one tensor as float32 (each difference rounded once from float64), read by pieces. */
async function readDelta(
  base: ModelSource,
  tuned: ModelSource,
  name: string,
  baseDtype: Dtype,
  tunedDtype: Dtype,
  count: number,
  signal: AbortSignal | undefined,
  counted: (bytes: number) => void,
): Promise<Float32Array> {
  const out = new Float32Array(count);
  const bb = elementBytes(baseDtype);
  const tb = elementBytes(tunedDtype);
  const step = Math.max(1, Math.floor(READ_PIECE / Math.max(bb, tb)));
  for (let first = 0; first < count; first += step) {
    throwIfAborted(signal);
    const n = Math.min(step, count - first);
    const [rb, rt] = await Promise.all([
      base.read(name, first * bb, n * bb, signal),
      tuned.read(name, first * tb, n * tb, signal),
    ]);
    counted(rb.length + rt.length);
    const b = toFloat32(baseDtype, rb, { count: n });
    const t = toFloat32(tunedDtype, rt, { count: n });
    for (let i = 0; i < n; i++) out[first + i] = t[i]! - b[i]!;
  }
  return out;
}

function transposed(a: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(a.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j * rows + i] = a[i * cols + j]!;
  return t;
}

function encode(values: Float32Array, dtype: Dtype): Uint8Array {
  if (dtype === "F32") return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  return fromFloat32(dtype, values);
}

interface OutputTensor extends OutputTensorSpec {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: number[];
  /** Bytes made already (factors, bias deltas), or the fine-tune's tensor to copy. */
  bytes: Uint8Array | null;
  copyOf: string | null;
}

/** Extract a LoRA adapter of TUNED − BASE into the directory `outDir` (adapter_config.json, adapter_model.safetensors). */
export async function extractLora(
  base: string,
  tuned: string,
  outDir: string,
  options: ExtractLoraOptions,
): Promise<ExtractSummary> {
  const baseModel = await openModel(base, options);
  try {
    const tunedModel = await openModel(tuned, options);
    try {
      return await extractOpen(base, baseModel, tunedModel, outDir, options);
    } finally {
      await tunedModel.close();
    }
  } finally {
    await baseModel.close();
  }
}

/** `model` with a tied `lm_head.weight` (see `tiedOutputEmbedding`) as a tensor of its own, read from its target. */
function withTiedHead(model: ModelSource): ModelSource {
  const tied = tiedOutputEmbedding(model.catalog.tensors, model.config);
  if (tied === null) return model;
  const tensors = new Map(model.catalog.tensors);
  tensors.set(tied.name, tensors.get(tied.target)!);
  return {
    ...model,
    catalog: { ...model.catalog, tensors },
    read: (name, byteOffset, byteLength, signal) =>
      model.read(name === tied.name ? tied.target : name, byteOffset, byteLength, signal),
  };
}

async function extractOpen(
  baseLocation: string,
  baseModel: ModelSource,
  tunedModel: ModelSource,
  outDir: string,
  options: ExtractLoraOptions,
): Promise<ExtractSummary> {
  const base = withTiedHead(baseModel);
  const tuned = withTiedHead(tunedModel);
  const plan = planExtraction(base.catalog.tensors, tuned.catalog.tensors, options);
  const loras = plan.items.filter((item): item is LoraModulePlan => item.kind === "lora");
  const tunedInfo = (name: string) => tuned.catalog.tensors.get(name)!;
  const bytesOf = (name: string, m: ModelSource) => {
    const t = m.catalog.tensors.get(name)!;
    return elementCount(t.shape) * elementBytes(t.dtype);
  };
  let bytesRead = 0;
  let bytesWritten = 0;
  const progress: ExtractProgress = { modulesDone: 0, modulesTotal: loras.length, bytesDone: 0, bytesTotal: 0 };
  for (const item of plan.items) {
    if (item.kind === "save") progress.bytesTotal += 2 * bytesOf(item.tensor, tuned);
    else {
      progress.bytesTotal += bytesOf(item.weight, base) + bytesOf(item.weight, tuned);
      if (item.bias !== null) progress.bytesTotal += bytesOf(item.bias, base) + bytesOf(item.bias, tuned);
    }
  }
  const report = (bytes: number) => {
    progress.bytesDone += bytes;
    options.onProgress?.(progress);
  };
  const read = (bytes: number) => {
    bytesRead += bytes;
    report(bytes);
  };
  const outputs: OutputTensor[] = [];
  const modules: ExtractedModule[] = [];
  const ranks = new Map<string, number>();
  const biases: { name: string; dtype: Dtype; values: Float32Array }[] = [];
  const warnings = [...plan.warnings];
  for (const item of plan.items) {
    throwIfAborted(options.signal);
    if (item.kind === "save") {
      const info = tunedInfo(item.tensor);
      outputs.push({
        name: savedTensorName(item.tensor),
        dtype: info.dtype,
        shape: [...info.shape],
        bytes: null,
        copyOf: item.tensor,
      });
      continue;
    }
    const [rows, cols] = item.shape;
    const dtype = options.dtype ?? deltaDtype(item.baseDtype, item.tunedDtype);
    if (dtype === "F64") {
      throw new SafetensorError(
        "UnsupportedDtype",
        `${item.weight} is F64: pass dtype F32, F16 or BF16 for the factors`,
      );
    }
    let delta = await readDelta(
      base,
      tuned,
      item.weight,
      item.baseDtype,
      item.tunedDtype,
      rows * cols,
      options.signal,
      read,
    );
    // An embedding's update is factored as ΔWᵀ (dim × vocab): PEFT's lora_embedding_A is r × vocab.
    const [m, n] = item.embedding ? [cols, rows] : [rows, cols];
    if (item.embedding) delta = transposed(delta, rows, cols);
    const total = frobeniusSquared(delta);
    const svd = truncatedSvd(delta, m, n, item.rank, {
      method: options.svd,
      exactMaxWork: options.exactMaxWork,
      oversample: options.oversample,
      powerIterations: options.powerIterations,
      seed: options.seed,
    });
    delta = new Float32Array(0);
    const rank = keptRank(svd, options.svEpsilon ?? 0);
    const { a, b } = loraFactors(svd, m, n, rank, options.distributeScale ?? true);
    let kept = 0;
    for (let i = 0; i < rank; i++) kept += svd.s[i]! * svd.s[i]!;
    const names = loraTensorNames(item);
    outputs.push({ name: names.a, dtype, shape: [rank, n], bytes: encode(a, dtype), copyOf: null });
    outputs.push({ name: names.b, dtype, shape: [m, rank], bytes: encode(b, dtype), copyOf: null });
    if (item.bias !== null) {
      const info = tunedInfo(item.bias);
      const values = await readDelta(
        base,
        tuned,
        item.bias,
        base.catalog.tensors.get(item.bias)!.dtype,
        info.dtype,
        info.shape[0]!,
        options.signal,
        read,
      );
      biases.push({ name: names.bias, dtype, values });
    }
    ranks.set(item.module, rank);
    modules.push({
      module: item.module,
      rank,
      retained: total === 0 ? 1 : Math.min(1, kept / total),
      method: svd.method,
    });
    progress.modulesDone++;
    options.onProgress?.(progress);
  }
  // PEFT's lora_bias puts a lora_B.bias on every target module and cannot merge one into a layer without a bias.
  const changed = biases.filter((b) => b.values.some((v) => v !== 0));
  const loraBias = changed.length > 0 && biases.length === loras.length;
  if (loraBias) {
    for (const b of biases)
      outputs.push({ ...b, shape: [b.values.length], bytes: encode(b.values, b.dtype), copyOf: null });
  } else if (changed.length > 0) {
    const largest = Math.max(...changed.map((b) => b.values.reduce((m, v) => Math.max(m, Math.abs(v)), 0)));
    warnings.push(
      `the biases of ${changed.length} factored modules changed (by up to ${largest}) and are left out: PEFT's ` +
        "lora_bias needs a bias in every target module; --save-module NAME keeps such modules whole",
    );
  }
  const config = extractedAdapterConfig({ base: baseLocation, ranks, modulesToSave: plan.modulesToSave, loraBias });
  const sideFiles: [string, Uint8Array][] = [
    ["adapter_config.json", new TextEncoder().encode(`${JSON.stringify(config, null, 2)}\n`)],
  ];
  const byName = new Map(outputs.map((t) => [t.name, t]));
  // One file, as PEFT writes and reads adapters (it reads no adapter index).
  const files = await writeCheckpoint(
    outDir,
    outputs,
    sideFiles,
    {
      fsync: options.fsync,
      maxShardSize: Number.MAX_SAFE_INTEGER,
      filenamePattern: "adapter_model{suffix}.safetensors",
    },
    async (spec, write) => {
      const t = byName.get(spec.name)!;
      if (t.bytes !== null) {
        write(t.bytes, 0);
        bytesWritten += t.bytes.length;
        return;
      }
      const size = elementCount(t.shape) * elementBytes(t.dtype);
      for (let at = 0; at < size; at += READ_PIECE) {
        throwIfAborted(options.signal);
        const bytes = await tuned.read(t.copyOf!, at, Math.min(READ_PIECE, size - at), options.signal);
        read(bytes.length);
        write(bytes, at);
        bytesWritten += bytes.length;
        report(bytes.length);
      }
    },
  );
  return {
    files,
    rank: Number(config.r),
    modules,
    modulesToSave: [...plan.modulesToSave],
    saved: plan.items.filter((item) => item.kind === "save").length,
    skipped: [...plan.skipped],
    warnings,
    bytesRead,
    bytesWritten,
  };
}
