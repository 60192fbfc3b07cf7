/**
 * Sharded checkpoints on the local file system: `saveSharded` (huggingface_hub's names, assignment and index) and
 * `openSharded` (one handle over all shards, the index checked against every shard's header).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { inFile, quoteName, SafetensorError } from "../format/errors.js";
import type { Header } from "../format/header.js";
import type { MetadataInput, NamedTensors, TensorLike } from "../format/serialize.js";
import { ioError, openForReading } from "../io/node-file.js";
import { type AtomicWriteOptions, writeAllAt, writeError, writeFileAtomic } from "../io/node-write.js";
import type { GetTensorOptions, SafetensorsFile, TensorSlice } from "../read/file.js";
import { type OpenFileOptions, openFile, type SaveFileOptions, saveFile } from "../read/node-files.js";
import type { Tensor } from "../read/tensor.js";
import {
  checkShards,
  DEFAULT_FILENAME_PATTERN,
  DEFAULT_MAX_INDEX_BYTES,
  type FormatIndexOptions,
  formatIndex,
  INDEX_FILE_NAME,
  type JsonValue,
  type PlanShardsOptions,
  parseIndex,
  planShards,
  type ShardIndex,
  type ShardLocation,
  type ShardPlan,
} from "./index.js";
import { beginStagedSave, checkpointStamp, rollForward, type StagedSave } from "./save-commit.js";
import { ShardedView } from "./view.js";

/** Options of `openSharded`: those of `openFile` for every shard, plus the index's size limit. */
export interface OpenShardedOptions extends OpenFileOptions {
  /** Largest index file read (default 64 MiB). */
  maxIndexBytes?: number;
}

/**
 * A sharded checkpoint opened as one: tensors are read from whichever shard holds them. It holds every shard open:
 * `close()` it when done (or `using sharded = openSharded(dir)`), which also releases the tensors viewing mapped
 * shards (copy with `clone()` or `getTensor(name, { memory: "owned" })` to keep them).
 */
export class ShardedFile extends ShardedView<SafetensorsFile> {
  private constructor(
    /** The directory shard paths are relative to. */
    readonly directory: string,
    /** The index file, or null for a directory holding a single `model.safetensors`. */
    readonly indexPath: string | null,
    index: ShardIndex,
    files: Map<string, SafetensorsFile>,
    locations: ReadonlyMap<string, ShardLocation>,
    warnings: readonly string[],
  ) {
    super(index, files, locations, warnings);
  }

  /** Open a checkpoint directory (its `model.safetensors.index.json`, or its only `model.safetensors`) or an index. */
  static open(target: string, options: OpenShardedOptions = {}): ShardedFile {
    // A save into the directory may have been killed after its commit point (finish it), or may be running now: an
    // open during which a commit started or ended is done again (`save-commit.ts`).
    for (let attempt = 1; ; attempt++) {
      const directory = isDirectory(target) ? target : path.dirname(target);
      rollForward(directory);
      const { indexPath } = locateIndex(target);
      const before = checkpointStamp(directory, indexPath);
      let opened: ShardedFile;
      try {
        opened = ShardedFile.#open(target, options);
      } catch (error) {
        // A commit under the open can remove shards the old index names, or pair it with shards it does not
        // describe: an error then says nothing about the checkpoint, so open again.
        if (checkpointStamp(directory, indexPath) === before || attempt === OPEN_ATTEMPTS) throw error;
        continue;
      }
      if (checkpointStamp(directory, indexPath) === before) return opened;
      opened.close();
      if (attempt === OPEN_ATTEMPTS) {
        throw new SafetensorError("InterruptedSave", `${target} kept changing while being opened (a save is running?)`);
      }
    }
  }

  static #open(target: string, options: OpenShardedOptions): ShardedFile {
    const { indexPath, single } = locateIndex(target);
    const directory = path.dirname(indexPath ?? single!);
    const index = indexPath ? readIndex(indexPath, options.maxIndexBytes ?? DEFAULT_MAX_INDEX_BYTES) : null;
    const files = new Map<string, SafetensorsFile>();
    try {
      if (!index) {
        const file = openFile(single!, options);
        files.set(path.basename(single!), file);
        const name = path.basename(single!);
        const weightMap = new Map(file.offsetKeys().map((key) => [key, name]));
        const synthetic: ShardIndex = { metadata: new Map(), totalSize: null, weightMap, files: [name], warnings: [] };
        const checked = checkShards(synthetic, new Map([[name, file.header]]));
        return new ShardedFile(directory, null, synthetic, files, checked.locations, checked.warnings);
      }
      const realDirectory = realpath(directory);
      const headers = new Map<string, Header>();
      for (const name of index.files) {
        const file = openShard(directory, realDirectory, name, indexPath!, options);
        files.set(name, file);
        headers.set(name, file.header);
      }
      const checked = checkShards(index, headers);
      return new ShardedFile(directory, indexPath, index, files, checked.locations, checked.warnings);
    } catch (error) {
      for (const file of files.values()) file.close();
      throw error;
    }
  }

  getTensor(name: string, options?: GetTensorOptions): Tensor {
    return this.shard(this.locate(name).file).getTensor(name, options);
  }

  getSlice(name: string): TensorSlice {
    return this.shard(this.locate(name).file).getSlice(name);
  }

  /** Close every shard (idempotent); later reads throw `Closed`. Also run by `using`. */
  close(): void {
    for (const file of this.files?.values() ?? []) file.close();
    this.files = null;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * One shard of a checkpoint. Its errors name it (code kept, `file` set, the message prefixed with its path): "tensors
 * cover 945 data bytes but the file has 845" alone would not say which of six shards is damaged. A missing shard is
 * said to be missing, naming the index that lists it.
 */
function openShard(
  directory: string,
  realDirectory: string,
  name: string,
  indexPath: string,
  options: OpenFileOptions,
): SafetensorsFile {
  const joined = path.join(directory, name);
  if (!fs.existsSync(joined)) {
    throw new SafetensorError(
      "IoError",
      `cannot open ${joined}, a shard ${path.basename(indexPath)} lists: no such file or directory (ENOENT)`,
      { file: joined },
    );
  }
  try {
    return openFile(shardPath(directory, realDirectory, name), options);
  } catch (error) {
    throw inFile(error, joined, true);
  }
}

/** Opens of a checkpoint that a running save changed, before giving up. */
const OPEN_ATTEMPTS = 5;

function isDirectory(target: string): boolean {
  try {
    return fs.statSync(target).isDirectory();
  } catch {
    return false;
  }
}

/** Open a sharded checkpoint: a directory or an index file. */
export function openSharded(target: string, options?: OpenShardedOptions): ShardedFile {
  return ShardedFile.open(target, options);
}

/**
 * Is `target` a checkpoint to open with `openSharded` rather than one safetensors file: a `*.index.json` file, or a
 * directory holding an index or exactly one `.safetensors` file that is not named as one shard of several?
 */
export function isShardedTarget(target: string): boolean {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(target);
  } catch {
    return false;
  }
  if (!stat.isDirectory()) return stat.isFile() && target.endsWith(".index.json");
  let entries: string[];
  try {
    entries = fs.readdirSync(target);
  } catch {
    return false;
  }
  if (entries.some((entry) => entry.endsWith(".safetensors.index.json"))) return true;
  const files = entries.filter((entry) => entry.endsWith(".safetensors"));
  return files.length === 1 && !/-\d{5}-of-\d{5}\.safetensors$/.test(files[0]!);
}

function locateIndex(target: string): { indexPath: string | null; single: string | null } {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(target);
  } catch (error) {
    throw ioError(error, `cannot open ${target}`);
  }
  if (!stat.isDirectory()) return { indexPath: target, single: null };
  const standard = path.join(target, INDEX_FILE_NAME);
  if (fs.existsSync(standard)) return { indexPath: standard, single: null };
  const entries = fs.readdirSync(target);
  const indexes = entries.filter((entry) => entry.endsWith(".safetensors.index.json"));
  if (indexes.length === 1) return { indexPath: path.join(target, indexes[0]!), single: null };
  if (indexes.length > 1) {
    throw new SafetensorError(
      "InvalidIndex",
      `${target} holds several indexes (${indexes.join(", ")}): name the one to open`,
    );
  }
  const single = entries.filter((entry) => entry.endsWith(".safetensors"));
  if (single.length === 1) return { indexPath: null, single: path.join(target, single[0]!) };
  throw new SafetensorError(
    "InvalidIndex",
    `${target} has no ${INDEX_FILE_NAME}${single.length > 1 ? ` and several .safetensors files: name one` : " and no .safetensors file"}`,
  );
}

/** Read and parse an index file (strict: see parseIndex), at most `maxBytes`. */
export function readIndex(indexPath: string, maxBytes: number): ShardIndex {
  const fd = openForReading(indexPath);
  try {
    const size = fs.fstatSync(fd).size;
    if (size > maxBytes) {
      throw new SafetensorError("TooLarge", `index ${indexPath} is ${size} bytes, over the limit of ${maxBytes}`);
    }
    const bytes = Buffer.alloc(size);
    for (let done = 0; done < size; ) {
      const got = fs.readSync(fd, bytes, done, size - done, done);
      if (got === 0) throw new SafetensorError("IoError", `${indexPath} shrank while being read`);
      done += got;
    }
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
    } catch {
      throw new SafetensorError("InvalidIndex", `index ${indexPath} is not valid UTF-8`);
    }
    return parseIndex(text);
  } catch (error) {
    throw ioError(error, `cannot read ${indexPath}`);
  } finally {
    fs.closeSync(fd);
  }
}

export function realpath(file: string): string {
  try {
    return fs.realpathSync(file);
  } catch (error) {
    throw ioError(error, `cannot open ${file}`);
  }
}

/** The path of a shard, refusing one that resolves (through symlinks) outside the checkpoint's directory. */
export function shardPath(directory: string, realDirectory: string, name: string): string {
  const joined = path.join(directory, name);
  const real = realpath(joined);
  const relative = path.relative(realDirectory, real);
  if (relative === "" || relative.startsWith("..") || path.isAbsolute(relative)) {
    throw new SafetensorError("UnsafePath", `shard ${quoteName(name)} resolves outside ${directory} (to ${real})`);
  }
  return joined;
}

/** Options of `saveSharded`. */
export interface SaveShardedOptions extends PlanShardsOptions, AtomicWriteOptions, FormatIndexOptions {
  /** Remove files of an earlier save that this one does not replace, as huggingface_hub does (default true). */
  removeStale?: boolean;
  /**
   * As huggingface_hub: added to the index's metadata (after `total_size`) when sharded, to the file's metadata when
   * one file holds everything.
   */
  metadata?: MetadataInput;
  /** Metadata of every shard (default `{"format": "pt"}`, plus `metadata` for a single file; null for none). */
  shardMetadata?: MetadataInput;
  maxHeaderBytes?: number;
}

/** What `saveSharded` wrote. */
export interface SavedShards {
  readonly plan: ShardPlan;
  /** Paths written: shards, then the index. */
  readonly files: readonly string[];
}

function entries<T>(input: NamedTensors<TensorLike & T>): [string, TensorLike & T][] {
  if (input instanceof Map) return [...input.entries()];
  if (typeof (input as Iterable<unknown>)[Symbol.iterator] === "function") {
    return [...(input as Iterable<readonly [string, TensorLike & T]>)].map(([k, v]) => [k, v]);
  }
  return Object.entries(input as Record<string, TensorLike & T>);
}

function metadataEntries(input: MetadataInput): [string, string][] {
  if (input === null || input === undefined) return [];
  return input instanceof Map ? [...input] : Object.entries(input as Record<string, string>);
}

/**
 * Write tensors as a checkpoint directory the way huggingface_hub's `save_torch_state_dict` does: the same shard
 * assignment (tensors in input order; views of the same bytes count as shared storage), the same file names, the
 * same index. Each file is written atomically; the index last, then stale files of an earlier save are removed.
 */
export function saveSharded(dir: string, tensors: NamedTensors, options: SaveShardedOptions = {}): SavedShards {
  const list = entries(tensors);
  if (list.length === 0) throw new SafetensorError("InvalidTensor", "no tensors to save");
  const byName = new Map(list);
  const plan = planShards(
    list.map(([name, tensor]) => ({ name, size: tensor.data.byteLength, storage: storageKey(tensor.data) })),
    options,
  );
  const userMetadata = metadataEntries(options.metadata);
  const shardMetadata =
    options.shardMetadata !== undefined
      ? options.shardMetadata
      : new Map([["format", "pt"], ...(plan.isSharded ? [] : userMetadata)]);
  const fileOptions: SaveFileOptions = {
    fsync: options.fsync,
    mode: options.mode,
    maxHeaderBytes: options.maxHeaderBytes,
  };
  const commit = { ...options, indexMetadata: userMetadata };
  const files = commitCheckpoint(dir, plan, commit, (target, names) =>
    saveFile(
      target,
      names.map((name) => [name, byName.get(name)!] as const),
      shardMetadata,
      fileOptions,
    ),
  );
  return { plan, files };
}

export interface CommitOptions extends AtomicWriteOptions, FormatIndexOptions {
  /** The shards' file name pattern, for the index's name and stale files (default "model{suffix}.safetensors"). */
  filenamePattern?: string;
  /** The index's file name (default: from the pattern, `model.safetensors.index.json`). */
  indexName?: string;
  /** Index metadata after `total_size` (which is computed). */
  indexMetadata?: readonly (readonly [string, JsonValue])[];
  /** Remove files of an earlier save that match the pattern and were not written now (default true). */
  removeStale?: boolean;
  /** Other files of the checkpoint (config.json, tokenizer files): staged and committed with the shards. */
  sideFiles?: readonly (readonly [string, Uint8Array])[];
}

/** The index's name for a shard file pattern, as huggingface_hub names it. */
export function indexNameOf(pattern = DEFAULT_FILENAME_PATTERN): string {
  return `${pattern.replace("{suffix}", "")}.index.json`;
}

/**
 * Write a planned checkpoint as one atomic change of the directory: each shard through `writeShard` (which writes
 * `target`, a staging path, atomically; `name` is the shard's final name), the index (when sharded), then one commit
 * switches the directory to the new files and removes files of an earlier save that match the pattern and were not
 * written now. Killed at any point, the directory reads as the old checkpoint or the new one (`save-commit.ts`).
 */
export function commitCheckpoint(
  dir: string,
  plan: ShardPlan,
  options: CommitOptions,
  writeShard: (target: string, tensors: readonly string[], name: string) => void,
): string[] {
  const commit = openCommit(dir, options);
  try {
    const written = plan.shards.map((shard) =>
      commit.save.stage(shard.file, (staged) => writeShard(staged, shard.tensors, shard.file)),
    );
    return finishCommit(dir, plan, options, commit, written);
  } finally {
    commit.save.abort();
  }
}

/** `commitCheckpoint` with shards written asynchronously, one after the other. */
export async function commitCheckpointAsync(
  dir: string,
  plan: ShardPlan,
  options: CommitOptions,
  writeShard: (target: string, tensors: readonly string[], name: string) => Promise<void>,
): Promise<string[]> {
  const commit = openCommit(dir, options);
  try {
    const written: string[] = [];
    for (const shard of plan.shards) {
      written.push(await commit.save.stageAsync(shard.file, (staged) => writeShard(staged, shard.tensors, shard.file)));
    }
    return finishCommit(dir, plan, options, commit, written);
  } finally {
    commit.save.abort();
  }
}

interface OpenCommit {
  save: StagedSave;
  pattern: string;
  indexName: string;
}

/** Create the directory and begin its staged save (save-commit.ts). */
function openCommit(dir: string, options: CommitOptions): OpenCommit {
  for (const [key] of options.indexMetadata ?? []) {
    if (key === "total_size") throw new SafetensorError("InvalidMetadata", "`total_size` is computed, not given");
  }
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (error) {
    // Node's recursive mkdir says ENOENT when its last step failed otherwise (EROFS on a read-only mount, measured
    // with Node 20): once more without recursion gives the real cause.
    let cause: unknown = error;
    if ((error as NodeJS.ErrnoException).code === "ENOENT" && fs.existsSync(path.dirname(dir))) {
      try {
        fs.mkdirSync(dir);
        cause = null;
      } catch (again) {
        cause = again;
      }
    }
    if (cause !== null) throw writeError(cause, `cannot create ${dir}`);
  }
  const pattern = options.filenamePattern ?? DEFAULT_FILENAME_PATTERN;
  const indexName = options.indexName ?? indexNameOf(pattern);
  // Every file is staged, then one commit record switches the directory from the old set to the new (save-commit.ts).
  return { save: beginStagedSave(dir, indexName, options), pattern, indexName };
}

/** Stage the index (when sharded), then commit: the directory switches to the new files at once. */
function finishCommit(
  dir: string,
  plan: ShardPlan,
  options: CommitOptions,
  { save, pattern, indexName }: OpenCommit,
  written: string[],
): string[] {
  for (const [name, bytes] of options.sideFiles ?? []) {
    written.push(save.stage(name, (staged) => writeFileAtomic(staged, (fd) => writeAllAt(fd, bytes, 0), options)));
  }
  if (plan.isSharded) {
    const metadata = new Map<string, JsonValue>([["total_size", plan.totalSize], ...(options.indexMetadata ?? [])]);
    const text = new TextEncoder().encode(formatIndex(metadata, plan.weightMap, options));
    written.push(save.stage(indexName, (staged) => writeFileAtomic(staged, (fd) => writeAllAt(fd, text, 0), options)));
  }
  const stale = (options.removeStale ?? true) ? staleFiles(dir, pattern, plan, indexName) : [];
  save.commit(stale.map((file) => path.basename(file)));
  return written;
}

/**
 * Files in `dir` that a save of `plan` would remove: huggingface_hub's pattern (prefix, optional `-0000i-of-0000N`,
 * suffix, optional `.index.json`), regular files, not written by the plan.
 */
export function staleFiles(dir: string, pattern: string, plan: ShardPlan, indexName = indexNameOf(pattern)): string[] {
  const keep = new Set(plan.shards.map((shard) => shard.file));
  if (plan.isSharded) keep.add(indexName);
  const [prefix, suffix] = pattern.split("{suffix}") as [string, string];
  const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const matcher = new RegExp(`^${literal(prefix)}(-\\d{5}-of-\\d{5})?${literal(suffix)}(\\.index\\.json)?$`);
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw ioError(error, `cannot list ${dir}`);
  }
  return entries
    .filter((entry) => entry.isFile() && !keep.has(entry.name) && matcher.test(entry.name))
    .map((entry) => path.join(dir, entry.name));
}

const bufferIds = new WeakMap<ArrayBufferLike, number>();
let nextBufferId = 0;

/**
 * Views of exactly the same bytes are one storage (tied weights); anything else is its own, except that every empty
 * view of an empty buffer is one storage, as torch gives every freshly made empty tensor the null data pointer.
 */
function storageKey(view: ArrayBufferView): string {
  if (view.buffer.byteLength === 0) return "null";
  let id = bufferIds.get(view.buffer);
  if (id === undefined) {
    id = nextBufferId++;
    bufferIds.set(view.buffer, id);
  }
  return `${id}:${view.byteOffset}:${view.byteLength}`;
}
