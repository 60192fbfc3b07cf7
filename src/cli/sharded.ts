/**
 * Sharded checkpoints (a directory, or a `*.index.json` file) as the input of inspect, validate, hash and get: the
 * index is checked against every shard (as `openSharded` checks it); its warnings go to standard error.
 */
import * as path from "node:path";
import type { Backend } from "../read/node-files.js";
import { isShardedTarget, openSharded, type ShardedFile } from "../shards/node.js";
import { formatInspect, inspectShardedJson, parameterCount } from "../view/inspect-format.js";
import type { Io } from "./io.js";

export { isShardedTarget };

/** Open a sharded checkpoint, printing its warnings. */
export function openShardedInput(target: string, backend: Backend | undefined, io: Io): ShardedFile {
  const sharded = openSharded(target, { backend: backend ?? "auto" });
  for (const warning of sharded.warnings) io.stderr(`warning: ${target}: ${warning}\n`);
  return sharded;
}

/** Each sharded target replaced by its shard files (after checking it), for commands that work file by file. */
export function expandSharded(targets: readonly string[], backend: Backend | undefined, io: Io): string[] {
  return targets.flatMap((target) => {
    if (target === "-" || !isShardedTarget(target)) return [target];
    using sharded = openShardedInput(target, backend, io);
    return sharded.shards.map((shard) => path.join(sharded.directory, shard));
  });
}

/**
 * `inspect` of a checkpoint. JSON: {"index","metadata","parameters","data_bytes","warnings","shards":[{"file",
 * ...inspect --json of that shard}]}, shards in the index's order; text: a summary line, then each shard's table.
 */
export function inspectSharded(
  target: string,
  json: boolean,
  verbose: boolean,
  backend: Backend | undefined,
  io: Io,
): number {
  using sharded = openShardedInput(target, backend, io);
  const headers = sharded.shards.map((file) => [file, sharded.shard(file).header] as const);
  const parameters = headers.reduce((sum, [, header]) => sum + parameterCount(header), 0n);
  if (json) {
    const { indexPath, warnings, dataBytes } = sharded;
    io.stdout(`${inspectShardedJson({ indexPath, metadata: sharded.metadata(), headers, dataBytes, warnings })}\n`);
    return 0;
  }
  io.stdout(
    `${target}: ${sharded.shards.length} shard${sharded.shards.length === 1 ? "" : "s"}, ${sharded.keys().length} tensors, ${parameters} parameters, ${sharded.dataBytes} data bytes${sharded.indexPath ? ` (index ${path.basename(sharded.indexPath)})` : ""}\n`,
  );
  for (const [file, header] of headers) {
    const shard = sharded.shard(file);
    io.stdout(`\n${formatInspect(path.join(sharded.directory, file), header, verbose ? shard.backend : undefined)}`);
  }
  return 0;
}
