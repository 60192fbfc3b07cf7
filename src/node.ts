/**
 * Node.js entry point: everything from the core plus local-file reading and atomic writing.
 */
import { SafetensorsFile } from "./file.js";
import { SafetensorError } from "./format/errors.js";
import type { HeaderOptions } from "./format/header.js";
import {
  type MetadataInput,
  type NamedTensors,
  planSerialization,
  type SerializeOptions,
  serialize,
} from "./format/serialize.js";
import { loadNative, nativeStatus } from "./io/native.js";
import { MAX_BUFFER_BYTES, PreadSource } from "./io/node-file.js";
import { MmapSource, ownedAllocator } from "./io/node-mmap.js";
import { type AtomicWriteOptions, writeBuffersAt, writeFileAtomic } from "./io/node-write.js";
import { MemorySource, type SyncByteSource } from "./io/source.js";
import { Tensor } from "./tensor.js";

// The Node entry is the whole core (an explicit list in index.ts) plus the file API below.
export * from "./index.js";
// `open` here also takes local paths (read through a FileHandle); it shadows the core's URL/Blob/bytes `open`.
export { FileHandleSource, loadFileAsync, type NodeOpenOptions, openAsync as open } from "./io/node-async.js";
export {
  type ChunkSource,
  createWriter,
  type RegionOptions,
  type SafetensorsWriter,
  type WriterOptions,
} from "./io/stream-writer.js";
export type { S3Options } from "./remote/s3.js";
export {
  isShardedTarget,
  type OpenShardedOptions,
  openSharded,
  type SavedShards,
  type SaveShardedOptions,
  ShardedFile,
  saveSharded,
} from "./shards/node.js";

// Load the optional native addon with the module (like a Python extension at import), not inside the first open.
loadNative();
primeHeaderReader();

export type Backend = "auto" | "mmap" | "pread";

export interface OpenFileOptions extends HeaderOptions {
  /**
   * "mmap" maps the file (zero-copy views, valid until `close()`; needs the native addon), "pread" reads each tensor
   * with positional reads into memory the caller owns, "auto" (default) uses mmap when the addon is available.
   */
  backend?: Backend;
}

/** The backend "auto" resolves to here: mmap when the native addon is loaded, else pread. */
export function defaultBackend(): "mmap" | "pread" {
  return loadNative() ? "mmap" : "pread";
}

function openSource(path: string, backend: Backend, populate = false): SyncByteSource {
  const resolved = backend === "auto" ? defaultBackend() : backend;
  if (resolved === "mmap") {
    if (!loadNative()) {
      throw new SafetensorError(
        "BackendUnavailable",
        `the mmap backend needs the native addon, which is not available (${nativeStatus().reason}); use backend "pread"`,
      );
    }
    return MmapSource.open(path, { populate });
  }
  if (resolved === "pread") return PreadSource.open(path, ownedAllocator);
  throw new SafetensorError("BackendUnavailable", `unknown backend ${JSON.stringify(backend)}`);
}

/** Open a file lazily: validates the header, reads tensors on demand. Close it (or use `using`) when done. */
export function openFile(path: string, options: OpenFileOptions = {}): SafetensorsFile {
  return SafetensorsFile.open(openSource(path, options.backend ?? "auto"), options);
}

export interface LoadFileOptions extends OpenFileOptions {
  /** pread backend: largest single read buffer (default and maximum 2^32, Node 20's largest Uint8Array). */
  maxBufferBytes?: number;
}

/**
 * Read every tensor of a file, in file order, reading the data region in one go: with "pread" (also what "auto"
 * picks here) the data region is read with one positional read per ≤ 4 GiB group of tensors into (hugepage-backed)
 * memory, and tensors are views of it; with "mmap" the file is mapped with MAP_POPULATE and tensors are views of the
 * mapping (kept alive by the tensors themselves, released by GC), sharing the page cache instead of copying it.
 */
export function loadFile(path: string, options: LoadFileOptions = {}): Map<string, Tensor> {
  // "auto" reads into (hugepage-backed) memory: measured on a 2.4 GiB checkpoint, one pread plus a touch of every page
  // took ~0.4 s, while mmap+MAP_POPULATE plus the same touch took ~1 s (page-table work dominates on 4 KiB pages).
  // An explicit "mmap" keeps the file in the shared page cache instead of a private copy.
  const backend = options.backend === undefined || options.backend === "auto" ? "pread" : options.backend;
  const source = openSource(path, backend, true);
  const file = SafetensorsFile.open(source, options);
  const tensors = new Map<string, Tensor>();
  if (source instanceof MmapSource) {
    // The mapping is not closed: the views keep it alive until they are garbage collected.
    for (const name of file.offsetKeys()) tensors.set(name, file.getTensor(name));
    source.releaseDescriptor();
    return tensors;
  }
  const maxBuffer = Math.min(options.maxBufferBytes ?? MAX_BUFFER_BYTES, MAX_BUFFER_BYTES);
  try {
    const infos = [...file.header.tensors.values()];
    for (let first = 0; first < infos.length; ) {
      // Group consecutive tensors into one read of at most maxBuffer bytes.
      const groupStart = infos[first]!.dataOffsets[0];
      let last = first;
      while (last + 1 < infos.length && infos[last + 1]!.dataOffsets[1] - groupStart <= maxBuffer) last++;
      const groupEnd = infos[last]!.dataOffsets[1];
      if (groupEnd - groupStart > maxBuffer) {
        const big = infos[first]!;
        throw new SafetensorError(
          "TooLarge",
          `tensor ${JSON.stringify(big.name)} is ${big.byteLength} bytes; one buffer holds at most ${maxBuffer} in this runtime: use openFile() and getSlice()`,
          { tensor: big.name },
        );
      }
      const bytes = file.readRange(file.header.dataStart + groupStart, groupEnd - groupStart);
      for (let i = first; i <= last; i++) {
        const info = infos[i]!;
        const begin = info.dataOffsets[0] - groupStart;
        tensors.set(info.name, new Tensor(info.dtype, info.shape, bytes.subarray(begin, begin + info.byteLength)));
      }
      first = last + 1;
    }
    return tensors;
  } finally {
    file.close();
  }
}

export interface SaveFileOptions extends SerializeOptions, AtomicWriteOptions {}

/**
 * Write tensors (and optional string metadata) to `path` atomically: a temporary file in the same directory replaces
 * the target only when complete; on any failure the target is untouched and no temporary file is left.
 */
export function saveFile(
  path: string,
  tensors: NamedTensors,
  metadata?: MetadataInput,
  options: SaveFileOptions = {},
): void {
  const plan = planSerialization(tensors, metadata, options);
  // One vectored write per 1024 tensors or 1 GiB: a checkpoint of many small tensors costs a few system calls.
  writeFileAtomic(path, (fd) => writeBuffersAt(fd, [plan.header, ...plan.tensors.map((t) => t.data)], 0), options);
}

/**
 * Runs the header reader over a small built-in file when the module loads, so that V8 compiles it (and its regular
 * expressions) then rather than inside the first `openFile`: lazy compilation and cold inline caches made a first
 * open several times slower than the next ones. Costs about a millisecond at import.
 */
function primeHeaderReader(): void {
  const tensors = new Map<string, Tensor>();
  for (let i = 0; i < 48; i++) {
    tensors.set(`model.layers.${i}.weight`, new Tensor(i % 2 ? "F16" : "BF16", [2, 2], new Uint8Array(8)));
  }
  const bytes = serialize(tensors, { format: "pt" });
  for (let round = 0; round < 2; round++) {
    const file = SafetensorsFile.open(new MemorySource(bytes));
    file.getTensor("model.layers.0.weight");
    file.close();
  }
}
