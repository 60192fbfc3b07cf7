/**
 * A conversion's plan: which GGUF tensors come from which checkpoint tensors (name, type, dimensions, the row
 * permutation and value changes on the way) and the whole metadata, as llama.cpp's converter decides them. Pure:
 * config, tokenizer files and tensor infos in, a plan out; no tensor bytes are read here.
 */
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import {
  type ArchSpec,
  archOf,
  blockCount,
  filterName,
  ggufTensorName,
  hyperparameters,
  llama3RopeFactors,
  permuteHeads,
  writeParameters,
} from "./arch.js";
import { OUTPUT_TYPES, type OutputType } from "./constants.js";
import { KvBuilder } from "./kv.js";
import { modelNaming } from "./naming.js";
import { isQuantType, QK, type QuantTypeName } from "./quants.js";
import type { Json } from "./special-vocab.js";
import type { GgufValue } from "./types.js";
import { type TokenizerFiles, writeBpeVocab, writeSentencePieceVocab } from "./vocab.js";

export { OUTPUT_TYPES, type OutputType };

/** llama.cpp's `general.file_type` (LlamaFileType) for each output type. */
export const FILE_TYPES: Readonly<Record<OutputType, number>> = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  BF16: 32,
};

/** Checkpoint dtypes a conversion reads (the converter turns every other float type into F32 first). */
export const SOURCE_DTYPES: readonly Dtype[] = ["F32", "F16", "BF16"];

export interface SourceTensor {
  readonly name: string;
  readonly dtype: Dtype;
  /** numpy/torch order. */
  readonly shape: readonly number[];
}

export interface ConvertInputs {
  readonly config: Json;
  readonly generationConfig?: Json | undefined;
  /** The model directory's name (the converter's fallback for general.name). */
  readonly directoryName: string;
  readonly tokenizer: TokenizerFiles;
  /** The checkpoint's tensors in the converter's order: shards in name order, tensors in name order within each. */
  readonly tensors: readonly SourceTensor[];
}

export interface PlanOptions {
  /** general.name instead of the one derived from the model's id. */
  name?: string | undefined;
  /** Pre-tokenizer name for a BPE tokenizer whose hash llama.cpp does not know. */
  tokenizerPre?: string | undefined;
}

export type TensorType = "F32" | "F16" | "BF16" | QuantTypeName;

export interface TensorJob {
  /** GGUF name. */
  readonly name: string;
  /** The checkpoint tensor it comes from; null for a generated one (`data`). */
  readonly source: string | null;
  readonly sourceDtype: Dtype;
  /** Rows x row length of the source, as read (rows: the product of every dimension but the last). */
  readonly rows: number;
  readonly rowLength: number;
  /** Only the first `keepRows` rows are written (Gemma3 drops embedding rows past the vocabulary). */
  readonly keepRows: number;
  /** GGUF dimensions: row length first. */
  readonly dims: readonly number[];
  readonly type: TensorType;
  /** Q/K permutation: the head count to reorder rows by, or 0. */
  readonly permuteHeads: number;
  /** Gemma's RMSNorm weights: add 1 (in the source's precision for F16 sources, as torch does). */
  readonly plusOne: boolean;
  readonly data?: Float32Array;
}

export interface ConversionPlan {
  readonly arch: ArchSpec;
  readonly metadata: Map<string, GgufValue>;
  readonly jobs: readonly TensorJob[];
  readonly totalParameters: number;
}

function refuse(message: string): SafetensorError {
  return new SafetensorError("UnsupportedModel", message);
}

/** The converter's type for a tensor: F32 for 1-D tensors, norms and biases; the output type otherwise. */
export function tensorType(name: string, nDims: number, rowLength: number, out: OutputType): TensorType {
  if (nDims <= 1 || name.endsWith("_norm.weight") || !name.endsWith(".weight")) return "F32";
  // A row that is not whole blocks falls back to F16, as the converter's QuantError path does.
  if (isQuantType(out) && rowLength % QK !== 0) return "F16";
  return out;
}

/** Which tokenizer the converter reads for this architecture and these files. */
function vocabKind(spec: ArchSpec, files: TokenizerFiles): "spm" | "bpe" {
  const hasSpm = files.sentencePiece !== undefined;
  switch (spec.gguf) {
    case "gemma2":
      if (!hasSpm) throw refuse("Gemma2 needs tokenizer.model (SentencePiece)");
      return "spm";
    case "gemma3":
    case "qwen2":
    case "qwen3":
      return hasSpm ? "spm" : "bpe";
    case "llama": {
      if (hasSpm) return "spm";
      const model = (files.tokenizerJson?.model ?? {}) as Json;
      const llama3 = model.type === "BPE" && model.ignore_merges === true && model.byte_fallback !== true;
      if (!llama3 && model.type === "BPE" && model.byte_fallback === true) {
        throw refuse(
          "a Llama tokenizer.json with byte fallback and no tokenizer.model (llama.cpp's LlamaHfVocab path) is not supported",
        );
      }
      return "bpe";
    }
  }
}

export async function planConversion(
  inputs: ConvertInputs,
  out: OutputType,
  options: PlanOptions = {},
): Promise<ConversionPlan> {
  const spec = archOf(inputs.config);
  const hp = hyperparameters(inputs.config);
  const blocks = blockCount(hp);
  const kind = vocabKind(spec, inputs.tokenizer);
  if (kind === "bpe" && inputs.tokenizer.tokenizerJson === undefined) {
    throw refuse("the model has neither tokenizer.json nor tokenizer.model");
  }
  const jobs: TensorJob[] = [];
  const rope = llama3RopeFactors(spec, hp);
  if (rope !== null) {
    jobs.push({
      name: "rope_freqs.weight",
      source: null,
      sourceDtype: "F32",
      rows: 1,
      rowLength: rope.length,
      keepRows: 1,
      dims: [rope.length],
      type: "F32",
      permuteHeads: 0,
      plusOne: false,
      data: rope,
    });
  }
  let vocabRows = Number.POSITIVE_INFINITY;
  if (spec.gguf === "gemma3") {
    if (inputs.tokenizer.sentencePiece !== undefined) vocabRows = (hp.vocab_size as number | undefined) ?? vocabRows;
    else {
      const t = inputs.tokenizer.tokenizerJson!;
      vocabRows =
        Object.keys(((t.model as Json).vocab as Json) ?? {}).length + ((t.added_tokens as unknown[]) ?? []).length;
    }
  }
  const seen = new Set<string>();
  for (const t of inputs.tensors) {
    const name = filterName(spec, t.name);
    if (name === null) continue;
    if (!SOURCE_DTYPES.includes(t.dtype)) {
      throw refuse(`tensor ${JSON.stringify(t.name)} is ${t.dtype}: only F32, F16 and BF16 checkpoints are converted`);
    }
    if (t.shape.length === 0 || t.shape.length > 4) {
      throw refuse(`tensor ${JSON.stringify(t.name)} has ${t.shape.length} dimensions (1 to 4 are converted)`);
    }
    const gname = ggufTensorName(spec, name, blocks);
    if (seen.has(gname)) throw refuse(`two checkpoint tensors map to ${gname}`);
    seen.add(gname);
    const rowLength = t.shape[t.shape.length - 1]!;
    const rows = t.shape.slice(0, -1).reduce((a, b) => a * b, 1);
    const heads = permuteHeads(spec, name, hp);
    if (heads > 0) {
      const permuted = t.shape.length === 1 ? rowLength : t.shape[0]!;
      if (permuted % (heads * 2) !== 0) throw refuse(`${t.name}: ${permuted} rows cannot be split into ${heads} heads`);
    }
    const keepRows = gname === "token_embd.weight" ? Math.min(rows, vocabRows) : rows;
    const shape = gname === "token_embd.weight" ? [keepRows, ...t.shape.slice(1)] : [...t.shape];
    jobs.push({
      name: gname,
      source: t.name,
      sourceDtype: t.dtype,
      rows,
      rowLength,
      keepRows,
      dims: shape.reverse(),
      type: tensorType(gname, t.shape.length, rowLength, out),
      permuteHeads: heads,
      plusOne: spec.normPlusOne && name.endsWith("norm.weight"),
    });
  }
  const totalParameters = jobs.reduce((sum, j) => sum + j.dims.reduce((a, b) => a * b, 1), 0);

  const kv = new KvBuilder();
  kv.str("general.architecture", spec.gguf);
  kv.str("general.type", "model");
  writeSampling(kv, inputs.generationConfig);
  const naming = modelNaming(inputs.config, inputs.directoryName, totalParameters, options.name);
  kv.str("general.name", naming.name);
  if (naming.version !== undefined) kv.str("general.version", naming.version);
  if (naming.organization !== undefined) kv.str("general.organization", naming.organization);
  if (naming.finetune !== undefined) kv.str("general.finetune", naming.finetune);
  if (naming.basename !== undefined) kv.str("general.basename", naming.basename);
  if (naming.sizeLabel !== undefined) kv.str("general.size_label", naming.sizeLabel);
  writeParameters(kv, spec, hp, FILE_TYPES[out]);
  kv.u32("general.quantization_version", 2);

  const vocabSize = typeof hp.vocab_size === "number" ? hp.vocab_size : undefined;
  if (spec.gguf === "llama") {
    const addPrefix = inputs.tokenizer.tokenizerConfig?.add_prefix_space;
    if (typeof addPrefix === "boolean") kv.bool("tokenizer.ggml.add_space_prefix", addPrefix);
  }
  if (kind === "spm") writeSentencePieceVocab(kv, inputs.tokenizer, vocabSize);
  else await writeBpeVocab(kv, inputs.tokenizer, vocabSize, { tokenizerPre: options.tokenizerPre });
  if ((spec.gguf === "gemma2" || spec.gguf === "gemma3") && kind === "spm") {
    kv.bool("tokenizer.ggml.add_space_prefix", false);
  }
  if (spec.gguf === "llama" && vocabSize === 49152) kv.bool("tokenizer.ggml.add_bos_token", false);
  return { arch: spec, metadata: kv.map, jobs, totalParameters };
}

function writeSampling(kv: KvBuilder, gen: Json | undefined): void {
  if (gen === undefined) return;
  const n = (v: unknown) => typeof v === "number";
  if (typeof gen.sequence === "string") kv.str("general.sampling.sequence", gen.sequence);
  if (n(gen.top_k)) kv.i32("general.sampling.top_k", gen.top_k as number);
  if (n(gen.top_p)) kv.f32("general.sampling.top_p", gen.top_p as number);
  if (n(gen.min_p)) kv.f32("general.sampling.min_p", gen.min_p as number);
  if (n(gen.xtc_probability)) kv.f32("general.sampling.xtc_probability", gen.xtc_probability as number);
  if (n(gen.xtc_threshold)) kv.f32("general.sampling.xtc_threshold", gen.xtc_threshold as number);
  if (n(gen.temperature)) kv.f32("general.sampling.temp", gen.temperature as number);
  if (n(gen.penalty_last_n)) kv.i32("general.sampling.penalty_last_n", gen.penalty_last_n as number);
  const repeat = gen.penalty_repeat ?? gen.repetition_penalty;
  if (n(repeat)) kv.f32("general.sampling.penalty_repeat", repeat as number);
  if (n(gen.mirostat)) kv.i32("general.sampling.mirostat", gen.mirostat as number);
  if (n(gen.mirostat_tau)) kv.f32("general.sampling.mirostat_tau", gen.mirostat_tau as number);
  if (n(gen.mirostat_eta)) kv.f32("general.sampling.mirostat_eta", gen.mirostat_eta as number);
}
