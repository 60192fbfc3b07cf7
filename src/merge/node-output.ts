/**
 * Writing a merge's or a bake's checkpoint (Node): shards planned as huggingface_hub plans them, each tensor filled
 * through the streaming writer in pieces, and one commit that puts the shards, the index and the files beside them
 * (config.json, tokenizer files) in place at once (`shards/save-commit.ts`: old directory or new, never a mix).
 */
import type { Dtype } from "../format/dtypes.js";
import { createWriter } from "../io/stream-writer.js";
import { planShards } from "../shards/index.js";
import { commitCheckpointAsync } from "../shards/node.js";
import { elementBytes, elementCount } from "./execute.js";
import type { ModelSource } from "./node-source.js";

export interface OutputTensorSpec {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
}

export interface WriteCheckpointOptions {
  maxShardSize?: number | string;
  fsync?: boolean;
  /** The shards' file names (default "model{suffix}.safetensors"; an adapter's: "adapter_model{suffix}.safetensors"). */
  filenamePattern?: string;
}

/** Bytes of the output's tensors. */
export function outputBytes(tensors: readonly OutputTensorSpec[]): number {
  return tensors.reduce((sum, t) => sum + elementCount(t.shape) * elementBytes(t.dtype), 0);
}

/** Where a tensor's bytes go besides `write`: straight from a file, or by another thread. */
export interface TensorTarget {
  /** Copy `length` bytes at `position` of `fd` to byte `offset` of the tensor (copy_file_range, or direct I/O). */
  copyFrom(fd: number, position: number, length: number, offset: number): void;
  /**
   * Bytes [offset, offset + length) of the tensor, written by the caller at `position` of the file at `path` through
   * a descriptor of its own (a worker thread's), before `fill` resolves.
   */
  claim(offset: number, length: number): { path: string; position: number };
}

/**
 * Write `tensors` (in this order) into `outDir` as a checkpoint: `fill(name, write, target)` gives each tensor's
 * bytes, by pieces at byte offsets. `sideFiles` are committed with the shards.
 */
export async function writeCheckpoint(
  outDir: string,
  tensors: readonly OutputTensorSpec[],
  sideFiles: readonly (readonly [string, Uint8Array])[],
  options: WriteCheckpointOptions,
  fill: (
    tensor: OutputTensorSpec,
    write: (bytes: Uint8Array, byteOffset: number) => void,
    target: TensorTarget,
  ) => Promise<void>,
): Promise<string[]> {
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const plan = planShards(
    tensors.map((t) => ({ name: t.name, size: elementCount(t.shape) * elementBytes(t.dtype) })),
    { maxShardSize: options.maxShardSize, filenamePattern: options.filenamePattern },
  );
  return commitCheckpointAsync(
    outDir,
    plan,
    { fsync: options.fsync, sideFiles, removeStale: true, filenamePattern: options.filenamePattern },
    async (target, names) => {
      const writer = createWriter(
        target,
        names.map((name) => [name, { dtype: byName.get(name)!.dtype, shape: byName.get(name)!.shape }] as const),
        { format: "pt" },
        { fsync: options.fsync },
      );
      try {
        for (const name of names) {
          await fill(byName.get(name)!, (bytes, offset) => writer.write(name, bytes, offset), {
            copyFrom: (fd, position, length, offset) => writer.copyFrom(name, fd, position, length, offset),
            claim: (offset, length) => writer.claim(name, offset, length),
          });
        }
        writer.commit();
      } finally {
        writer.abort();
      }
    },
  );
}

/** Tokenizer files copied from the template model when present (what `save_pretrained` of a tokenizer writes). */
export const TOKENIZER_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "tokenizer.model",
  "vocab.json",
  "merges.txt",
  "added_tokens.json",
  "chat_template.jinja",
];

const TORCH_DTYPE: Partial<Record<Dtype, string>> = { F32: "float32", F16: "float16", BF16: "bfloat16" };

/**
 * The files beside the weights: the model's config.json (with `changes` applied to the keys it has, `set` to any, and
 * torch_dtype set to `dtype` when given), then each of `names` the model has.
 */
export async function sideFilesOf(
  model: ModelSource,
  dtype: Dtype | null,
  changes: Record<string, unknown>,
  names: readonly string[],
  set: Record<string, unknown> = {},
): Promise<[string, Uint8Array][]> {
  const files: [string, Uint8Array][] = [];
  if (model.config !== null) {
    const config: Record<string, unknown> = { ...model.config };
    for (const [key, value] of Object.entries(changes)) if (key in config) config[key] = value;
    Object.assign(config, set);
    const torchDtype = dtype === null ? undefined : TORCH_DTYPE[dtype];
    if (torchDtype !== undefined) {
      config.torch_dtype = torchDtype;
      if ("dtype" in config) config.dtype = torchDtype;
    }
    files.push(["config.json", new TextEncoder().encode(`${JSON.stringify(config, null, 2)}\n`)]);
  }
  for (const name of names) {
    const bytes = await model.readSideFile(name);
    if (bytes !== null) files.push([name, bytes]);
  }
  return files;
}
