/**
 * mergekit's configuration language, checked: a plain object (parsed from YAML or JSON by the caller) becomes a
 * `MergeConfig`, or is refused by the name of what we do not support (`UnsupportedMergeConfig`) or of what is wrong
 * (`InvalidMergeConfig`), before any model is opened. The rules are those of mergekit's `MergeConfiguration` and
 * `evaluate_setting` (mergekit 0.1.x); nothing here reads files. Pure: runs in browsers.
 */
import { SafetensorError } from "../format/errors.js";
import { MERGE_METHODS, type MergeMethod } from "./methods.js";

export { MERGE_METHODS, type MergeMethod };

/** The compute and output dtypes a config may name (mergekit's names and torch's). */
const DTYPE_NAMES: Record<string, "F32" | "F16" | "BF16"> = {
  float32: "F32",
  fp32: "F32",
  float: "F32",
  float16: "F16",
  fp16: "F16",
  half: "F16",
  bfloat16: "BF16",
  bf16: "BF16",
};

export type MergeDtype = "F32" | "F16" | "BF16";

/** One conditional value: applies to tensors whose name contains `filter` (every tensor without one, or "*"). */
export interface ConditionalSetting {
  readonly filter: string | null;
  readonly value: Setting;
}

/** A parameter's setting: a scalar, a gradient (numbers interpolated across layers) or conditional values. */
export type Setting = number | string | readonly number[] | readonly string[] | readonly ConditionalSetting[];

export type Parameters = ReadonlyMap<string, Setting>;

export interface SliceSource {
  readonly model: string;
  /** [first, end) layers of `model`; null for a `models:` entry (all of its layers). */
  readonly layerRange: readonly [number, number] | null;
  readonly parameters: Parameters;
}

export interface OutputSlice {
  readonly sources: readonly SliceSource[];
  readonly baseModel: string | null;
  readonly parameters: Parameters;
}

export interface MergeConfig {
  readonly method: MergeMethod;
  readonly baseModel: string | null;
  /** The dtype inputs are converted to before merging (null: each tensor's stored dtype). */
  readonly dtype: MergeDtype | null;
  /** The output's dtype (null: the compute dtype). */
  readonly outDtype: MergeDtype | null;
  /** "base", a model, or null. */
  readonly tokenizerSource: string | null;
  readonly parameters: Parameters;
  /** `models:` (one slice of every model's layers) or `slices:`. */
  readonly form: "models" | "slices";
  readonly slices: readonly OutputSlice[];
  /** Every model the config names, in order of first mention (base first when given). */
  readonly models: readonly string[];
}

const TOP_KEYS = new Set([
  "merge_method",
  "base_model",
  "dtype",
  "out_dtype",
  "tokenizer_source",
  "parameters",
  "models",
  "slices",
]);
/** Keys mergekit knows that we refuse (rather than ignore): what they ask for is not done here. */
const REFUSED_TOP_KEYS = new Set(["modules", "tokenizer", "chat_template"]);

function invalid(message: string): never {
  throw new SafetensorError("InvalidMergeConfig", message);
}

function unsupported(message: string): never {
  throw new SafetensorError("UnsupportedMergeConfig", message);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function checkKeys(where: string, value: Record<string, unknown>, allowed: ReadonlySet<string>): void {
  for (const key of Object.keys(value)) {
    if (!allowed.has(key))
      unsupported(`${where}: key \`${key}\` is not supported (allowed: ${[...allowed].join(", ")})`);
  }
}

function parseSetting(where: string, value: unknown): Setting {
  if (typeof value === "boolean") return value ? 1 : 0;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) invalid(`${where}: ${value} is not a finite number`);
    return value;
  }
  if (typeof value === "string") return value;
  if (isRecord(value)) return [parseConditional(where, value)];
  if (Array.isArray(value)) {
    if (value.length === 0) invalid(`${where}: an empty list`);
    if (value.every((e) => typeof e === "number" || typeof e === "boolean")) {
      return value.map((e, i) => parseSetting(`${where}[${i}]`, e) as number);
    }
    if (value.every((e) => typeof e === "string")) return value as string[];
    if (value.every(isRecord)) return value.map((e, i) => parseConditional(`${where}[${i}]`, e));
    invalid(`${where}: a list must hold numbers (a gradient) or {filter, value} entries, not a mix`);
  }
  invalid(`${where}: ${JSON.stringify(value)} is not a number, a gradient or a list of {filter, value}`);
}

function parseConditional(where: string, value: Record<string, unknown>): ConditionalSetting {
  checkKeys(where, value, new Set(["filter", "value"]));
  if (!("value" in value)) invalid(`${where}: a conditional setting needs \`value\``);
  const filter = value.filter;
  if (filter !== undefined && filter !== null && typeof filter !== "string") invalid(`${where}.filter: not a string`);
  const inner = parseSetting(`${where}.value`, value.value);
  if (Array.isArray(inner) && inner.length > 0 && isRecord(inner[0])) {
    invalid(`${where}.value: conditional settings do not nest`);
  }
  return { filter: typeof filter === "string" ? filter : null, value: inner };
}

function parseParameters(where: string, value: unknown, allowed: ReadonlySet<string>, method: string): Parameters {
  if (value === undefined || value === null) return new Map();
  if (!isRecord(value)) invalid(`${where}: parameters must be a mapping`);
  const out = new Map<string, Setting>();
  for (const [name, setting] of Object.entries(value)) {
    if (!allowed.has(name)) {
      unsupported(
        `${where}: parameter \`${name}\` is not one ${method} reads (it reads: ${[...allowed].join(", ") || "none"})`,
      );
    }
    out.set(name, parseSetting(`${where}.${name}`, setting));
  }
  return out;
}

function parseModelName(where: string, value: unknown): string {
  if (isRecord(value) && typeof value.model === "string" && Object.keys(value).length === 1) value = value.model;
  if (typeof value !== "string" || value === "") invalid(`${where}: a model must be a path or a URL`);
  if (/\+/.test(value) && !/^[a-z0-9]+:\/\//i.test(value)) {
    // mergekit reads `model+lora` as a model with a LoRA applied first.
    unsupported(`${where}: \`${value}\`: model+LoRA references are not supported (bake the LoRA first: lora merge)`);
  }
  return value;
}

function parseDtype(where: string, value: unknown): MergeDtype | null {
  if (value === undefined || value === null) return null;
  const dtype = typeof value === "string" ? DTYPE_NAMES[value.toLowerCase()] : undefined;
  if (!dtype) unsupported(`${where}: dtype \`${String(value)}\` is not supported (float32, float16 or bfloat16)`);
  return dtype;
}

function parseLayerRange(where: string, value: unknown): [number, number] {
  if (
    !Array.isArray(value) ||
    value.length !== 2 ||
    !value.every((v) => Number.isSafeInteger(v) && (v as number) >= 0) ||
    (value[0] as number) > (value[1] as number)
  ) {
    invalid(`${where}: layer_range must be [first, end] with 0 <= first <= end`);
  }
  return [value[0] as number, value[1] as number];
}

/** Check a config (mergekit's YAML, parsed) and resolve its shape; refuses anything we do not run. */
export function parseMergeConfig(input: unknown): MergeConfig {
  if (!isRecord(input)) invalid("a merge config must be a mapping");
  for (const key of Object.keys(input)) {
    if (REFUSED_TOP_KEYS.has(key)) unsupported(`key \`${key}\` is not supported`);
  }
  checkKeys("config", input, TOP_KEYS);
  const methodName = input.merge_method;
  if (typeof methodName !== "string") invalid("`merge_method` is required");
  if (!Object.hasOwn(MERGE_METHODS, methodName)) {
    unsupported(
      `merge_method \`${methodName}\` is not supported (supported: ${Object.keys(MERGE_METHODS).join(", ")})`,
    );
  }
  const method = methodName as MergeMethod;
  const spec = MERGE_METHODS[method];
  const allParams = new Set<string>([...spec.global, ...spec.tensor]);
  const baseModel = input.base_model == null ? null : parseModelName("base_model", input.base_model);
  const dtype = parseDtype("dtype", input.dtype);
  const outDtype = parseDtype("out_dtype", input.out_dtype);
  let tokenizerSource: string | null = null;
  if (input.tokenizer_source != null) {
    const source = input.tokenizer_source;
    if (source === "union") unsupported("tokenizer_source `union` is not supported (only the base's tokenizer)");
    const name = source === "base" ? "base" : parseModelName("tokenizer_source", source);
    if (name !== "base" && name !== baseModel) {
      unsupported("tokenizer_source: only `base` (the base model's tokenizer files, copied) is supported");
    }
    tokenizerSource = "base";
  }
  const parameters = parseParameters("parameters", input.parameters, allParams, method);
  const hasModels = input.models != null;
  const hasSlices = input.slices != null;
  if (hasModels === hasSlices) invalid("exactly one of `models` and `slices` must be given");
  const slices: OutputSlice[] = [];
  if (hasModels) {
    if (!Array.isArray(input.models) || input.models.length === 0) invalid("`models` must be a non-empty list");
    const sources = input.models.map((entry, i): SliceSource => {
      const where = `models[${i}]`;
      if (typeof entry === "string")
        return { model: parseModelName(where, entry), layerRange: null, parameters: new Map() };
      if (!isRecord(entry)) invalid(`${where}: must be a mapping with \`model\``);
      checkKeys(where, entry, new Set(["model", "parameters"]));
      return {
        model: parseModelName(`${where}.model`, entry.model),
        layerRange: null,
        parameters: parseParameters(`${where}.parameters`, entry.parameters, allParams, method),
      };
    });
    // mergekit adds the base model to the inputs when the list leaves it out.
    if (baseModel !== null && !sources.some((s) => s.model === baseModel)) {
      sources.push({ model: baseModel, layerRange: null, parameters: new Map() });
    }
    slices.push({ sources, baseModel: null, parameters: new Map() });
  } else {
    if (!Array.isArray(input.slices) || input.slices.length === 0) invalid("`slices` must be a non-empty list");
    input.slices.forEach((entry, i) => {
      const where = `slices[${i}]`;
      if (!isRecord(entry)) invalid(`${where}: must be a mapping with \`sources\``);
      checkKeys(where, entry, new Set(["sources", "base_model", "parameters"]));
      if (!Array.isArray(entry.sources) || entry.sources.length === 0) invalid(`${where}.sources: a non-empty list`);
      const sources = entry.sources.map((source, j): SliceSource => {
        const at = `${where}.sources[${j}]`;
        if (!isRecord(source)) invalid(`${at}: must be a mapping with \`model\` and \`layer_range\``);
        checkKeys(at, source, new Set(["model", "layer_range", "parameters"]));
        return {
          model: parseModelName(`${at}.model`, source.model),
          layerRange: parseLayerRange(`${at}.layer_range`, source.layer_range),
          parameters: parseParameters(`${at}.parameters`, source.parameters, allParams, method),
        };
      });
      const lengths = new Set(sources.map((s) => s.layerRange![1] - s.layerRange![0]));
      if (lengths.size !== 1) invalid(`${where}: all sources of a slice must span the same number of layers`);
      slices.push({
        sources,
        baseModel: entry.base_model == null ? null : parseModelName(`${where}.base_model`, entry.base_model),
        parameters: parseParameters(`${where}.parameters`, entry.parameters, allParams, method),
      });
    });
  }
  const models: string[] = [];
  const mention = (name: string | null) => {
    if (name !== null && !models.includes(name)) models.push(name);
  };
  mention(baseModel);
  for (const slice of slices) {
    mention(slice.baseModel);
    for (const source of slice.sources) mention(source.model);
  }
  return {
    method,
    baseModel,
    dtype,
    outDtype,
    tokenizerSource,
    parameters,
    form: hasModels ? "models" : "slices",
    slices,
    models,
  };
}

/**
 * A setting's value for one tensor at position `t` in [0, 1] of its slice's layers (mergekit's `evaluate_setting`):
 * a gradient is interpolated linearly between its points; conditional values apply the first whose filter is in the
 * tensor's name. Undefined when no conditional value applies.
 */
export function evaluateSetting(tensorName: string, setting: Setting, t: number): number | string | undefined {
  if (typeof setting === "number" || typeof setting === "string") return setting;
  const list = setting as readonly unknown[];
  if (typeof list[0] === "number") {
    const points = list as readonly number[];
    const scaled = t * (points.length - 1);
    const i0 = Math.trunc(scaled);
    const i1 = Math.min(points.length - 1, i0 + 1);
    const frac = scaled - i0;
    return (1 - frac) * points[i0]! + frac * points[i1]!;
  }
  if (typeof list[0] === "string") return (list as readonly string[])[Math.trunc(t * (list.length - 1))];
  for (const cond of list as readonly ConditionalSetting[]) {
    if (cond.filter === null || cond.filter === "*" || (tensorName !== "" && tensorName.includes(cond.filter))) {
      return evaluateSetting(tensorName, cond.value, t);
    }
  }
  return undefined;
}
