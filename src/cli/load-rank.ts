/** `safetensors load-rank`: one tensor-parallel rank's part of every tensor, read with only its own bytes. */
import * as fs from "node:fs";
import type { Header } from "../format/header.js";
import { createWriter } from "../io/stream-writer.js";
import { type RankSource, readRankParts } from "../rank/load.js";
import { LLAMA_RULES, parseRankRules, planRankLoad } from "../rank/plan.js";
import { openAsync } from "../read/node-async.js";
import { openFile } from "../read/node-files.js";
import { openShardedAsync } from "../shards/async.js";
import { isShardedTarget, openSharded } from "../shards/node.js";
import { UsageError } from "./args.js";
import { defineCommand } from "./command.js";
import { isRemoteLocation } from "./location.js";

function integer(value: string | undefined, name: string): number {
  if (value === undefined) throw new UsageError(`load-rank needs --${name}`);
  if (!/^\d+$/.test(value))
    throw new UsageError(`--${name} must be a non-negative integer (got ${JSON.stringify(value)})`);
  return Number(value);
}

/**
 * Remote first read for rank loading: just the size prefix. A rank needs only its parts of the data, so a speculative
 * 1 MiB first read would mostly fetch other ranks' bytes; this way a shard's header costs exactly 8 + N bytes in two
 * requests (the extra round trip per shard is paid in parallel across shards).
 */
const RANK_FIRST_READ = 8;

async function openSource(
  location: string,
): Promise<{ handle: RankSource; names: string[]; header: Header | null; close: () => void | Promise<void> }> {
  const sharded = location.endsWith(".json");
  if (isRemoteLocation(location)) {
    if (sharded) {
      const handle = await openShardedAsync(location, { firstReadBytes: RANK_FIRST_READ });
      return { handle, names: handle.indexKeys(), header: null, close: () => handle.close() };
    }
    const handle = await openAsync(location, { firstReadBytes: RANK_FIRST_READ });
    return { handle, names: handle.offsetKeys(), header: handle.header, close: () => handle.close() };
  }
  if (isShardedTarget(location)) {
    const handle = openSharded(location);
    return { handle, names: handle.indexKeys(), header: null, close: () => handle.close() };
  }
  const handle = openFile(location);
  return { handle, names: handle.offsetKeys(), header: handle.header, close: () => handle.close() };
}

export const command = defineCommand({
  usage: "load-rank FILE|INDEX|URL --rank R --world-size W [--rules FILE] --out OUT.safetensors",
  description: `Write rank R's part (of W tensor-parallel ranks) of every tensor to OUT, same names, split shapes.
Tensors are split along a dimension or replicated by rules: a JSON array of {"pattern": GLOB, "split": DIM |
"replicate"} (first match wins; * matches any characters). Default rules are Llama-style: embed_tokens, q/k/v,
gate/up and lm_head split along dim 0 (column parallel), o_proj and down_proj weights along dim 1 (row parallel),
everything else replicated. Parts are balanced when a dimension does not divide evenly. Each part is read with
exactly its own byte ranges, from a file, a sharded checkpoint (directory or index), or a URL of either.`,
  options: {
    rank: { type: "string", value: "R", help: "this rank, 0 ≤ R < W" },
    "world-size": { type: "string", value: "W", help: "number of ranks" },
    rules: { type: "string", value: "FILE", help: "split rules (JSON); default Llama-style" },
    out: { type: "string", short: "o", value: "PATH", help: "the rank's file; required" },
  },
  async run({ values, positionals }) {
    if (positionals.length !== 1) throw new UsageError("load-rank takes exactly one SOURCE");
    if (values.out === undefined) throw new UsageError("load-rank needs --out PATH");
    const rank = integer(values.rank, "rank");
    const worldSize = integer(values["world-size"], "world-size");
    const rules =
      values.rules === undefined ? LLAMA_RULES : parseRankRules(JSON.parse(fs.readFileSync(values.rules, "utf8")));
    const { handle, names, header, close } = await openSource(positionals[0]!);
    try {
      const plan = planRankLoad(handle, { rank, worldSize, rules, names });
      const specs = new Map(plan.tensors.map((t) => [t.name, { dtype: t.dtype, shape: t.shape }]));
      const writer = createWriter(values.out, specs, header?.metadata ?? undefined);
      try {
        await readRankParts(handle, plan, (part, bytes) => writer.write(part.name, bytes));
        writer.commit();
      } catch (error) {
        writer.abort();
        throw error;
      }
    } finally {
      await close();
    }
    return 0;
  },
});
