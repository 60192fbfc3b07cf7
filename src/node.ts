/**
 * Node.js entry point: everything from the core plus local-file reading and atomic writing.
 */
import { type GetTensorOptions, SafetensorsFile } from "./file.js";
import type { HeaderOptions } from "./format/header.js";
import { planSerialization, type MetadataInput, type NamedTensors, type SerializeOptions } from "./format/serialize.js";
import { PreadSource } from "./io/node-file.js";
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

function openSource(path: string, options: OpenFileOptions): SyncByteSource {
  return PreadSource.open(path);
}

/** Open a file lazily: validates the header, reads tensors on demand. Close it (or use `using`) when done. */
export function openFile(path: string, options: OpenFileOptions = {}): SafetensorsFile {
  return SafetensorsFile.open(openSource(path, options), options);
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
