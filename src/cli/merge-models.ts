/** `safetensors merge-models`: mergekit's YAML config → a merged checkpoint directory, streamed. */
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import { MERGE_METHODS } from "../merge/config.js";
import { loadMergeYaml, mergeModels, parseMergeYaml } from "../merge/node-merge.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { runWithProgress } from "./rewrite.js";

export const command = defineCommand({
  usage: "merge-models CONFIG.yml OUTDIR [--seed N] [--max-shard-size SIZE] [--no-copy-tokenizer] [--json]",
  description: `Merge models as a mergekit config says (merge_method, models or slices, base_model, parameters with
gradients and filters, dtype, out_dtype, tokenizer_source: base), with mergekit's arithmetic. Methods:
${Object.keys(MERGE_METHODS).join(", ")}.

Models are local directories (an index and its shards, or one model.safetensors), index or .safetensors files, or
hf://ORG/REPO, https:// and s3:// locations: only headers and the tensors' bytes are read, by range. Each output
tensor is computed from its inputs in chunks (element-wise methods: memory of a few chunks whatever the model's
size) or whole (methods that need a tensor's statistics: TIES's magnitude ranks, SLERP's angle), and streamed into
shards. OUTDIR gets the shards, their index, the base model's config.json (num_hidden_layers updated for slices,
torch_dtype for dtype/out_dtype) and its tokenizer files, all committed at once: killed at any point, OUTDIR holds
its old files or the new ones, never a mix.

A config that uses a method, key or parameter that is not supported is refused by name (error[UnsupportedMergeConfig])
before any model is opened. DARE and DELLA drop entries with a seeded generator: the same --seed gives the same bytes.`,
  options: {
    seed: { type: "string", value: "N", help: "seed of DARE's and DELLA's random drops (default 0)" },
    "max-shard-size": { type: "string", value: "SIZE", help: 'largest shard, bytes or "5GB" (default 5GB)' },
    "no-copy-tokenizer": { type: "boolean", help: "do not copy tokenizer files unless tokenizer_source asks" },
    json: { type: "boolean", help: "print a summary (files, tensors, bytes read and written, seconds) as JSON" },
    fsync: { type: "boolean", help: "fsync each file and the directory before reporting success" },
  },
  async run({ values, positionals }, { io }) {
    if (positionals.length !== 2) throw new UsageError("merge-models takes CONFIG.yml and OUTDIR");
    const [configPath, outDir] = positionals as [string, string];
    let seed = 0;
    if (values.seed !== undefined) {
      seed = Number(values.seed);
      if (!Number.isSafeInteger(seed) || seed < 0) throw new UsageError("--seed must be a non-negative integer");
    }
    let text: string;
    try {
      text = fs.readFileSync(configPath, "utf8");
    } catch (error) {
      throw new SafetensorError("IoError", `cannot read ${configPath}: ${(error as Error).message}`);
    }
    await loadMergeYaml();
    const config = parseMergeYaml(text);
    return runWithProgress(io, values.json, (onProgress) =>
      mergeModels(config, outDir, {
        seed,
        maxShardSize: values["max-shard-size"],
        copyTokenizer: !values["no-copy-tokenizer"],
        fsync: values.fsync,
        onProgress,
      }),
    );
  },
});
