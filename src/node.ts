/**
 * Node.js entry point: everything from the core plus local-file reading and atomic writing.
 */
import { type GetTensorOptions, SafetensorsFile } from "./file.js";
import { SafetensorError } from "./format/errors.js";
import type { HeaderOptions } from "./format/header.js";
import { type MetadataInput, type NamedTensors, planSerialization, type SerializeOptions } from "./format/serialize.js";
import { loadNative, nativeStatus } from "./io/native.js";
import { PreadSource } from "./io/node-file.js";
import { MmapSource, ownedAllocator } from "./io/node-mmap.js";
import { type AtomicWriteOptions, writeAllAt, writeFileAtomic } from "./io/node-write.js";
import type { SyncByteSource } from "./io/source.js";
import type { Tensor } from "./tensor.js";

export * from "./index.js";

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

export interface LoadFileOptions extends OpenFileOptions {}

/** Read every tensor of a file, in file order. */
export function loadFile(path: string, options: LoadFileOptions = {}): Map<string, Tensor> {
  const file = openFile(path, options);
  try {
    const tensors = new Map<string, Tensor>();
    const read: GetTensorOptions = { memory: "owned" };
    for (const name of file.offsetKeys()) tensors.set(name, file.getTensor(name, read));
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
  writeFileAtomic(
    path,
    (fd) => {
      writeAllAt(fd, plan.header, 0);
      let position = plan.header.length;
      for (const tensor of plan.tensors) {
        writeAllAt(fd, tensor.data, position);
        position += tensor.data.byteLength;
      }
    },
    options,
  );
}
