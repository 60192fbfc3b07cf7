/**
 * The input of the byte-copy tools: one safetensors file or a sharded checkpoint, as a list of tensors with the open
 * descriptor and absolute offset of their bytes (nothing is read but headers). Node-only.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { Dtype } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import { ioError, openForReading, PreadSource } from "../io/node-file.js";
import { SafetensorsFile } from "../read/file.js";
import type { ShardIndex } from "../shards/index.js";
import { isShardedTarget, openSharded } from "../shards/node.js";

export interface SourceTensor {
  readonly name: string;
  readonly dtype: Dtype;
  readonly shape: readonly number[];
  readonly byteLength: number;
  /** Descriptor of the file holding the bytes (owned by the checkpoint) and the bytes' absolute offset in it. */
  readonly fd: number;
  readonly offset: number;
}

export interface InputFile {
  /** The path as opened, and its name relative to the checkpoint directory. */
  readonly path: string;
  readonly name: string;
  readonly metadata: ReadonlyMap<string, string> | null;
  /** Tensors in file-offset order. */
  readonly tensors: readonly SourceTensor[];
}

export interface Checkpoint {
  readonly sharded: boolean;
  /** The directory of a sharded checkpoint (where its shard names are relative to). */
  readonly directory: string;
  /** The index of a sharded checkpoint, null for one file. */
  readonly index: ShardIndex | null;
  /** The index's file name (in `directory`), null for one file. */
  readonly indexName: string | null;
  /** One file, or the shards in the index's order. */
  readonly files: readonly InputFile[];
  /** Every tensor: file by file, in offset order. */
  readonly tensors: readonly SourceTensor[];
  readonly warnings: readonly string[];
  /** `dev:ino` of every input file, to refuse writing over one. */
  readonly identities: ReadonlySet<string>;
  close(): void;
}

export function identity(stat: fs.Stats): string {
  return `${stat.dev}:${stat.ino}`;
}

function openInputFile(file: string, name: string, files: SafetensorsFile[]): { input: InputFile; id: string } {
  const fd = openForReading(file);
  let stat: fs.Stats;
  try {
    stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new SafetensorError("IoError", `${file} is not a regular file`);
  } catch (error) {
    fs.closeSync(fd);
    throw ioError(error, `cannot read ${file}`);
  }
  // The header is read through the descriptor the copies will use, so what was validated is what gets copied.
  const parsed = SafetensorsFile.open(new PreadSource(fd, stat.size));
  files.push(parsed);
  const header = parsed.header;
  const tensors = [...header.tensors.values()].map((info) => ({
    name: info.name,
    dtype: info.dtype,
    shape: info.shape,
    byteLength: info.byteLength,
    fd,
    offset: header.dataStart + info.dataOffsets[0],
  }));
  return { input: { path: file, name, metadata: header.metadata, tensors }, id: identity(stat) };
}

/** Open IN: a safetensors file, a checkpoint directory or an index file (checked as `openSharded` checks it). */
export function openCheckpoint(target: string): Checkpoint {
  const opened: SafetensorsFile[] = [];
  const close = () => {
    for (const file of opened) file.close();
  };
  try {
    const identities = new Set<string>();
    if (!isShardedTarget(target)) {
      const { input, id } = openInputFile(target, path.basename(target), opened);
      identities.add(id);
      return {
        sharded: false,
        directory: path.dirname(target),
        index: null,
        indexName: null,
        files: [input],
        tensors: input.tensors,
        warnings: [],
        identities,
        close,
      };
    }
    // openSharded does every check (paths, symlinks, headers, the index against the headers); the copies then read
    // through descriptors of their own.
    const checked = openSharded(target, { backend: "pread" });
    const { directory, index, warnings } = checked;
    const shards = checked.shards;
    const listed = new Map(checked.indexKeys().map((name) => [name, checked.shardOf(name)]));
    checked.close();
    const files: InputFile[] = [];
    for (const name of shards) {
      const { input, id } = openInputFile(path.join(directory, name), name, opened);
      identities.add(id);
      for (const tensor of input.tensors) {
        if (listed.get(tensor.name) !== undefined && listed.get(tensor.name) !== name) {
          throw new SafetensorError("InvalidIndex", `${quoteName(name)} changed while being opened`);
        }
      }
      // Only what the index lists is part of the checkpoint (as for loaders).
      files.push({ ...input, tensors: input.tensors.filter((tensor) => listed.get(tensor.name) === name) });
    }
    if (checked.indexPath) identities.add(identity(fs.statSync(checked.indexPath)));
    return {
      sharded: checked.indexPath !== null,
      directory,
      index: checked.indexPath !== null ? index : null,
      indexName: checked.indexPath !== null ? path.basename(checked.indexPath) : null,
      files,
      tensors: files.flatMap((file) => file.tensors),
      warnings,
      identities,
      close,
    };
  } catch (error) {
    close();
    throw error;
  }
}

/**
 * The metadata of a merged checkpoint: the shards' metadata combined; a key two shards give different values keeps
 * the first shard's value (each such key is reported).
 */
export function mergedMetadata(files: readonly InputFile[]): {
  metadata: Map<string, string> | null;
  conflicts: string[];
} {
  let metadata: Map<string, string> | null = null;
  const conflicts: string[] = [];
  for (const file of files) {
    if (!file.metadata) continue;
    metadata ??= new Map();
    for (const [key, value] of file.metadata) {
      const seen = metadata.get(key);
      if (seen === undefined) metadata.set(key, value);
      else if (seen !== value && !conflicts.includes(key)) conflicts.push(key);
    }
  }
  return { metadata, conflicts };
}
