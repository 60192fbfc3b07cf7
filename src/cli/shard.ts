/** `safetensors shard`: split a file (or re-split a checkpoint) into huggingface_hub's shards, by byte copies. */
import * as fs from "node:fs";
import * as path from "node:path";
import { mergedMetadata } from "../edit/checkpoint.js";
import { type OutputTensor, writeFileFrom } from "../edit/write.js";
import { parseSize, planShards } from "../shards/index.js";
import { commitCheckpoint, indexNameOf, staleFiles } from "../shards/node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { guardOutputs, REWRITE_NOTES, REWRITE_OPTIONS, rewrite } from "./rewrite.js";

export const command = defineCommand({
  usage: "shard IN OUTDIR [--max-shard-size SIZE] [--index-style huggingface_hub|transformers] [--json]",
  description: `Split IN (a file, a checkpoint directory or an index) into OUTDIR as huggingface_hub saves a checkpoint:
the same shard assignment (tensors in file-offset order; shard by shard for a checkpoint), names
(model-00001-of-00003.safetensors, or model.safetensors when one file holds everything) and index
(model.safetensors.index.json with metadata.total_size and weight_map). Tensor bytes are copied, never decoded;
every shard keeps the input's metadata. Files of an earlier save in OUTDIR that this one does not replace are
removed, as huggingface_hub does.

SIZE: bytes, or a number with a unit: KB, MB, GB, TB (powers of 1000, as huggingface_hub) or KiB, MiB, GiB, TiB.
Default 5GB. A tensor larger than SIZE gets a shard of its own.

${REWRITE_NOTES}`,
  options: {
    "max-shard-size": { type: "string", value: "SIZE", help: "largest shard (default 5GB)" },
    "index-style": {
      type: "string",
      value: "STYLE",
      help: "huggingface_hub (default: insertion order) or transformers (sorted keys, final newline)",
    },
    ...REWRITE_OPTIONS,
  },
  run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("shard takes IN and OUTDIR");
    const [input, outDir] = positionals as [string, string];
    const style = values["index-style"] ?? "huggingface_hub";
    if (style !== "huggingface_hub" && style !== "transformers") {
      throw new UsageError(`--index-style must be huggingface_hub or transformers (got ${JSON.stringify(style)})`);
    }
    let maxShardSize: number;
    try {
      maxShardSize = parseSize(values["max-shard-size"] ?? "5GB");
    } catch (error) {
      throw new UsageError(`--max-shard-size: ${(error as Error).message}`);
    }
    return rewrite(input, io, values.json, (checkpoint, progress) => {
      const byName = new Map(checkpoint.tensors.map((t) => [t.name, t]));
      if (byName.size === 0) throw new UsageError(`${input} holds no tensors`);
      // huggingface_hub identifies storage by data pointer and size; tensors that safetensors loads point into the
      // mapped file, so empty tensors at the same offset of the same file are one storage to it (measured with
      // torch 2.13: load_file gives an empty tensor the address of the next tensor's bytes).
      const plan = planShards(
        checkpoint.tensors.map((t) => ({
          name: t.name,
          size: t.byteLength,
          storage: t.byteLength === 0 ? `${t.fd}:${t.offset}` : undefined,
        })),
        { maxShardSize },
      );
      const written = [...plan.shards.map((s) => path.join(outDir, s.file))];
      if (plan.isSharded) written.push(path.join(outDir, indexNameOf()));
      guardOutputs(
        checkpoint,
        [...written, ...staleFiles(outDir, "model{suffix}.safetensors", plan)],
        values["in-place"],
      );
      const metadata = mergedMetadata(checkpoint.files).metadata;
      let bytes = 0;
      const files = commitCheckpoint(outDir, plan, { fsync: values.fsync, indexStyle: style }, (target, names) => {
        const tensors: OutputTensor[] = names.map((name) => ({
          name,
          source: byName.get(name)!,
          dtype: byName.get(name)!.dtype,
        }));
        bytes += writeFileFrom(target, tensors, metadata, { fsync: values.fsync }, progress);
      });
      if (plan.isSharded) bytes += fs.statSync(files.at(-1)!).size;
      return { files, bytes, tensors: byName.size };
    });
  },
});
