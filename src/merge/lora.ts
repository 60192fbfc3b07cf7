/**
 * LoRA bakes, the pure parts: a PEFT adapter's config and tensor names → for each base tensor, the low-rank updates
 * to add (which A, B and DoRA magnitude, at which scale) or the tensor that replaces it (`modules_to_save`); and the
 * kernel that adds them to rows of a weight, as PEFT's `merge_and_unload` does: ΔW = (B @ A) · scaling in float32
 * (scaling = α / r, α / √r with rsLoRA, r and α from `rank_pattern` / `alpha_pattern` where a key matches), added to
 * the weight in float32 and rounded once to its dtype; DoRA rescales each row of W + ΔW to its magnitude. Pure.
 */
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { CatalogTensor } from "./plan.js";
import type { Round } from "./round.js";

export interface AdapterConfig {
  readonly r: number;
  readonly alpha: number;
  readonly rslora: boolean;
  readonly fanInFanOut: boolean;
  readonly dora: boolean;
  readonly rankPattern: ReadonlyMap<string, number>;
  readonly alphaPattern: ReadonlyMap<string, number>;
}

/** Options of a PEFT LoRA config that change what a merge computes and that we do not apply: refused when set. */
const REFUSED_OPTIONS: readonly [string, (value: unknown) => boolean][] = [
  ["lora_bias", (v) => v === true],
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
}

export interface AdapterInput {
  readonly config: AdapterConfig;
  readonly tensors: ReadonlyMap<string, CatalogTensor>;
  /** Multiplies the adapter's update (default 1). */
  readonly weight: number;
}

const PREFIX = "base_model.model.";
const LORA_KEY =
  /^(.*)\.(lora_A\.weight|lora_B\.weight|lora_embedding_A|lora_embedding_B|lora_magnitude_vector(?:\.weight)?)$/;

/** Plan a bake: every base tensor, with what each adapter changes in it. */
export function planLora(
  base: ReadonlyMap<string, CatalogTensor>,
  adapters: readonly AdapterInput[],
): LoraTensorPlan[] {
  const updates = new Map<string, LoraUpdate[]>();
  const replacements = new Map<string, [number, string]>();
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
      if (!base.has(target)) {
        throw new SafetensorError("InvalidAdapter", `adapter tensor ${key} matches no tensor of the base model`);
      }
      const info = adapter.tensors.get(key)!;
      if (info.shape.join(",") !== base.get(target)!.shape.join(",")) {
        throw new SafetensorError(
          "InvalidAdapter",
          `adapter tensor ${key} is [${info.shape}], the base's [${base.get(target)!.shape}]`,
        );
      }
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
  return [...base].map(([name, info]) => ({
    name,
    dtype: info.dtype,
    shape: info.shape,
    updates: updates.get(name) ?? [],
    replacement: replacements.get(name) ?? null,
  }));
}

/** An update's factors as float32, arranged for `addLowRank`: L [rows × r] and R [r × cols]. */
export interface LowRankFactors {
  readonly left: Float32Array;
  readonly right: Float32Array;
  readonly rank: number;
  readonly scaling: number;
  /** DoRA magnitudes per row of W (null for plain LoRA). */
  readonly magnitude: Float32Array | null;
  /** Rounds ΔW before it is added: to the weight's dtype for embeddings (PEFT's `Embedding` merge), else float32. */
  readonly roundDelta: Round;
}

/** Arrange A [r × in] and B [out × r] as L and R for the update's layout. */
export function lowRankFactors(
  update: LoraUpdate,
  a: Float32Array,
  b: Float32Array,
  magnitude: Float32Array | null,
  roundDelta: Round = Math.fround,
): LowRankFactors {
  const r = update.rank;
  if (update.layout === "rows") return { left: b, right: a, rank: r, scaling: update.scaling, magnitude, roundDelta };
  // (B @ A)ᵀ = Aᵀ @ Bᵀ: L = Aᵀ [in × r], R = Bᵀ [r × out].
  const inner = a.length / r;
  const outer = b.length / r;
  const left = new Float32Array(a.length);
  for (let k = 0; k < r; k++) for (let i = 0; i < inner; i++) left[i * r + k] = a[k * inner + i]!;
  const right = new Float32Array(b.length);
  for (let o = 0; o < outer; o++) for (let k = 0; k < r; k++) right[k * outer + o] = b[o * r + k]!;
  return { left, right, rank: r, scaling: update.scaling, magnitude, roundDelta };
}

const fround = Math.fround;

/**
 * Add a low-rank update to rows [firstRow, firstRow + rows) of W, given as float32 `values` (rows × cols), in place:
 * W + fround(fround(L @ R) · scaling), each sum rounded to float32; with DoRA each row then scaled by
 * magnitude / ‖row‖. `acc` is scratch of at least `cols` doubles.
 */
export function addLowRank(
  values: Float32Array,
  firstRow: number,
  rows: number,
  cols: number,
  factors: LowRankFactors,
  acc: Float64Array,
): void {
  const { left, right, rank, magnitude, roundDelta } = factors;
  const scaling = fround(factors.scaling);
  for (let row = 0; row < rows; row++) {
    acc.fill(0, 0, cols);
    const l = (firstRow + row) * rank;
    for (let k = 0; k < rank; k++) {
      const coefficient = left[l + k]!;
      if (coefficient === 0) continue;
      const offset = k * cols;
      for (let c = 0; c < cols; c++) acc[c] = acc[c]! + coefficient * right[offset + c]!;
    }
    const base = row * cols;
    if (magnitude === null) {
      for (let c = 0; c < cols; c++) values[base + c] = values[base + c]! + roundDelta(fround(acc[c]!) * scaling);
      continue;
    }
    let square = 0;
    for (let c = 0; c < cols; c++) {
      const v = fround(values[base + c]! + fround(fround(acc[c]!) * scaling));
      acc[c] = v;
      square += v * v;
    }
    const factor = fround(magnitude[firstRow + row]! / fround(Math.sqrt(square)));
    for (let c = 0; c < cols; c++) values[base + c] = factor * acc[c]!;
  }
}
