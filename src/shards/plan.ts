/**
 * Shard assignment, step for step as `huggingface_hub`'s `split_state_dict_into_shards_factory` (used by
 * `split_torch_state_dict_into_shards`, `save_torch_state_dict` and transformers' `save_pretrained`):
 * - tensors are taken in input order; a tensor that would take the current shard over the limit closes it first;
 * - a tensor larger than the limit gets a shard of its own, added at once, while the current shard stays open (so
 *   it can come before shards holding earlier tensors);
 * - tensors sharing storage with an earlier one take no space and join the first one's shard (appended to it);
 * - `total_size` counts each storage once.
 * One shard is named `model.safetensors`; N shards `model-0000i-of-0000N.safetensors`.
 */
import { quoteName, SafetensorError } from "../format/errors.js";
import { parseSize } from "./size.js";

/** huggingface_hub's default limit. */
export const DEFAULT_MAX_SHARD_SIZE = "5GB";
/** huggingface_hub's and transformers' file name pattern. */
export const DEFAULT_FILENAME_PATTERN = "model{suffix}.safetensors";

/** A tensor to place in a shard: its name, its storage's size, and the storage it shares with others. */
export interface ShardItem {
  readonly name: string;
  /** Bytes of the tensor's storage. */
  readonly size: number;
  /** Items with the same (non-undefined) key share storage, compared with `Map` key equality. */
  readonly storage?: unknown;
}

/** One shard of a plan: its file name and tensors. */
export interface PlannedShard {
  readonly file: string;
  /** Tensor names in the order huggingface_hub lists them. */
  readonly tensors: readonly string[];
}

/** huggingface_hub's shard assignment for a set of tensors. */
export interface ShardPlan {
  readonly shards: readonly PlannedShard[];
  /** Tensor → shard file, in huggingface_hub's order (its `tensor_to_filename`). */
  readonly weightMap: ReadonlyMap<string, string>;
  /** huggingface_hub's `metadata.total_size`: storage bytes, each storage counted once. */
  readonly totalSize: number;
  /** More than one shard: an index file is written. */
  readonly isSharded: boolean;
}

/** Options of `planShards` and `saveSharded`: the shard size limit and the file names. */
export interface PlanShardsOptions {
  /** Bytes, or a size string as huggingface_hub parses it ("5GB", "150KB"; also "2GiB"). Default "5GB". */
  maxShardSize?: number | string;
  /** Must contain `{suffix}` once. Default "model{suffix}.safetensors". */
  filenamePattern?: string;
}

/** The file name of shard `index` (0-based) of `count`, as huggingface_hub formats it. */
export function shardFileName(index: number, count: number, pattern = DEFAULT_FILENAME_PATTERN): string {
  const pad = (n: number) => String(n).padStart(5, "0");
  return pattern.replace("{suffix}", count === 1 ? "" : `-${pad(index + 1)}-of-${pad(count)}`);
}

/**
 * Assign tensors to shards as huggingface_hub's `split_torch_state_dict_into_shards` does, to the byte: tensors in
 * input order, a tensor over the limit in a shard of its own, tensors sharing a storage together and counted once.
 */
export function planShards(items: Iterable<ShardItem>, options: PlanShardsOptions = {}): ShardPlan {
  const maxShardSize = parseSize(options.maxShardSize ?? DEFAULT_MAX_SHARD_SIZE);
  const pattern = options.filenamePattern ?? DEFAULT_FILENAME_PATTERN;
  if (pattern.split("{suffix}").length !== 2) {
    throw new SafetensorError(
      "InvalidOption",
      `filenamePattern must contain {suffix} once (got ${quoteName(pattern)})`,
    );
  }
  const seen = new Set<string>();
  const sharing = new Map<unknown, string[]>();
  const shards: string[][] = [];
  let current: string[] = [];
  let currentSize = 0;
  let totalSize = 0;
  for (const item of items) {
    if (seen.has(item.name)) throw new SafetensorError("DuplicateKey", `duplicate tensor name ${quoteName(item.name)}`);
    seen.add(item.name);
    if (!Number.isSafeInteger(item.size) || item.size < 0) {
      throw new SafetensorError(
        "InvalidTensor",
        `tensor ${quoteName(item.name)}: size ${item.size} is not a byte count`,
      );
    }
    if (item.storage !== undefined) {
      const group = sharing.get(item.storage);
      if (group) {
        group.push(item.name);
        continue;
      }
      sharing.set(item.storage, [item.name]);
    }
    if (item.size > maxShardSize) {
      totalSize += item.size;
      shards.push([item.name]);
      continue;
    }
    if (currentSize + item.size > maxShardSize) {
      shards.push(current);
      current = [];
      currentSize = 0;
    }
    current.push(item.name);
    currentSize += item.size;
    totalSize += item.size;
  }
  if (current.length > 0) shards.push(current);
  for (const group of sharing.values()) {
    if (group.length > 1) shards.find((shard) => shard.includes(group[0]!))!.push(...group.slice(1));
  }
  const planned = shards.map((tensors, i) => ({ file: shardFileName(i, shards.length, pattern), tensors }));
  const weightMap = new Map<string, string>();
  for (const shard of planned) for (const name of shard.tensors) weightMap.set(name, shard.file);
  return { shards: planned, weightMap, totalSize, isSharded: planned.length > 1 };
}
