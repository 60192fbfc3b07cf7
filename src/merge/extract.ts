/**
 * LoRA extraction, the pure parts: which tensors of a fine-tuned model become LoRA factors of TUNED − BASE and which
 * are saved whole (`modules_to_save`), the factors of one module from its truncated SVD, and the PEFT
 * `adapter_config.json` that describes them. The rules are mergekit-extract-lora's:
 * - every 2-D `.weight` (a linear layer) is factored: ΔW ≈ B·A with A = √S·Vᵀ (r × in) and B = U·√S (out × r) —
 *   the singular values split evenly between the two, or A = S·Vᵀ and B = U with `distributeScale: false`;
 * - input embeddings (`embed_tokens`, `wte`, ...) and the output embedding (`lm_head`, `embed_out`) are saved whole
 *   unless `embedLora`; with it, an input embedding's transpose is factored into PEFT's `lora_embedding_A` (r ×
 *   vocab) and `lora_embedding_B` (dim × r), and the output embedding is a linear layer like the others. Embeddings
 *   whose vocabulary differs between the models are saved whole whatever `embedLora` says;
 * - other weights (norms: 1-D; convolutions: 3-D and more) cannot be factored as a linear LoRA: saved whole, every
 *   module of that name, unless `skipUndecomposable`;
 * - a factored module's rank is min(rank, out, in), lowered to the number of singular values above `svEpsilon`;
 *   r = lora_alpha = the largest rank (scaling 1), and modules of another rank are in rank_pattern and alpha_pattern.
 * Biases: PEFT's `lora_bias` gives every target module a `lora_B.bias`, and cannot merge into a layer without a bias;
 * so bias changes go into the adapter (config `lora_bias: true`) when every factored module has a bias, and are
 * otherwise reported as left out (a module saved whole keeps its bias).
 * A model with tied embeddings and no `lm_head.weight` of its own gets one, the input embedding, as mergekit does.
 */
import type { Dtype } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import type { CatalogTensor } from "./plan.js";
import type { TruncatedSvd } from "./svd.js";

/** Input embeddings by module name (transformers' names for `get_input_embeddings()` across architectures). */
const INPUT_EMBEDDINGS = new Set([
  "embed_tokens",
  "wte",
  "wpe",
  "word_embeddings",
  "embed_in",
  "embed_positions",
  "position_embeddings",
  "token_type_embeddings",
  "tok_embeddings",
  "shared",
]);
/** Output embeddings (`get_output_embeddings()`). */
const OUTPUT_EMBEDDINGS = new Set(["lm_head", "embed_out"]);
/** Input embeddings that are token embeddings (an output embedding can be tied to one). */
const TOKEN_EMBEDDINGS = new Set(["embed_tokens", "wte", "word_embeddings", "embed_in", "tok_embeddings", "shared"]);

/**
 * A model whose config ties its word embeddings and whose checkpoint has no `lm_head.weight`: that name and the
 * token embedding it stands for (transformers' tied `lm_head`, which mergekit saves or factors like any other);
 * null otherwise.
 */
export function tiedOutputEmbedding(
  tensors: ReadonlyMap<string, CatalogTensor>,
  config: Record<string, unknown> | null,
): { name: string; target: string } | null {
  if (config?.tie_word_embeddings !== true || tensors.has("lm_head.weight")) return null;
  for (const name of tensors.keys()) {
    if (!name.endsWith(".weight")) continue;
    if (TOKEN_EMBEDDINGS.has(lastComponent(name.slice(0, -".weight".length))))
      return { name: "lm_head.weight", target: name };
  }
  return null;
}

export interface ExtractPlanOptions {
  /** The largest rank of a module's factors. */
  rank: number;
  /** Split the singular values as √S into both factors (default true); false puts S into A. */
  distributeScale?: boolean;
  /** Factor the embeddings too (default false: saved whole in modules_to_save). */
  embedLora?: boolean;
  /** Module names (or their last component) saved whole. */
  modulesToSave?: readonly string[];
  /** Only modules whose name matches one of these regular expressions are factored (default: all). */
  include?: readonly string[];
  /** Modules whose name matches one of these are neither factored nor saved (unless in modulesToSave). */
  exclude?: readonly string[];
  /** Singular values at or below this are dropped (default 0: keep `rank`). */
  svEpsilon?: number;
  /** Leave out weights that cannot be factored instead of saving them whole (default false). */
  skipUndecomposable?: boolean;
  /** Refuse a rank larger than a module's matrix instead of lowering it to min(out, in) (default false). */
  strictRank?: boolean;
}

export interface LoraModulePlan {
  readonly kind: "lora";
  /** The module's name: the weight's name without `.weight`. */
  readonly module: string;
  readonly weight: string;
  /** The weight's shape [out, in] (an embedding's [vocab, dim]). */
  readonly shape: readonly [number, number];
  /** An input embedding: the transpose is factored (PEFT's lora_embedding_A / _B). */
  readonly embedding: boolean;
  /** min(rank, out, in): the rank before `svEpsilon`. */
  readonly rank: number;
  /** The bias to diff into lora_B.bias, when the module has one. */
  readonly bias: string | null;
  readonly baseDtype: Dtype;
  readonly tunedDtype: Dtype;
}

export interface SavedTensorPlan {
  readonly kind: "save";
  readonly tensor: string;
  readonly module: string;
}

export type ExtractItem = LoraModulePlan | SavedTensorPlan;

export interface ExtractPlan {
  readonly items: readonly ExtractItem[];
  /** The `modules_to_save` keys, in the order they were added. */
  readonly modulesToSave: readonly string[];
  /** Tuned tensors in neither list (excluded modules, buffers, tensors of no module), by name. */
  readonly skipped: readonly string[];
  /** Notes for the user: embeddings saved whole because the vocabularies differ, undecomposable modules. */
  readonly warnings: readonly string[];
}

const lastComponent = (module: string) => module.slice(module.lastIndexOf(".") + 1);

const FLOATS: ReadonlySet<Dtype> = new Set<Dtype>(["F32", "F16", "BF16", "F64"]);

function compile(patterns: readonly string[] | undefined, option: string): RegExp[] {
  return (patterns ?? []).map((p) => {
    try {
      return new RegExp(p);
    } catch (error) {
      throw new SafetensorError(
        "InvalidOption",
        `${option}: ${quoteName(p)} is not a regular expression (${(error as Error).message})`,
      );
    }
  });
}

/** Check the options that do not depend on the models. */
export function checkExtractOptions(options: ExtractPlanOptions): void {
  if (!Number.isSafeInteger(options.rank) || options.rank < 1) {
    throw new SafetensorError("InvalidOption", `rank must be a positive integer (got ${options.rank})`);
  }
  const eps = options.svEpsilon ?? 0;
  if (!(eps >= 0) || !Number.isFinite(eps)) {
    throw new SafetensorError("InvalidOption", `svEpsilon must be a finite number >= 0 (got ${eps})`);
  }
}

/**
 * Plan an extraction: the tuned model's tensors, in its order, each factored, saved whole or skipped. Throws
 * `MergeMismatch` when a factored module's weight (or bias) is missing from the base or has another shape, and
 * `InvalidOption` for a bad option or a rank larger than a matrix under `strictRank`.
 */
export function planExtraction(
  base: ReadonlyMap<string, CatalogTensor>,
  tuned: ReadonlyMap<string, CatalogTensor>,
  options: ExtractPlanOptions,
): ExtractPlan {
  checkExtractOptions(options);
  const include = compile(options.include, "include");
  const exclude = compile(options.exclude, "exclude");
  const modulesToSave = [...(options.modulesToSave ?? [])];
  const items: ExtractItem[] = [];
  const skipped: string[] = [];
  const warnings: string[] = [];
  const handled = new Set<string>();
  let embedLora = options.embedLora === true;
  const embeddingNames = [...tuned.keys()].filter((name) => {
    if (!name.endsWith(".weight")) return false;
    const key = lastComponent(name.slice(0, -".weight".length));
    return INPUT_EMBEDDINGS.has(key) || OUTPUT_EMBEDDINGS.has(key);
  });
  if (embedLora) {
    const differs = embeddingNames.find((name) => {
      const b = base.get(name);
      return b !== undefined && b.shape[0] !== tuned.get(name)!.shape[0];
    });
    if (differs !== undefined) {
      warnings.push(
        `${differs}: the vocabularies differ (${base.get(differs)!.shape[0]} vs ${tuned.get(differs)!.shape[0]}): embeddings saved whole`,
      );
      embedLora = false;
    }
  }
  const isSaved = (module: string) => modulesToSave.includes(module) || modulesToSave.includes(lastComponent(module));
  const save = (module: string, weight: string, bias: string | null) => {
    items.push({ kind: "save", tensor: weight, module });
    handled.add(weight);
    if (bias !== null) {
      items.push({ kind: "save", tensor: bias, module });
      handled.add(bias);
    }
  };
  for (const [name, info] of tuned) {
    if (!name.endsWith(".weight")) continue;
    const module = name.slice(0, -".weight".length);
    const key = lastComponent(module);
    const biasName = `${module}.bias`;
    const bias = tuned.has(biasName) ? biasName : null;
    const excluded = exclude.some((r) => r.test(module));
    const isInputEmbedding = INPUT_EMBEDDINGS.has(key);
    if (!embedLora && (isInputEmbedding || OUTPUT_EMBEDDINGS.has(key)) && !excluded && !modulesToSave.includes(key)) {
      modulesToSave.push(key);
    }
    if (isSaved(module)) {
      save(module, name, bias);
      continue;
    }
    if (excluded || (include.length > 0 && !include.some((r) => r.test(module)))) continue;
    if (info.shape.length !== 2 || !FLOATS.has(info.dtype)) {
      if (!options.skipUndecomposable) {
        if (!modulesToSave.includes(key)) modulesToSave.push(key);
        save(module, name, bias);
      }
      if (!warnings.some((w) => w.startsWith(`${key}:`))) {
        const what = FLOATS.has(info.dtype) ? `${info.shape.length}-D` : info.dtype;
        warnings.push(
          `${key}: a ${what} weight is not a linear layer: ${options.skipUndecomposable ? "skipped" : "saved whole"}`,
        );
      }
      continue;
    }
    const baseInfo = base.get(name);
    if (baseInfo === undefined) {
      throw new SafetensorError("MergeMismatch", `the base has no tensor ${quoteName(name)}`, { tensor: name });
    }
    if (baseInfo.shape.length !== 2 || baseInfo.shape[0] !== info.shape[0] || baseInfo.shape[1] !== info.shape[1]) {
      throw new SafetensorError(
        "MergeMismatch",
        `${quoteName(name)} is [${baseInfo.shape}] in the base and [${info.shape}] in the fine-tune`,
        { tensor: name },
      );
    }
    if (!FLOATS.has(baseInfo.dtype)) {
      throw new SafetensorError("UnsupportedDtype", `${quoteName(name)} is ${baseInfo.dtype} in the base`, {
        tensor: name,
      });
    }
    const [rows, cols] = info.shape as [number, number];
    if (options.strictRank && options.rank > Math.min(rows, cols)) {
      throw new SafetensorError(
        "InvalidOption",
        `rank ${options.rank} is larger than ${quoteName(name)} allows ([${rows}, ${cols}]: at most ${Math.min(rows, cols)})`,
        { tensor: name },
      );
    }
    if (bias !== null) {
      const b = base.get(bias);
      if (b === undefined) {
        throw new SafetensorError("MergeMismatch", `the base has no tensor ${quoteName(bias)}`, { tensor: bias });
      }
      if (b.shape.length !== 1 || b.shape[0] !== tuned.get(bias)!.shape[0]) {
        throw new SafetensorError(
          "MergeMismatch",
          `${quoteName(bias)} is [${b.shape}] in the base and [${tuned.get(bias)!.shape}] in the fine-tune`,
          { tensor: bias },
        );
      }
      handled.add(bias);
    }
    handled.add(name);
    items.push({
      kind: "lora",
      module,
      weight: name,
      shape: [rows, cols],
      embedding: isInputEmbedding,
      rank: Math.min(options.rank, rows, cols),
      bias,
      baseDtype: baseInfo.dtype,
      tunedDtype: info.dtype,
    });
  }
  // A bias whose weight was saved under a key added later (a norm's key met after its first module) is saved too.
  for (const name of tuned.keys()) {
    if (handled.has(name)) continue;
    const module = name.replace(/\.(weight|bias)$/, "");
    if (name.endsWith(".bias") && isSaved(module)) {
      items.push({ kind: "save", tensor: name, module });
      continue;
    }
    skipped.push(name);
  }
  if (!items.some((item) => item.kind === "lora")) {
    throw new SafetensorError("InvalidOption", "no module to extract: every weight is excluded or saved whole");
  }
  return { items, modulesToSave, skipped, warnings };
}

/** The dtype of TUNED − BASE as torch computes it: the wider of the two (F16 with BF16 gives F32). */
export function deltaDtype(base: Dtype, tuned: Dtype): Dtype {
  if (base === tuned) return base;
  if (base === "F64" || tuned === "F64") return "F64";
  return "F32";
}

/** PEFT's tensor names for a factored module. */
export function loraTensorNames(plan: LoraModulePlan): { a: string; b: string; bias: string } {
  const prefix = `base_model.model.${plan.module}`;
  return plan.embedding
    ? { a: `${prefix}.lora_embedding_A`, b: `${prefix}.lora_embedding_B`, bias: `${prefix}.lora_B.bias` }
    : { a: `${prefix}.lora_A.weight`, b: `${prefix}.lora_B.weight`, bias: `${prefix}.lora_B.bias` };
}

/** PEFT's name for a tensor saved whole. */
export const savedTensorName = (tensor: string) => `base_model.model.${tensor}`;

/** The rank kept for a module: its planned rank, lowered to the singular values above `svEpsilon` (at least 1). */
export function keptRank(svd: TruncatedSvd, svEpsilon: number): number {
  let rank = svd.rank;
  if (svEpsilon > 0) {
    let above = 0;
    for (let i = 0; i < svd.rank; i++) if (svd.s[i]! > svEpsilon) above++;
    rank = Math.min(rank, above);
  }
  return Math.max(1, rank);
}

/**
 * A module's factors from the truncated SVD of its ΔW (of ΔWᵀ for an embedding), `rank` triplets: A (rank × cols of
 * the factored matrix) and B (rows × rank), float32 from float64, such that B·A is the rank-`rank` truncation.
 */
export function loraFactors(
  svd: TruncatedSvd,
  rows: number,
  cols: number,
  rank: number,
  distributeScale: boolean,
): { a: Float32Array; b: Float32Array } {
  const k = svd.rank;
  const a = new Float32Array(rank * cols);
  const b = new Float32Array(rows * rank);
  for (let r = 0; r < rank; r++) {
    const sigma = svd.s[r]!;
    const scaleA = distributeScale ? Math.sqrt(sigma) : sigma;
    const scaleB = distributeScale ? Math.sqrt(sigma) : 1;
    for (let j = 0; j < cols; j++) a[r * cols + j] = scaleA * svd.vt[r * cols + j]!;
    for (let i = 0; i < rows; i++) b[i * rank + r] = svd.u[i * k + r]! * scaleB;
  }
  return { a, b };
}

export interface AdapterConfigInput {
  /** `base_model_name_or_path`: where the base was read. */
  base: string;
  /** Kept rank by module. */
  ranks: ReadonlyMap<string, number>;
  modulesToSave: readonly string[];
  /** The adapter holds lora_B.bias tensors (every factored module has a bias, and some changed). */
  loraBias: boolean;
}

/** The adapter_config.json of an extracted adapter (mergekit's keys; `lora_bias` set only when needed). */
export function extractedAdapterConfig(input: AdapterConfigInput): Record<string, unknown> {
  const r = Math.max(...input.ranks.values());
  const pattern: Record<string, number> = {};
  for (const [module, rank] of input.ranks) if (rank !== r) pattern[module] = rank;
  const config: Record<string, unknown> = {
    base_model_name_or_path: input.base,
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    r,
    lora_alpha: r,
    use_rslora: false,
    target_modules: [...new Set([...input.ranks.keys()].map(lastComponent))].sort(),
    modules_to_save: input.modulesToSave.length > 0 ? [...input.modulesToSave] : null,
    rank_pattern: pattern,
    alpha_pattern: { ...pattern },
    lora_dropout: 0,
    fan_in_fan_out: false,
    bias: "none",
    inference_mode: true,
  };
  if (input.loraBias) config.lora_bias = true;
  return config;
}
