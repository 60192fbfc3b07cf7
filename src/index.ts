/**
 * safetensors-ts core: format, dtypes, tensors, codecs, slicing and in-memory reading and writing. No Node APIs:
 * this entry point runs in browsers. Node file IO lives in `safetensors-ts/node`.
 */
import { type Header, type HeaderOptions, parseHeaderFromBuffer } from "./format/header.js";
import { Tensor } from "./tensor.js";

export * from "./codecs/index.js";
export * from "./file.js";
export * from "./format/dtypes.js";
export * from "./format/errors.js";
export * from "./format/header.js";
export * from "./format/serialize.js";
export * from "./io/source.js";
export * from "./slice/index.js";
export * from "./tensor.js";

export interface Deserialized {
  readonly header: Header;
  readonly metadata: ReadonlyMap<string, string> | null;
  /** Tensors in file-offset order; their `data` are views into the input (no copy). */
  readonly tensors: Map<string, Tensor>;
}

/** Parse a whole safetensors file held in memory. Tensor data are zero-copy views into `bytes`. */
export function deserialize(bytes: Uint8Array | ArrayBuffer, options: HeaderOptions = {}): Deserialized {
  // A plain Uint8Array over the same memory (a Node Buffer's subarrays would be Buffers).
  const buffer = ArrayBuffer.isView(bytes)
    ? new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    : new Uint8Array(bytes);
  const header = parseHeaderFromBuffer(buffer, options);
  const tensors = new Map<string, Tensor>();
  for (const info of header.tensors.values()) {
    const begin = header.dataStart + info.dataOffsets[0];
    tensors.set(info.name, new Tensor(info.dtype, info.shape, buffer.subarray(begin, begin + info.byteLength)));
  }
  return { header, metadata: header.metadata, tensors };
}
