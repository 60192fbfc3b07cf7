/**
 * Sharded checkpoints (a directory, or a `*.index.json` file) as the input of inspect, validate, hash and get: the
 * index is checked against every shard (as `openSharded` checks it); its warnings go to standard error.
 */
import * as path from "node:path";
import type { Backend } from "../read/node-files.js";
import { isShardedTarget, openSharded, type ShardedFile } from "../shards/node.js";
import {
  formatInspect,
  group,
  humanBytes,
  type InspectTextOptions,
  inspectShardedJson,
  metadataLines,
  parameterCount,
  plural,
  shellWord,
  tensorLines,
} from "../view/inspect-format.js";
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
 * `inspect` of a checkpoint. JSON (`text` undefined): {"index","metadata","parameters","data_bytes","warnings",
 * "shards":[{"file", ...inspect --json of that shard}]}, shards in the index's order. Text: a line about the
 * checkpoint, then by default its shards, the first shard's metadata and the first tensors across shards with the
 * totals; with --tensors each shard's table, with --metadata the first shard's metadata in full.
 */
export function inspectSharded(
  target: string,
  text: (InspectTextOptions & { verbose: boolean }) | undefined,
  backend: Backend | undefined,
  io: Io,
): number {
  using sharded = openShardedInput(target, backend, io);
  const headers = sharded.shards.map((file) => [file, sharded.shard(file).header] as const);
  const parameters = headers.reduce((sum, [, header]) => sum + parameterCount(header), 0n);
  if (text === undefined) {
    const { indexPath, warnings, dataBytes } = sharded;
    io.stdout(`${inspectShardedJson({ indexPath, metadata: sharded.metadata(), headers, dataBytes, warnings })}\n`);
    return 0;
  }
  const count = sharded.shards.length;
  const index = sharded.indexPath ? `, index ${path.basename(sharded.indexPath)}` : "";
  const out = [
    `${target}: ${plural(count, "shard")}, ${plural(sharded.keys().length, "tensor")}, ${plural(parameters, "parameter")}, ${group(sharded.dataBytes)} data bytes (${humanBytes(sharded.dataBytes)})${index}`,
  ];
  const shown = shellWord(target);
  if (text.tensors === "first") {
    const rows = headers.map(([file, header]) => [
      file,
      plural(header.tensors.size, "tensor"),
      humanBytes(header.dataLength),
    ]);
    out.push("shards:", ...alignRows(rows).map((row) => `  ${row}`));
  }
  if (text.tensors === "all") {
    // Each shard's own table: its file, its tensors and totals.
    for (const [file, header] of headers) {
      const backendName = text.verbose ? sharded.shard(file).backend : undefined;
      const table = formatInspect(path.join(sharded.directory, file), header, {
        tensors: "all",
        metadata: "none",
        backend: backendName,
      });
      out.push("", table.trimEnd());
    }
  }
  const first = headers[0]?.[1].metadata ?? null;
  const differ = headers.some(([, header]) => !sameMetadata(header.metadata, first));
  const metadataLabel = count === 1 ? "metadata" : differ ? `metadata of ${headers[0]![0]}` : "every shard's metadata";
  const metadata = metadataLines(first, { ...text, metadataLabel }, shown);
  if (metadata.length > 0) out.push(...(text.tensors === "all" ? ["", ...metadata] : metadata));
  if (text.tensors === "first") {
    const infos = headers.flatMap(([, header]) => [...header.tensors.values()]);
    out.push("", ...tensorLines({ tensors: infos, size: infos.length, dataLength: sharded.dataBytes }, text, shown));
  }
  io.stdout(`${out.join("\n")}\n`);
  return 0;
}

function sameMetadata(a: ReadonlyMap<string, string> | null, b: ReadonlyMap<string, string> | null): boolean {
  if (a === null || b === null) return a === b;
  return a.size === b.size && [...a].every(([key, value]) => b.get(key) === value);
}

/** Rows of cells, the first left-aligned and the rest right-aligned. */
function alignRows(rows: string[][]): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((row) => row[i]!.length))) ?? [];
  return rows.map((row) =>
    row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  "),
  );
}
