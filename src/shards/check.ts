/**
 * Checking an index against its shards' headers (pure: the caller reads the headers, locally or remotely).
 * Errors: a listed tensor missing from its shard, a tensor held by two shards. Warnings (transformers loads such
 * checkpoints): tensors in a shard that the index does not list, `total_size` disagreeing with the tensors' bytes.
 */
import { quoteName, SafetensorError } from "../format/errors.js";
import type { Header, TensorInfo } from "../format/header.js";
import type { ShardIndex } from "./index-json.js";

/** Where a listed tensor is: its shard file and its header entry there. */
export interface ShardLocation {
  readonly file: string;
  readonly info: TensorInfo;
}

/** An index checked against its shards' headers. */
export interface CheckedShards {
  /** Listed tensor → its shard and header entry, in the index's order. */
  readonly locations: ReadonlyMap<string, ShardLocation>;
  readonly warnings: readonly string[];
  /** Sum of the listed tensors' bytes. */
  readonly dataBytes: number;
}

/**
 * Check an index against its shards' headers, as `openSharded` does: a listed tensor its shard lacks, or a tensor in
 * two shards, is `InvalidIndex`; a `total_size` that disagrees and tensors the index does not list are warnings.
 */
export function checkShards(index: ShardIndex, headers: ReadonlyMap<string, Header>): CheckedShards {
  const warnings = [...index.warnings];
  const holder = new Map<string, string>();
  for (const file of index.files) {
    const header = headers.get(file);
    if (!header) throw new SafetensorError("InvalidIndex", `shard ${quoteName(file)} was not read`);
    for (const name of header.tensors.keys()) {
      const other = holder.get(name);
      if (other !== undefined) {
        throw new SafetensorError(
          "InvalidIndex",
          `tensor ${quoteName(name)} is in two shards: ${quoteName(other)} and ${quoteName(file)}`,
          { tensor: name },
        );
      }
      holder.set(name, file);
    }
  }
  const locations = new Map<string, ShardLocation>();
  let dataBytes = 0;
  for (const [name, file] of index.weightMap) {
    const info = headers.get(file)!.tensors.get(name);
    if (!info) {
      const actual = holder.get(name);
      throw new SafetensorError(
        "InvalidIndex",
        `the index puts tensor ${quoteName(name)} in ${quoteName(file)}, which does not hold it${actual ? ` (${quoteName(actual)} does)` : ""}`,
        { tensor: name },
      );
    }
    locations.set(name, { file, info });
    dataBytes += info.byteLength;
  }
  for (const [name, file] of holder) {
    if (!locations.has(name))
      warnings.push(`shard ${quoteName(file)} holds tensor ${quoteName(name)}, which the index does not list`);
  }
  if (index.totalSize !== null && BigInt(index.totalSize) !== BigInt(dataBytes)) {
    warnings.push(`metadata.total_size is ${index.totalSize} but the listed tensors hold ${dataBytes} bytes`);
  }
  return { locations, warnings, dataBytes };
}
