/**
 * The merge planner: a checked config and what each model holds (names, dtypes, shapes) become one job per output
 * tensor: its name, its inputs (model and tensor name, in mergekit's order), the method's parameters resolved for
 * that tensor (gradients interpolated at the layer's position, filters applied, defaults filled in), the dtype the
 * arithmetic runs in and the output's dtype. Layers are renumbered for slices. Pure: runs in browsers.
 *
 * The order and the resolution rules are mergekit's `MergePlanner` and `ConfigReader`: a `models:` config is one
 * slice of every model's layers (the base added last when not listed); tensors outside layers are planned with the
 * first slice's sources (embeddings) or the last's (the rest), at t = 0; layer i of an n-layer slice has
 * t = i / (n - 1) (1 for a one-layer slice); a per-model parameter is looked up in that model's source entry, then in
 * the slice's parameters, then in the global ones.
 */
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import {
  evaluateSetting,
  MERGE_METHODS,
  type MergeConfig,
  type MergeDtype,
  type MergeMethod,
  type OutputSlice,
} from "./config.js";

export interface CatalogTensor {
  readonly dtype: Dtype;
  readonly shape: readonly number[];
}

/** What one model holds: its tensors (in its files' order) and its layer count. */
export interface ModelCatalog {
  readonly tensors: ReadonlyMap<string, CatalogTensor>;
  /** `num_hidden_layers` of its config.json, or one more than the highest layer index in its tensor names. */
  readonly numLayers: number;
}

export interface JobInput {
  readonly model: string;
  readonly name: string;
  readonly dtype: Dtype;
  /** The method's per-model parameters, resolved for this tensor (a missing optional one is absent). */
  readonly params: ReadonlyMap<string, number>;
}

export interface TensorJob {
  readonly name: string;
  readonly shape: readonly number[];
  readonly method: MergeMethod;
  readonly inputs: readonly JobInput[];
  /** Index of the base model in `inputs`, or -1. */
  readonly base: number;
  /** The method's global parameters, resolved for this tensor (defaults filled in). */
  readonly params: ReadonlyMap<string, number>;
  /** Where the tensor sits in its slice, 0..1 (what gradients were evaluated at). */
  readonly t: number;
  readonly computeDtype: MergeDtype;
  readonly outDtype: MergeDtype;
}

export interface MergePlan {
  readonly jobs: readonly TensorJob[];
  /** Layers of the output (for config.json's `num_hidden_layers`). */
  readonly numLayers: number;
  /**
   * For each output layer, the layer of its slice's first model it comes from (for per-layer config lists such as
   * `layer_types`).
   */
  readonly sourceLayers: readonly number[];
  /** The model whose config.json and tokenizer files the output takes: the base, else the first model. */
  readonly templateModel: string;
}

/** The method's defaults for parameters that are optional (mergekit's `ConfigParameterDef`s). */
function defaults(method: MergeMethod): Record<string, number | null> {
  switch (method) {
    case "linear":
      return { normalize: 1 };
    case "slerp":
      return {};
    case "nuslerp":
      return { nuslerp_row_wise: 0, nuslerp_flatten: 1 };
    case "model_stock":
      return { filter_wise: 0 };
    case "passthrough":
      return { scale: null };
    default: {
      const normalize = method === "ties" || method === "della" ? 1 : 0;
      const rescale = method.startsWith("dare") || method.startsWith("della") ? 1 : 0;
      return { int8_mask: 0, normalize, rescale, lambda: 1, density: 1, gamma: 0.01, epsilon: 0.15 };
    }
  }
}

const REQUIRED: Partial<Record<MergeMethod, readonly string[]>> = { slerp: ["t"] };

/** A tensor name inside a numbered layer: prefix (`model.layers.`), index, suffix (`.mlp.up_proj.weight`). */
const LAYER_NAME = /^(.*?\.?(?:layers|h|blocks|layer)\.)(\d+)(\..+)$/;

export function layerOf(name: string): { prefix: string; index: number; suffix: string } | null {
  const match = LAYER_NAME.exec(name);
  if (!match) return null;
  return { prefix: match[1]!, index: Number(match[2]), suffix: match[3]! };
}

/** The layer count a model's tensor names imply (one more than the highest layer index). */
export function countLayers(names: Iterable<string>): number {
  let count = 0;
  for (const name of names) {
    const layer = layerOf(name);
    if (layer) count = Math.max(count, layer.index + 1);
  }
  return count;
}

function mismatch(message: string, tensor?: string): never {
  throw new SafetensorError("MergeMismatch", message, tensor === undefined ? undefined : { tensor });
}

function numeric(value: number | string | undefined, name: string): number | undefined {
  if (value === undefined || typeof value === "number") return value;
  throw new SafetensorError("InvalidMergeConfig", `parameter \`${name}\` must be a number, got "${value}"`);
}

/** mergekit's ConfigReader.parameter: the model's own entry, then the slice's parameters, then the global ones. */
function lookup(
  config: MergeConfig,
  slice: OutputSlice,
  name: string,
  model: string | null,
  tensorName: string,
  t: number,
): number | undefined {
  if (model !== null) {
    for (const source of slice.sources) {
      const setting = source.model === model ? source.parameters.get(name) : undefined;
      if (setting !== undefined) {
        const value = evaluateSetting(tensorName, setting, t);
        if (value !== undefined) return numeric(value, name);
      }
    }
  }
  for (const parameters of [slice.parameters, config.parameters]) {
    const setting = parameters.get(name);
    if (setting !== undefined) {
      const value = evaluateSetting(tensorName, setting, t);
      if (value !== undefined) return numeric(value, name);
    }
  }
  return undefined;
}

/** Plan every output tensor of `config` over the models' catalogs (every model the config names must be there). */
export function planMerge(config: MergeConfig, catalogs: ReadonlyMap<string, ModelCatalog>): MergePlan {
  const catalog = (model: string): ModelCatalog => {
    const found = catalogs.get(model);
    if (!found) throw new SafetensorError("InvalidOption", `no catalog for model ${model}`);
    return found;
  };
  const spec = MERGE_METHODS[config.method];
  const defaultValues = defaults(config.method);
  const templateModel = config.baseModel ?? config.models[0]!;
  const jobs: TensorJob[] = [];

  const planTensor = (outName: string, slice: OutputSlice, inputNames: readonly string[], t: number) => {
    const base = slice.baseModel ?? config.baseModel;
    const inputs: JobInput[] = [];
    let shape: readonly number[] | null = null;
    slice.sources.forEach((source, i) => {
      const name = inputNames[i]!;
      const info = catalog(source.model).tensors.get(name);
      if (!info) mismatch(`${source.model} has no tensor ${name} (needed for ${outName})`, outName);
      if (shape === null) shape = info.shape;
      else if (shape.join(",") !== info.shape.join(",")) {
        mismatch(`${outName}: ${source.model}'s ${name} is [${info.shape}], another input's is [${shape}]`, outName);
      }
      const params = new Map<string, number>();
      for (const p of spec.tensor) {
        const value = lookup(config, slice, p, source.model, name, t) ?? defaultValues[p] ?? undefined;
        if (value === undefined || value === null) {
          if (p === "weight" && source.model !== base && config.method !== "passthrough") {
            throw new SafetensorError(
              "InvalidMergeConfig",
              `missing required parameter \`weight\` for ${source.model}.${name}`,
              { tensor: name },
            );
          }
          continue;
        }
        params.set(p, value);
      }
      inputs.push({ model: source.model, name, dtype: info.dtype, params });
    });
    const params = new Map<string, number>();
    for (const p of spec.global) {
      const value = lookup(config, slice, p, null, outName, t) ?? defaultValues[p] ?? undefined;
      if (value === undefined || value === null) {
        if (REQUIRED[config.method]?.includes(p)) {
          throw new SafetensorError("InvalidMergeConfig", `missing required parameter \`${p}\` for ${outName}`, {
            tensor: outName,
          });
        }
        continue;
      }
      params.set(p, value);
    }
    const baseIndex = base === null ? -1 : slice.sources.findIndex((s) => s.model === base);
    const needsBase = !["linear", "passthrough", "nuslerp"].includes(config.method);
    if (needsBase && baseIndex < 0) {
      throw new SafetensorError(
        "InvalidMergeConfig",
        base === null
          ? `${config.method} needs a base_model`
          : `the base model ${base} is not among the sources of the slice that makes ${outName}`,
      );
    }
    const stored = inputs[Math.max(baseIndex, 0)]!.dtype;
    const computeDtype = config.dtype ?? (stored === "F32" || stored === "F16" || stored === "BF16" ? stored : null);
    if (computeDtype === null) {
      throw new SafetensorError(
        "UnsupportedDtype",
        `${outName} is ${stored}: give \`dtype\` (float32, float16 or bfloat16) to merge it`,
        { tensor: outName },
      );
    }
    jobs.push({
      name: outName,
      shape: shape!,
      method: config.method,
      inputs,
      base: baseIndex,
      params,
      t,
      computeDtype,
      outDtype: config.outDtype ?? computeDtype,
    });
  };

  // Non-layer tensors of the template: embeddings before the layers (first slice), the rest after (last slice).
  const templateNames = [...catalog(templateModel).tensors.keys()].filter((name) => layerOf(name) === null);
  const pre = templateNames.filter((name) => /embed/.test(name));
  const post = templateNames.filter((name) => !/embed/.test(name));
  const first = config.slices[0]!;
  const last = config.slices.at(-1)!;
  const ranges = (slice: OutputSlice) =>
    slice.sources.map((s) => s.layerRange ?? ([0, catalog(s.model).numLayers] as const));
  for (const name of pre)
    planTensor(
      name,
      first,
      first.sources.map(() => name),
      0,
    );

  let outLayer = 0;
  const sourceLayers: number[] = [];
  for (const slice of config.slices) {
    const sliceRanges = ranges(slice);
    const lengths = new Set(sliceRanges.map(([a, b]) => b - a));
    if (lengths.size !== 1) mismatch("the models of a slice have different layer counts");
    const count = sliceRanges[0]![1] - sliceRanges[0]![0];
    slice.sources.forEach((source, i) => {
      if (sliceRanges[i]![1] > catalog(source.model).numLayers) {
        mismatch(`${source.model} has ${catalog(source.model).numLayers} layers, the slice asks for ${sliceRanges[i]}`);
      }
    });
    for (let i = 0; i < count; i++) {
      const t = count > 1 ? i / (count - 1) : 1;
      const firstSource = slice.sources[0]!;
      const layerNames = layerTensors(catalog(firstSource.model), sliceRanges[0]![0] + i);
      for (const { prefix, suffix } of layerNames) {
        const inputNames = sliceRanges.map(([start]) => `${prefix}${start + i}${suffix}`);
        planTensor(`${prefix}${outLayer}${suffix}`, slice, inputNames, t);
      }
      sourceLayers.push(sliceRanges[0]![0] + i);
      outLayer++;
    }
  }
  for (const name of post)
    planTensor(
      name,
      last,
      last.sources.map(() => name),
      0,
    );
  return { jobs, numLayers: outLayer, sourceLayers, templateModel };
}

/** The tensors of one layer of a model, in the model's order. */
function layerTensors(catalog: ModelCatalog, index: number): { prefix: string; suffix: string }[] {
  const out: { prefix: string; suffix: string }[] = [];
  for (const name of catalog.tensors.keys()) {
    const layer = layerOf(name);
    if (layer && layer.index === index) out.push({ prefix: layer.prefix, suffix: layer.suffix });
  }
  return out;
}
