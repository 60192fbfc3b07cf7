/**
 * LoRA bakes, the pure parts: a PEFT adapter's config and tensor names → for each base tensor, the low-rank updates
 * to add (which A, B and DoRA magnitude, at which scale) or the tensor that replaces it (`modules_to_save`); and the
 * kernel that adds them to rows of a weight, as PEFT's `merge_and_unload` does: ΔW = (B @ A) · scaling in float32
 * (scaling = α / r, α / √r with rsLoRA, r and α from `rank_pattern` / `alpha_pattern` where a key matches), added to
 * the weight in float32 and rounded once to its dtype; DoRA rescales each row of W + ΔW to its magnitude. Pure.
 */
import { fromFloat32, toFloat32 } from "../codecs/index.js";
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { loraKernels } from "./fast-kernels.js";
import type { CatalogTensor } from "./plan.js";
import { roundArray, rounder } from "./round.js";

export interface AdapterConfig {
  readonly r: number;
  readonly alpha: number;
  readonly rslora: boolean;
  readonly fanInFanOut: boolean;
  readonly dora: boolean;
  readonly rankPattern: ReadonlyMap<string, number>;
  readonly alphaPattern: ReadonlyMap<string, number>;
  /** `lora_bias`: each lora_B carries a bias, added (times the scale) to the layer's bias. */
  readonly loraBias: boolean;
}

/** Options of a PEFT LoRA config that change what a merge computes and that we do not apply: refused when set. */
const REFUSED_OPTIONS: readonly [string, (value: unknown) => boolean][] = [
  ["use_qalora", (v) => v === true],
  ["layer_replication", (v) => v !== null && v !== undefined],
  ["trainable_token_indices", (v) => v !== null && v !== undefined],
  ["alora_invocation_tokens", (v) => v !== null && v !== undefined],
  ["target_parameters", (v) => v !== null && v !== undefined && !(Array.isArray(v) && v.length === 0)],
  ["use_bdlora", (v) => v !== null && v !== undefined && v !== false],
];

function invalid(message: string): never {
  throw new SafetensorError("InvalidAdapter", message);
}

function numberMap(where: string, value: unknown): Map<string, number> {
  const out = new Map<string, number>();
  if (value === null || value === undefined) return out;
  if (typeof value !== "object" || Array.isArray(value)) invalid(`${where} must be an object`);
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (typeof v !== "number" || !Number.isFinite(v)) invalid(`${where}.${key} must be a number`);
    out.set(key, v);
  }
  return out;
}

/** Check a PEFT `adapter_config.json` (parsed): a LoRA adapter whose options we apply, or refused by name. */
export function parseAdapterConfig(input: unknown): AdapterConfig {
  if (typeof input !== "object" || input === null || Array.isArray(input))
    invalid("adapter_config.json is not an object");
  const config = input as Record<string, unknown>;
  if (config.peft_type !== "LORA") {
    throw new SafetensorError(
      "UnsupportedAdapter",
      `peft_type ${JSON.stringify(config.peft_type)} is not supported (LORA adapters only)`,
    );
  }
  for (const [key, refused] of REFUSED_OPTIONS) {
    if (refused(config[key])) {
      throw new SafetensorError("UnsupportedAdapter", `adapter option \`${key}\` is not supported`);
    }
  }
  const r = config.r;
  const alpha = config.lora_alpha;
  if (typeof r !== "number" || !(r > 0)) invalid("adapter_config.json: `r` must be a positive number");
  if (typeof alpha !== "number" || !Number.isFinite(alpha))
    invalid("adapter_config.json: `lora_alpha` must be a number");
  const dora = config.use_dora === true;
  const fanInFanOut = config.fan_in_fan_out === true;
  if (dora && fanInFanOut) {
    throw new SafetensorError("UnsupportedAdapter", "DoRA with fan_in_fan_out (Conv1D layers) is not supported");
  }
  return {
    r,
    alpha,
    rslora: config.use_rslora === true,
    fanInFanOut,
    dora,
    rankPattern: numberMap("rank_pattern", config.rank_pattern),
    alphaPattern: numberMap("alpha_pattern", config.alpha_pattern),
    loraBias: config.lora_bias === true,
  };
}

/** PEFT's `get_pattern_key`: the first pattern key that matches the end of the module's name (as a regex). */
export function patternKey(keys: Iterable<string>, module: string): string | null {
  for (const key of keys) {
    let matches: boolean;
    try {
      matches = new RegExp(`^(.*\\.)?(${key})$`, "u").test(module);
    } catch {
      matches = module === key || module.endsWith(`.${key}`);
    }
    if (matches) return key;
  }
  return null;
}

/** The scale of a module's update: α / r (α / √r with rsLoRA), r and α from the patterns where a key matches. */
export function loraScaling(config: AdapterConfig, module: string): number {
  const rankKey = patternKey(config.rankPattern.keys(), module);
  const alphaKey = patternKey(config.alphaPattern.keys(), module);
  const r = rankKey === null ? config.r : config.rankPattern.get(rankKey)!;
  const alpha = alphaKey === null ? config.alpha : config.alphaPattern.get(alphaKey)!;
  return config.rslora ? alpha / Math.sqrt(r) : alpha / r;
}

/** One low-rank update of a base tensor. */
export interface LoraUpdate {
  /** Which adapter (index in the list given to `planLora`). */
  readonly adapter: number;
  readonly a: string;
  readonly b: string;
  /** DoRA's magnitude vector, or null. */
  readonly magnitude: string | null;
  /** α / r (or α / √r) times the adapter's weight. */
  readonly scaling: number;
  /**
   * "rows": W is [out, in], ΔW = B @ A. "transposed": W is [in, out] (fan_in_fan_out, Conv1D) or an embedding
   * [vocab, dim] (A is [r, vocab], B is [dim, r]), ΔW = (B @ A)ᵀ.
   */
  readonly layout: "rows" | "transposed";
  readonly embedding: boolean;
  readonly rank: number;
  /** Multiplies ΔW before `scaling` (sd-scripts' ratio; PEFT's weight is in `scaling`). Default 1. */
  readonly ratio?: number;
  /** The rows of W the update covers, [first, count] (q, k or v of a fused projection); default all. */
  readonly rows?: readonly [number, number] | null;
  /** `lora_bias`: the update adds `b` (lora_B's bias) times `scaling` to a bias vector; `a` is unused. */
  readonly bias?: boolean;
}

export interface LoraTensorPlan {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  /** Updates in adapter order (each merged onto the result of the previous, as PEFT merges several adapters). */
  readonly updates: readonly LoraUpdate[];
  /**
   * A tensor of an adapter that replaces the base's (`modules_to_save`; an embedding's `base_layer` saved with the
   * adapter, which the updates then apply to): [adapter, name].
   */
  readonly replacement: readonly [number, string] | null;
  /**
   * A tensor the base's files do not hold: the output embedding of a model whose embeddings are tied, saved with the
   * adapter (`modules_to_save`). PEFT's merged model then has its own `lm_head` and `tie_word_embeddings: false`.
   */
  readonly untied?: boolean;
}

export interface AdapterInput {
  readonly config: AdapterConfig;
  readonly tensors: ReadonlyMap<string, CatalogTensor>;
  /** Multiplies the adapter's update (default 1). */
  readonly weight: number;
}

const PREFIX = "base_model.model.";
const LORA_KEY =
  /^(.*)\.(lora_A\.weight|lora_B\.weight|lora_B\.bias|lora_embedding_A|lora_embedding_B|lora_magnitude_vector(?:\.weight)?)$/;

/** Plan a bake: every base tensor, with what each adapter changes in it. */
export function planLora(
  base: ReadonlyMap<string, CatalogTensor>,
  adapters: readonly AdapterInput[],
): LoraTensorPlan[] {
  const updates = new Map<string, LoraUpdate[]>();
  const replacements = new Map<string, [number, string]>();
  const untied = new Map<string, CatalogTensor>();
  adapters.forEach((adapter, index) => {
    const modules = new Map<string, Map<string, string>>();
    for (const key of adapter.tensors.keys()) {
      const name = key.startsWith(PREFIX) ? key.slice(PREFIX.length) : key;
      const match = LORA_KEY.exec(name);
      if (match) {
        const parts = modules.get(match[1]!) ?? new Map<string, string>();
        parts.set(match[2]!.replace(/\.weight$/, "").replace("lora_embedding_", "lora_"), key);
        modules.set(match[1]!, parts);
        continue;
      }
      // A whole tensor saved with the adapter: modules_to_save, or an embedding's base layer.
      const target = name.replace(/\.modules_to_save(?:\.[^.]+)?\./, ".").replace(/\.base_layer\./, ".");
      const tied = base.has(target) ? null : tiedEmbedding(base, target);
      if (!base.has(target) && tied === null) {
        throw new SafetensorError("InvalidAdapter", `adapter tensor ${key} matches no tensor of the base model`);
      }
      const info = adapter.tensors.get(key)!;
      const like = tied ?? base.get(target)!;
      if (info.shape.join(",") !== like.shape.join(",")) {
        throw new SafetensorError(
          "InvalidAdapter",
          `adapter tensor ${key} is [${info.shape}], the base's [${like.shape}]`,
        );
      }
      if (tied !== null) untied.set(target, tied);
      replacements.set(target, [index, key]);
    }
    for (const [module, parts] of modules) {
      const a = parts.get("lora_A");
      const b = parts.get("lora_B");
      if (a === undefined || b === undefined) {
        throw new SafetensorError("InvalidAdapter", `module ${module}: lora_A and lora_B must both be present`);
      }
      const target = `${module}.weight`;
      const info = base.get(target);
      if (!info) throw new SafetensorError("InvalidAdapter", `module ${module} has no weight in the base model`);
      const embedding = a.endsWith("lora_embedding_A");
      const aShape = adapter.tensors.get(a)!.shape;
      const bShape = adapter.tensors.get(b)!.shape;
      const layout = embedding || adapter.config.fanInFanOut ? "transposed" : "rows";
      const rank = aShape[0]!;
      const [rows, cols] = info.shape as [number, number];
      const fits =
        info.shape.length === 2 &&
        aShape.length === 2 &&
        bShape.length === 2 &&
        bShape[1] === rank &&
        (layout === "rows" ? bShape[0] === rows && aShape[1] === cols : aShape[1] === rows && bShape[0] === cols);
      if (!fits) {
        throw new SafetensorError(
          "InvalidAdapter",
          `module ${module}: A [${aShape}] and B [${bShape}] do not fit the base's ${target} [${info.shape}]`,
        );
      }
      const magnitude = parts.get("lora_magnitude_vector") ?? null;
      if (magnitude !== null && embedding) {
        throw new SafetensorError("UnsupportedAdapter", `module ${module}: DoRA on an embedding is not supported`);
      }
      if (adapter.config.dora && magnitude === null) {
        throw new SafetensorError("InvalidAdapter", `module ${module}: use_dora but no lora_magnitude_vector`);
      }
      const bias = parts.get("lora_B.bias");
      // Without lora_bias in its config, PEFT loads an adapter's lora_B.bias into nothing (with a warning).
      if (bias !== undefined && adapter.config.loraBias) {
        const biasName = `${module}.bias`;
        const have = base.get(biasName);
        const want = adapter.tensors.get(bias)!.shape;
        if (!have) {
          throw new SafetensorError("InvalidAdapter", `module ${module}: lora_bias, but the base has no ${biasName}`);
        }
        if (have.shape.join(",") !== want.join(",")) {
          throw new SafetensorError(
            "InvalidAdapter",
            `module ${module}: lora_B's bias is [${want}], the base's ${biasName} [${have.shape}]`,
          );
        }
        const scaling = loraScaling(adapter.config, module) * adapter.weight;
        const list = updates.get(biasName) ?? [];
        list.push({
          adapter: index,
          a: "",
          b: bias,
          magnitude: null,
          scaling,
          layout: "rows",
          embedding,
          rank: 1,
          bias: true,
        });
        updates.set(biasName, list);
      }
      const list = updates.get(target) ?? [];
      list.push({
        adapter: index,
        a,
        b,
        magnitude,
        scaling: loraScaling(adapter.config, module) * adapter.weight,
        layout,
        embedding,
        rank,
      });
      updates.set(target, list);
    }
  });
  const plan: LoraTensorPlan[] = [...base].map(([name, info]) => ({
    name,
    dtype: info.dtype,
    shape: info.shape,
    updates: updates.get(name) ?? [],
    replacement: replacements.get(name) ?? null,
  }));
  for (const [name, info] of untied) {
    if (updates.has(name)) {
      throw new SafetensorError("UnsupportedAdapter", `${name}: a LoRA update of a tied embedding is not supported`);
    }
    plan.push({ ...info, name, updates: [], replacement: replacements.get(name)!, untied: true });
  }
  return plan;
}

/**
 * The input embedding an output embedding `target` (`…lm_head.weight`) is tied to, when the base's files leave it out
 * (tied embeddings: transformers makes lm_head from embed_tokens); else null.
 */
function tiedEmbedding(base: ReadonlyMap<string, CatalogTensor>, target: string): CatalogTensor | null {
  const match = /^(.*?)lm_head\.weight$/.exec(target);
  if (match === null) return null;
  const prefix = match[1]!;
  for (const name of [`${prefix}model.embed_tokens.weight`, `${prefix}embed_tokens.weight`]) {
    const info = base.get(name);
    if (info?.shape.length === 2) return info;
  }
  return null;
}

/** An update's factors as float32, arranged for `addLowRank`: L [rows × r] and Rᵀ [cols × r]. Structured-cloneable. */
export interface LowRankFactors {
  readonly left: Float32Array;
  readonly right: Float32Array;
  readonly rank: number;
  readonly scaling: number;
  /** DoRA magnitudes per row of W (null for plain LoRA). */
  readonly magnitude: Float32Array | null;
  /** ΔW is rounded to this dtype before it is added: the weight's for embeddings (PEFT's `Embedding` merge). */
  readonly deltaDtype: "F32" | "F16" | "BF16";
  /** Multiplies ΔW before `scaling` (1: not applied). */
  readonly ratio: number;
  /** The rows of W (of a block, once restricted) the update covers: [first, count]; null for all of them. */
  readonly rows: readonly [number, number] | null;
}

/**
 * Arrange A [r × in] and B [out × r] as L [rows × r] and Rᵀ [cols × r] for the update's layout: both with the rank
 * innermost, so each entry of ΔW is one contiguous dot product (measured on 256 × 4096 blocks, r = 16, load 15:
 * 47 ns an entry, 16 accumulation passes over a row took 135).
 */
export function lowRankFactors(
  update: LoraUpdate,
  a: Float32Array,
  b: Float32Array,
  magnitude: Float32Array | null,
  deltaDtype: "F32" | "F16" | "BF16" = "F32",
): LowRankFactors {
  const r = update.rank;
  const transpose = (m: Float32Array) => {
    // [r × n] → [n × r]
    const n = m.length / r;
    const t = new Float32Array(m.length);
    for (let k = 0; k < r; k++) for (let i = 0; i < n; i++) t[i * r + k] = m[k * n + i]!;
    return t;
  };
  // rows: ΔW = B @ A, L = B [out × r], Rᵀ = Aᵀ [in × r]. transposed: ΔW = Aᵀ @ Bᵀ, L = Aᵀ [in × r], Rᵀ = B [out × r].
  const left = update.layout === "rows" ? b : transpose(a);
  const right = update.layout === "rows" ? transpose(a) : b;
  return {
    left,
    right,
    rank: r,
    scaling: update.scaling,
    magnitude,
    deltaDtype,
    ratio: update.ratio ?? 1,
    rows: update.rows ?? null,
  };
}

/**
 * A lora_bias update of a bias vector as a rank-1 update of one row, ΔW = [1] @ biasᵀ: fround(1 · b) · scaling is
 * torch's `lora_B.bias * scaling` in float32, added as PEFT's `bias += …` adds it.
 */
export function biasFactors(update: LoraUpdate, bias: Float32Array): LowRankFactors {
  return {
    left: Float32Array.of(1),
    right: bias,
    rank: 1,
    scaling: update.scaling,
    magnitude: null,
    deltaDtype: "F32",
    ratio: 1,
    rows: null,
  };
}

/**
 * The factors restricted to rows [first, first + rows) of W (what a block's computation needs, to hand to a worker);
 * null when the update covers none of them.
 */
export function factorRows(factors: LowRankFactors, first: number, rows: number): LowRankFactors | null {
  // An update of some rows only: L's rows are those rows; the block's share of them, placed in the block.
  const [from, count] = factors.rows ?? [0, Number.POSITIVE_INFINITY];
  const start = Math.max(first, from);
  const end = Math.min(first + rows, from + count);
  if (start >= end) return null;
  return {
    ...factors,
    left: factors.left.subarray((start - from) * factors.rank, (end - from) * factors.rank),
    magnitude: factors.magnitude?.subarray(start - from, end - from) ?? null,
    rows: [start - first, end - start],
  };
}

const fround = Math.fround;

/**
 * Add a low-rank update to `rows` rows of W, given as float32 `values` (rows × cols), in place (`factors` restricted
 * to those rows): W + fround(fround(L @ R) · scaling), each sum rounded to float32; with DoRA each row then scaled by
 * magnitude / ‖row‖.
 */
export function addLowRank(values: Float32Array, rows: number, cols: number, factors: LowRankFactors): void {
  const { left, right, rank, magnitude } = factors;
  if (factors.rows !== null) {
    const [first, count] = factors.rows;
    const own = { ...factors, rows: null };
    addLowRank(values.subarray(first * cols, (first + count) * cols), count, cols, own);
    return;
  }
  const fast = loraKernels();
  if (fast !== null) {
    const { scaling, ratio, deltaDtype } = factors;
    fast.addLowRank(values, rows, cols, left, right, rank, scaling, ratio, deltaDtype, magnitude);
    return;
  }
  const round = rounder(factors.deltaDtype);
  const scaling = fround(factors.scaling);
  const ratio = fround(factors.ratio);
  const r4 = rank - (rank % 4);
  for (let row = 0; row < rows; row++) {
    const l = row * rank;
    const base = row * cols;
    let square = 0;
    for (let c = 0; c < cols; c++) {
      // Σ_k L[row, k] · R[k, c], summed in k order in a double (four terms a step, same order).
      const o = c * rank;
      let s = 0;
      let k = 0;
      for (; k < r4; k += 4) {
        s =
          s +
          left[l + k]! * right[o + k]! +
          left[l + k + 1]! * right[o + k + 1]! +
          left[l + k + 2]! * right[o + k + 2]! +
          left[l + k + 3]! * right[o + k + 3]!;
      }
      for (; k < rank; k++) s = s + left[l + k]! * right[o + k]!;
      const d = ratio === 1 ? fround(s) : fround(ratio * fround(s));
      const v = values[base + c]! + round(d * scaling);
      values[base + c] = v;
      square += values[base + c]! * values[base + c]!;
    }
    if (magnitude !== null) {
      const factor = fround(magnitude[row]! / fround(Math.sqrt(square)));
      for (let c = 0; c < cols; c++) values[base + c] = factor * values[base + c]!;
    }
  }
}

/** One block of rows of a baked weight: what a worker computes. Structured-cloneable. */
export interface BakeBlock {
  /** The block's stored bytes (`dtype`), or null when `start` holds its values already. */
  readonly raw: Uint8Array | null;
  /** float32 values to start from instead of `raw` (an adapter's copy of the weight). */
  readonly start: Float32Array | null;
  readonly dtype: "F32" | "F16" | "BF16";
  readonly outDtype: "F32" | "F16" | "BF16";
  readonly rows: number;
  readonly cols: number;
  /** Each update restricted to the block's rows, in merge order. */
  readonly factors: readonly LowRankFactors[];
  /**
   * Round to `dtype` between updates (PEFT: the weight holds its dtype between adapters; sd-scripts merges every
   * LoRA into a float32 weight). Default true.
   */
  readonly roundBetween?: boolean;
}

/**
 * Buffers a thread bakes blocks into, reused from block to block. Fresh ones each block are zeroed first, and the
 * dead ones piled up until V8 collected them: two workers baking the bench's r = 16 adapter reached a 256 MiB peak
 * RSS with fresh buffers (see node-lora.ts).
 */
export class BakeScratch {
  #values = new Float32Array(0);
  #bytes = new Uint8Array(0);
  values(count: number): Float32Array {
    if (this.#values.length < count) this.#values = new Float32Array(count);
    return this.#values.subarray(0, count);
  }
  bytes(length: number): Uint8Array {
    if (this.#bytes.length < length) this.#bytes = new Uint8Array(length);
    return this.#bytes.subarray(0, length);
  }
}

/**
 * Bake one block: decode, add every update (rounding to the weight's dtype between adapters, as PEFT), encode. With
 * `scratch`, the result is a view of its buffers, valid until its next use.
 */
export function bakeBlock(block: BakeBlock, scratch?: BakeScratch): Uint8Array {
  const count = block.rows * block.cols;
  const values = scratch?.values(count) ?? new Float32Array(count);
  const fast = loraKernels();
  if (block.start !== null) {
    values.set(block.start);
    roundArray(values, count, block.dtype);
  } else if (fast !== null && block.dtype !== "F32") fast.decode16(block.raw!, block.dtype, count, values);
  else toFloat32(block.dtype, block.raw!, { count, out: values });
  block.factors.forEach((f, i) => {
    addLowRank(values, block.rows, block.cols, f);
    // PEFT merges adapters one after the other into the weight, which is stored in its dtype in between.
    if (i < block.factors.length - 1 && block.roundBetween !== false) roundArray(values, count, block.dtype);
  });
  if (block.outDtype === "F32") return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const out = scratch?.bytes(count * 2);
  if (fast !== null) return fast.encode16(values, block.outDtype, out);
  return fromFloat32(block.outDtype, values, out === undefined ? undefined : { out });
}
