/**
 * Deterministic tensor sets for the crash and fault tests, shared by the test (expected bytes) and the child that
 * writes them (test/helpers/write-child.ts), so both sides agree without passing data around.
 */
import { Tensor } from "../../src/read/tensor.js";
import { fill } from "./fill.js";

export interface WritePlan {
  tensors: Map<string, Tensor>;
  metadata: Record<string, string>;
}

/**
 * `count` tensors of mixed dtypes and sizes from `seed` (a few bytes to `maxBytes`), plus metadata naming the seed.
 * Many small tensors make saveFile issue several vectored writes (1024 buffers per call).
 */
export function writePlan(seed: number, count: number, maxBytes: number): WritePlan {
  const tensors = new Map<string, Tensor>();
  let x = seed * 2654435761 + 1;
  const next = () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return x;
  };
  for (let i = 0; i < count; i++) {
    const dtype = (["F32", "BF16", "U8", "I64"] as const)[next() % 4]!;
    const width = { F32: 4, BF16: 2, U8: 1, I64: 8 }[dtype];
    const elements = 1 + (next() % Math.max(1, Math.floor(maxBytes / width)));
    tensors.set(`layer.${i}.weight`, new Tensor(dtype, [elements], fill(elements * width, seed * 7919 + i)));
  }
  return { tensors, metadata: { seed: String(seed), format: "pt" } };
}

/** maxShardSize of the sharded crash trials: ~450 KB of tensors in about five shards. */
export const SHARD_SIZE = "100KB";
