/**
 * Rank-parallel loading plans: which part of each tensor one rank of a tensor-parallel group holds. Rules name, by
 * glob over tensor names (first match wins), the dimension a tensor is split along — 0 for column-parallel weights
 * (rows of `[out, in]`: q/k/v, gate/up, embeddings, lm_head), 1 for row-parallel ones (o_proj, down_proj) — or that
 * it is replicated (norms, biases of row-parallel layers, anything unmatched). Each part is a numpy slice, so a rank
 * reads only its own bytes. Pure.
 */
import type { Dtype } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { planSlice, type SliceIndex, type SlicePlan, slice } from "../slice/index.js";

/** How tensors whose names match `pattern` are split across ranks. */
export interface RankRule {
  /** Glob over the tensor name: `*` any characters (dots included), `?` one character. */
  readonly pattern: string;
  /** The dimension to split along (negative counts from the end), or "replicate". */
  readonly split: number | "replicate";
}

/** Megatron-style tensor parallelism for Llama-family names (also Mistral, Qwen2, Gemma). */
export const LLAMA_RULES: readonly RankRule[] = [
  { pattern: "*embed_tokens.weight", split: 0 },
  { pattern: "*q_proj.*", split: 0 },
  { pattern: "*k_proj.*", split: 0 },
  { pattern: "*v_proj.*", split: 0 },
  { pattern: "*gate_proj.*", split: 0 },
  { pattern: "*up_proj.*", split: 0 },
  { pattern: "*o_proj.weight", split: 1 },
  { pattern: "*down_proj.weight", split: 1 },
  { pattern: "lm_head.weight", split: 0 },
  { pattern: "*", split: "replicate" },
];

/** One tensor's part for a rank: which dimension is split and the range of it this rank gets. */
export interface RankTensor {
  readonly name: string;
  readonly dtype: Dtype;
  /** The whole tensor's shape. */
  readonly fullShape: readonly number[];
  /** This rank's part's shape. */
  readonly shape: readonly number[];
  /** The split dimension (non-negative), or null when replicated. */
  readonly dim: number | null;
  /** [start, stop) along `dim` (the whole axis when replicated). */
  readonly start: number;
  readonly stop: number;
  /** The slice that selects the part, and its read plan. */
  readonly index: readonly SliceIndex[];
  readonly plan: SlicePlan;
}

/** One rank's part of every tensor (`planRankLoad`). */
export interface RankPlan {
  readonly rank: number;
  readonly worldSize: number;
  /** In the handle's order. */
  readonly tensors: readonly RankTensor[];
  /** Bytes of this rank's parts (what it reads). */
  readonly byteLength: number;
}

/** Which rank of how many, and the rules that say how each tensor is split. */
export interface RankOptions {
  readonly rank: number;
  readonly worldSize: number;
  /** Default `LLAMA_RULES`. */
  readonly rules?: readonly RankRule[];
  /** The tensors to plan, in this order (default: all, `handle.keys()`). */
  readonly names?: readonly string[];
}

/** Anything that knows tensor names and infos: sync or async files, sharded checkpoints. */
export interface TensorCatalog {
  keys(): string[];
  info(name: string): TensorInfo;
}

function globToRegExp(pattern: string): RegExp {
  const body = pattern
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${body}$`, "s");
}

/** Check rules given as untrusted JSON: an array of {pattern, split}. */
export function parseRankRules(value: unknown): RankRule[] {
  const bad = (why: string): never => {
    throw new SafetensorError("InvalidOption", `rank rules: ${why}`);
  };
  if (!Array.isArray(value)) bad('expected a JSON array of {"pattern": GLOB, "split": DIM | "replicate"}');
  return (value as unknown[]).map((rule, i) => {
    const { pattern, split } = (rule ?? {}) as { pattern?: unknown; split?: unknown };
    if (typeof pattern !== "string") bad(`rule ${i} has no string "pattern"`);
    if (!(split === "replicate" || Number.isSafeInteger(split)))
      bad(`rule ${i}: "split" must be an integer or "replicate"`);
    return { pattern: pattern as string, split: split as number | "replicate" };
  });
}

/** This rank's part of every tensor (or of `options.names`). */
export function planRankLoad(handle: TensorCatalog, options: RankOptions): RankPlan {
  const { rank, worldSize } = options;
  const names = options.names ?? handle.keys();
  if (!(Number.isSafeInteger(worldSize) && worldSize >= 1)) {
    throw new SafetensorError("InvalidOption", `worldSize must be a positive integer, got ${worldSize}`);
  }
  if (!(Number.isSafeInteger(rank) && rank >= 0 && rank < worldSize)) {
    throw new SafetensorError("InvalidOption", `rank must be an integer in [0, ${worldSize}), got ${rank}`);
  }
  const rules = (options.rules ?? LLAMA_RULES).map((rule) => ({ ...rule, regexp: globToRegExp(rule.pattern) }));
  let byteLength = 0;
  const tensors = names.map((name): RankTensor => {
    const info = handle.info(name);
    const rule = rules.find((r) => r.regexp.test(name));
    const split = rule?.split ?? "replicate";
    const ndim = info.shape.length;
    let dim: number | null = null;
    let index: SliceIndex[] = [];
    let start = 0;
    let stop = ndim === 0 ? 1 : info.shape[0]!;
    if (split !== "replicate") {
      dim = split < 0 ? split + ndim : split;
      if (!(dim >= 0 && dim < ndim)) {
        throw new SafetensorError(
          "InvalidOption",
          `rule ${JSON.stringify(rule!.pattern)} splits tensor ${quoteName(name)} along dim ${split}, but it has ${ndim} dims`,
          { tensor: name },
        );
      }
      // Balanced parts, like numpy.array_split: sizes differ by at most one when the dim does not divide evenly.
      const n = info.shape[dim]!;
      start = Math.floor((rank * n) / worldSize);
      stop = Math.floor(((rank + 1) * n) / worldSize);
      index = [...Array.from({ length: dim }, () => slice()), slice(start, stop)];
    }
    const plan = planSlice(info.dtype, info.exactShape ?? info.shape, index);
    byteLength += plan.byteLength;
    return {
      name,
      dtype: info.dtype,
      fullShape: info.shape,
      shape: plan.shape.map(Number),
      dim,
      start,
      stop,
      index,
      plan,
    };
  });
  return { rank, worldSize, tensors, byteLength };
}
