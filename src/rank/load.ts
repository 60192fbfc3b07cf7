/**
 * Reading one rank's parts: each part is read with its exact byte runs (no gap bridging, so a rank never pulls
 * bytes of another rank's part), a bounded number of tensors at a time. Works over async files and sharded
 * checkpoints (remote or local) and over sync handles. Pure.
 */
import { Limiter } from "../io/async-decorators.js";
import type { ReadOptions } from "../io/async-source.js";
import { Tensor } from "../read/tensor.js";
import type { SliceIndex, SlicePlan } from "../slice/index.js";
import { planRankLoad, type RankOptions, type RankPlan, type RankTensor, type TensorCatalog } from "./plan.js";

/** Default of `RankReadOptions.concurrency`. */
export const DEFAULT_RANK_CONCURRENCY = 8;

interface PlanReader {
  readPlan(name: string, plan: SlicePlan, options?: ReadOptions & { maxGap?: number }): Promise<Uint8Array>;
}
interface ShardedReader {
  shardOf(name: string): string;
  shard(file: string): PlanReader;
}
interface SyncSliceReader {
  getSlice(name: string): { get(index: readonly SliceIndex[]): Tensor };
}

/** A file or checkpoint to read rank parts from: async (`readPlan`), sharded async, or sync (`getSlice`). */
export type RankSource = TensorCatalog & (PlanReader | ShardedReader | SyncSliceReader);

async function readPart(handle: RankSource, part: RankTensor, signal: AbortSignal | undefined): Promise<Uint8Array> {
  const options = { maxGap: 0, signal };
  if ("readPlan" in handle) return handle.readPlan(part.name, part.plan, options);
  if ("shardOf" in handle) {
    const shard = handle.shard(handle.shardOf(part.name));
    if ("readPlan" in shard) return shard.readPlan(part.name, part.plan, options);
  }
  // Copied: a sync view may be tied to the handle's lifetime (mmap).
  return (handle as unknown as SyncSliceReader).getSlice(part.name).get(part.index).data.slice();
}

/** Options of `loadRank` and `readRankParts`. */
export interface RankReadOptions {
  /** Tensors read at once (default 8). */
  readonly concurrency?: number;
  readonly signal?: AbortSignal;
}

/** Read every part of `plan`, calling `sink` as each arrives (in any order). */
export async function readRankParts(
  handle: RankSource,
  plan: RankPlan,
  sink: (part: RankTensor, bytes: Uint8Array) => void | Promise<void>,
  options: RankReadOptions = {},
): Promise<void> {
  const limiter = new Limiter(options.concurrency ?? DEFAULT_RANK_CONCURRENCY);
  await Promise.all(
    plan.tensors.map((part) =>
      limiter.run(async () => {
        await sink(part, await readPart(handle, part, options.signal));
      }),
    ),
  );
}

/** This rank's part of every tensor, as tensors with the same names and split shapes, in plan order. */
export async function loadRank(
  handle: RankSource,
  options: RankOptions & RankReadOptions,
): Promise<Map<string, Tensor>> {
  const plan = planRankLoad(handle, options);
  const parts = new Map<string, Uint8Array>();
  await readRankParts(handle, plan, (part, bytes) => void parts.set(part.name, bytes), options);
  return new Map(plan.tensors.map((t) => [t.name, new Tensor(t.dtype, t.shape, parts.get(t.name)!)]));
}
