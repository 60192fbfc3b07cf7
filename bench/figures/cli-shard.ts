import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { defineFigure, type ProcessContext } from "./types.js";

/** Shard size of the shard/merge figures: five or six shards of the 2.37 GiB checkpoint. */
const SHARD_SIZE = "500MB";

/** `shard` as a whole process: byte copies (copy_file_range) into huggingface_hub's shards; peak RSS is the point. */
export const cliShard = defineFigure<void>({
  name: "cli_shard",
  method: {
    ours: `\`node bin/safetensors.js shard FILE DIR --max-shard-size ${SHARD_SIZE}\`, spawn to exit`,
    reference: `\`python bench/ref_shard.py FILE DIR ${SHARD_SIZE}\` (load_file + huggingface_hub's save_torch_state_dict), spawn to exit`,
  },
  backends: ["auto"],
  ours: {
    kind: "process",
    argv: (ctx) => [
      ctx.node,
      path.join(ctx.repo, "bin", "safetensors.js"),
      "shard",
      ctx.path,
      path.join(ctx.scratch, "ours"),
      "--max-shard-size",
      SHARD_SIZE,
    ],
  },
  reference: {
    kind: "process",
    argv: (ctx) => [
      ctx.python,
      path.join(ctx.bench, "ref_shard.py"),
      ctx.path,
      path.join(ctx.scratch, "reference"),
      SHARD_SIZE,
    ],
  },
  goal: { ratio: 1, rssMaxMib: 100 },
});

/** The sharded twin of the checkpoint, made once next to it by our `shard` (and checked by `validate`). */
function shardedCheckpoint(ctx: ProcessContext): string {
  const dir = path.join(path.dirname(ctx.path), `${path.basename(ctx.path, ".safetensors")}-sharded-${SHARD_SIZE}`);
  const bin = path.join(ctx.repo, "bin", "safetensors.js");
  if (!fs.existsSync(path.join(dir, "model.safetensors.index.json"))) {
    execFileSync(ctx.node, [bin, "shard", ctx.path, dir, "--max-shard-size", SHARD_SIZE], { stdio: "ignore" });
  }
  execFileSync(ctx.node, [bin, "validate", dir], { stdio: "ignore" });
  return dir;
}

/** `merge` as a whole process: the shards back into one file by byte copies; peak RSS is the point. */
export const cliMerge = defineFigure<void>({
  name: "cli_merge",
  method: {
    ours: "`node bin/safetensors.js merge DIR OUT`, spawn to exit",
    reference: "`python bench/ref_merge.py DIR OUT` (load_file of every shard + save_file), spawn to exit",
  },
  backends: ["auto"],
  ours: {
    kind: "process",
    argv: (ctx) => [
      ctx.node,
      path.join(ctx.repo, "bin", "safetensors.js"),
      "merge",
      shardedCheckpoint(ctx),
      path.join(ctx.scratch, "ours.safetensors"),
    ],
  },
  reference: {
    kind: "process",
    argv: (ctx) => [
      ctx.python,
      path.join(ctx.bench, "ref_merge.py"),
      shardedCheckpoint(ctx),
      path.join(ctx.scratch, "reference.safetensors"),
    ],
  },
  goal: { ratio: 1, rssMaxMib: 100 },
});
