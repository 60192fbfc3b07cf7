/**
 * Writing safetensors files from tensors of other files without decoding them: the streaming writer lays the file
 * out, then each tensor's bytes are copied with `copy_file_range` where the OS has it (or through one 8 MiB buffer),
 * or cast in chunks of 1 Mi elements. Memory stays bounded by those buffers whatever the tensors' sizes. Node-only.
 */
import * as fs from "node:fs";
import type { Dtype } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import type { MetadataInput } from "../format/serialize.js";
import { createWriter, type WriterOptions } from "../io/stream-writer.js";
import { type CastTarget, castElementBytes, castElements } from "./cast.js";
import type { SourceTensor } from "./checkpoint.js";

export interface OutputTensor {
  readonly name: string;
  readonly source: SourceTensor;
  /** The stored dtype: the source's (copied as is) or a cast target. */
  readonly dtype: Dtype;
}

/** Told how many bytes of output were just written. */
export type ProgressSink = (bytes: number) => void;

/** Copies are issued in pieces of this size so that progress moves on large tensors. */
const COPY_PIECE_BYTES = 256 << 20;
/** Elements per cast chunk: 4 MiB of float32 scratch. */
const CAST_CHUNK_ELEMENTS = 1 << 20;

/** Bytes a tensor takes once stored as `dtype` (same element count). */
export function storedBytes(source: SourceTensor, dtype: Dtype): number {
  if (dtype === source.dtype) return source.byteLength;
  return (source.byteLength / castElementBytes(source.dtype)) * castElementBytes(dtype);
}

/** Write `tensors` (copied or cast from their sources) and `metadata` to `target` atomically; returns its size. */
export function writeFileFrom(
  target: string,
  tensors: readonly OutputTensor[],
  metadata: MetadataInput,
  options: WriterOptions = {},
  progress: ProgressSink = () => {},
): number {
  const byName = new Map(tensors.map((tensor) => [tensor.name, tensor]));
  if (byName.size !== tensors.length) {
    const seen = new Set<string>();
    const dup = tensors.find((t) => seen.size === seen.add(t.name).size)!;
    throw new SafetensorError("DuplicateKey", `two output tensors are named ${JSON.stringify(dup.name)}`, {
      tensor: dup.name,
    });
  }
  const writer = createWriter(
    target,
    tensors.map((tensor) => [tensor.name, { dtype: tensor.dtype, shape: tensor.source.shape }] as const),
    metadata,
    options,
  );
  let scratch: CastScratch | null = null;
  try {
    progress(writer.layout.header.length);
    for (const slot of writer.layout.tensors) {
      const { source, dtype } = byName.get(slot.name)!;
      if (dtype === source.dtype) {
        for (let done = 0; done < source.byteLength; ) {
          const piece = Math.min(COPY_PIECE_BYTES, source.byteLength - done);
          writer.copyFrom(slot.name, source.fd, source.offset + done, piece);
          done += piece;
          progress(piece);
        }
        continue;
      }
      const inBytes = castElementBytes(source.dtype);
      const count = source.byteLength / inBytes;
      for (let first = 0; first < count; first += CAST_CHUNK_ELEMENTS) {
        const n = Math.min(CAST_CHUNK_ELEMENTS, count - first);
        scratch ??= new CastScratch();
        const raw = scratch.read(source.fd, source.offset + first * inBytes, n * inBytes);
        const cast = castElements(source.dtype, dtype as CastTarget, raw, n, scratch.floats, scratch.output);
        writer.write(slot.name, cast);
        progress(cast.byteLength);
      }
    }
    writer.commit();
    return writer.layout.totalLength;
  } finally {
    writer.abort();
  }
}

/** Reused buffers of the cast loop. */
class CastScratch {
  readonly floats = new Float32Array(CAST_CHUNK_ELEMENTS);
  readonly output = new Uint8Array(CAST_CHUNK_ELEMENTS * 2);
  readonly input = new Uint8Array(CAST_CHUNK_ELEMENTS * 8);

  read(fd: number, position: number, length: number): Uint8Array {
    const bytes = this.input.subarray(0, length);
    for (let done = 0; done < length; ) {
      const got = fs.readSync(fd, bytes, done, length - done, position + done);
      if (got === 0) throw new SafetensorError("IoError", `unexpected end of input at byte ${position + done}`);
      done += got;
    }
    return bytes;
  }
}
