/**
 * Models as a merge reads them (Node): a local directory (an index and its shards, or one `.safetensors` file), an
 * index or a single file, or the same at `hf://`, `http(s)://` or `s3://`. Only headers are read at open; tensors are
 * read by byte range as the merge needs them, so a remote merge fetches only the bytes it uses. Small files beside the
 * weights (config.json, tokenizer files) are read whole.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { quoteName, SafetensorError } from "../format/errors.js";
import type { ByteSourceOpener } from "../io/async-source.js";
import type { AsyncSafetensorsFile } from "../read/async-file.js";
import { toSource } from "../read/async-file.js";
import { type NodeOpenOptions, openAsync, withEnvironment } from "../read/node-async.js";
import { resolveS3 } from "../remote/s3.js";
import { checkShards, INDEX_FILE_NAME, parseIndex } from "../shards/index.js";
import { type CatalogTensor, countLayers, type ModelCatalog } from "./plan.js";

/** Largest config.json / index / tokenizer file read (64 MiB). */
export const DEFAULT_MAX_SIDE_FILE_BYTES = 64 << 20;

export interface ModelSource {
  readonly location: string;
  readonly catalog: ModelCatalog;
  /** The model's config.json, parsed (null when it has none). */
  readonly config: Record<string, unknown> | null;
  /**
   * Where tensor `name`'s stored data starts in a local file: a read descriptor (open until `close()`; any thread of
   * the process may read it) and the byte position. null for remote models.
   */
  locate(name: string): { fd: number; position: number } | null;
  /** Bytes [byteOffset, byteOffset + byteLength) of tensor `name`'s stored data. */
  read(name: string, byteOffset: number, byteLength: number, signal?: AbortSignal): Promise<Uint8Array>;
  /** A file beside the weights (`config.json`, `tokenizer.json`...), or null when there is none. */
  readSideFile(name: string): Promise<Uint8Array | null>;
  close(): Promise<void>;
}

const URL_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

function isRemote(location: string): boolean {
  return URL_SCHEME.test(location);
}

/** A remote location's bytes as an opener (hf:// and s3:// resolved, settings from the environment). */
function remoteOpener(location: string, options: NodeOpenOptions): ByteSourceOpener {
  const resolved = withEnvironment(options);
  if (/^s3:\/\//i.test(location)) {
    const { url, http } = resolveS3(location, resolved);
    return toSource(url, http) as ByteSourceOpener;
  }
  return toSource(location, resolved) as ByteSourceOpener;
}

/** A remote file's bytes, or null when the server says it does not exist (404). */
async function readRemote(location: string, options: NodeOpenOptions, maxBytes: number): Promise<Uint8Array | null> {
  try {
    const { source, head } = await remoteOpener(location, options).openWithHead(maxBytes + 1, options);
    await source.close();
    if (head.length > maxBytes) throw new SafetensorError("TooLarge", `${location} is over ${maxBytes} bytes`);
    return head;
  } catch (error) {
    if (error instanceof SafetensorError && error.code === "HttpError" && /HTTP 404\b/.test(error.message)) return null;
    throw error;
  }
}

function readLocal(file: string, maxBytes: number): Uint8Array | null {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch {
    return null;
  }
  if (!stat.isFile()) return null;
  if (stat.size > maxBytes) throw new SafetensorError("TooLarge", `${file} is over ${maxBytes} bytes`);
  return fs.readFileSync(file);
}

function joinLocation(dir: string, name: string, remote: boolean): string {
  return remote ? `${dir.replace(/\/+$/, "")}/${name}` : path.join(dir, name);
}

/** The path or URL of file `name` in the (local or remote) directory `dir`. */
export function fileIn(dir: string, name: string): string {
  return joinLocation(dir, name, isRemote(dir));
}

/** A small file in a local or remote directory, or null when it has none. */
export function readSideFileAt(dir: string, name: string, options: NodeOpenOptions = {}): Promise<Uint8Array | null> {
  const file = fileIn(dir, name);
  return isRemote(dir)
    ? readRemote(file, options, DEFAULT_MAX_SIDE_FILE_BYTES)
    : Promise.resolve(readLocal(file, DEFAULT_MAX_SIDE_FILE_BYTES));
}

/** Where a model's weights are: its directory, and the index or single file in it. */
async function locate(
  location: string,
  read: (file: string) => Promise<Uint8Array | null>,
  remote: boolean,
): Promise<{ dir: string; index: string | null; single: string | null }> {
  if (/\.index\.json$/.test(location)) {
    return { dir: remote ? location.replace(/\/[^/]*$/, "") : path.dirname(location), index: location, single: null };
  }
  if (/\.safetensors$/.test(location)) {
    return { dir: remote ? location.replace(/\/[^/]*$/, "") : path.dirname(location), index: null, single: location };
  }
  if (!remote) {
    let entries: string[];
    try {
      entries = fs.readdirSync(location);
    } catch (error) {
      throw new SafetensorError("IoError", `cannot open model ${location}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    if (entries.includes(INDEX_FILE_NAME))
      return { dir: location, index: path.join(location, INDEX_FILE_NAME), single: null };
    const indexes = entries.filter((e) => e.endsWith(".safetensors.index.json"));
    if (indexes.length === 1) return { dir: location, index: path.join(location, indexes[0]!), single: null };
    const files = entries.filter((e) => e.endsWith(".safetensors"));
    if (files.includes("model.safetensors"))
      return { dir: location, index: null, single: path.join(location, "model.safetensors") };
    if (files.length === 1) return { dir: location, index: null, single: path.join(location, files[0]!) };
    throw new SafetensorError("InvalidIndex", `${location} has no ${INDEX_FILE_NAME} and no single .safetensors file`);
  }
  const indexLocation = joinLocation(location, INDEX_FILE_NAME, true);
  if ((await read(indexLocation)) !== null) return { dir: location, index: indexLocation, single: null };
  return { dir: location, index: null, single: joinLocation(location, "model.safetensors", true) };
}

/** Open a model for merging: its headers, its config.json, and ranged reads of its tensors. */
export async function openModel(location: string, options: NodeOpenOptions = {}): Promise<ModelSource> {
  const remote = isRemote(location);
  const max = DEFAULT_MAX_SIDE_FILE_BYTES;
  const read = (file: string) => (remote ? readRemote(file, options, max) : Promise.resolve(readLocal(file, max)));
  const where = await locate(location, read, remote);
  const files = new Map<string, AsyncSafetensorsFile>();
  // Local shards' read descriptors for worker threads (node-pool.ts), opened beside the files' own.
  const fds = new Map<string, number>();
  const closeFds = () => {
    for (const fd of fds.values()) fs.closeSync(fd);
    fds.clear();
  };
  try {
    const shardOf = new Map<string, string>();
    if (where.index !== null) {
      const text = await read(where.index);
      if (text === null) throw new SafetensorError("IoError", `cannot read ${where.index}`);
      const index = parseIndex(new TextDecoder().decode(text));
      for (const name of index.files) {
        if (name.includes("..") || name.startsWith("/"))
          throw new SafetensorError("UnsafePath", `shard ${quoteName(name)}`);
        files.set(name, await openAsync(joinLocation(where.dir, name, remote), options));
        if (!remote) fds.set(name, fs.openSync(joinLocation(where.dir, name, remote), "r"));
      }
      const checked = checkShards(index, new Map([...files].map(([name, file]) => [name, file.header])));
      for (const [name, loc] of checked.locations) shardOf.set(name, loc.file);
    } else {
      const name = remote ? where.single!.replace(/^.*\//, "") : path.basename(where.single!);
      const file = await openAsync(where.single!, options);
      files.set(name, file);
      if (!remote) fds.set(name, fs.openSync(where.single!, "r"));
      for (const tensor of file.header.tensors.keys()) shardOf.set(tensor, name);
    }
    // Tensors in the shards' order, each shard's in file order.
    const tensors = new Map<string, CatalogTensor>();
    for (const file of files.values()) {
      for (const [name, info] of file.header.tensors) {
        if (shardOf.has(name)) tensors.set(name, { dtype: info.dtype, shape: info.shape });
      }
    }
    const configBytes = await read(joinLocation(where.dir, "config.json", remote));
    let config: Record<string, unknown> | null = null;
    if (configBytes !== null) {
      try {
        config = JSON.parse(new TextDecoder().decode(configBytes)) as Record<string, unknown>;
      } catch (error) {
        throw new SafetensorError(
          "MergeMismatch",
          `${location}: config.json is not JSON (${(error as Error).message})`,
        );
      }
    }
    const configured = config?.num_hidden_layers;
    const numLayers = typeof configured === "number" ? configured : countLayers(tensors.keys());
    return {
      location,
      catalog: { tensors, numLayers },
      config,
      locate(name) {
        const shard = shardOf.get(name) ?? "";
        const fd = fds.get(shard);
        const file = files.get(shard);
        if (fd === undefined || file === undefined) return null;
        const info = file.header.tensors.get(name)!;
        return { fd, position: file.header.dataStart + info.dataOffsets[0] };
      },
      async read(name, byteOffset, byteLength, signal) {
        const file = files.get(shardOf.get(name) ?? "");
        if (!file) throw new SafetensorError("TensorNotFound", `${location} has no tensor ${quoteName(name)}`);
        const info = file.header.tensors.get(name)!;
        const start = file.header.dataStart + info.dataOffsets[0] + byteOffset;
        const [bytes] = await file.readRanges([{ start, end: start + byteLength }], { signal });
        return bytes!;
      },
      readSideFile: (name) => read(joinLocation(where.dir, name, remote)),
      async close() {
        closeFds();
        await Promise.all([...files.values()].map((f) => f.close()));
      },
    };
  } catch (error) {
    closeFds();
    await Promise.all([...files.values()].map((f) => f.close().catch(() => {})));
    throw error;
  }
}
