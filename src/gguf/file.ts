/**
 * Opening a GGUF file: the header read from the file's first bytes (one read when it fits, more only when it does
 * not: the reader, not the source, chooses), then tensors read on demand, raw or decoded to float32. Sync over any
 * `SyncByteSource` (memory, pread, mmap), async over any `ByteSource` (HTTP by Range, Blob, FileHandle). Pure.
 */
import { decodeBf16, decodeF16 } from "../codecs/half.js";
import { SafetensorError } from "../format/errors.js";
import { type ByteSource, type ByteSourceOpener, isOpener, type ReadOptions } from "../io/async-source.js";
import type { SyncByteSource } from "../io/source.js";
import { dequantize, isQuantType } from "./quants.js";
import { type GgufHeader, type GgufLimits, GgufNeedBytes, type GgufTensorInfo, parseGgufHeader } from "./reader.js";

export interface GgufOpenOptions extends GgufLimits {
  /** Bytes of the first read (default 1 MiB remote, 256 KiB local); a larger header costs one more read. */
  firstReadBytes?: number;
}

export const DEFAULT_GGUF_REMOTE_FIRST_READ = 1 << 20;
export const DEFAULT_GGUF_LOCAL_FIRST_READ = 256 << 10;

/** Decode a tensor's bytes to float32 (F32, F16, BF16 and the Q4/Q5/Q8 block types). */
export function decodeTensor(info: GgufTensorInfo, bytes: Uint8Array): Float32Array {
  const out = new Float32Array(info.elements);
  const type = info.type.name;
  if (type === "F32") {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  } else if (type === "F16") decodeF16(bytes, out.length, out);
  else if (type === "BF16") decodeBf16(bytes, out.length, out);
  else if (isQuantType(type)) dequantize(type, bytes, out);
  else throw new SafetensorError("UnsupportedGgufType", `tensor ${info.name} is ${type}, which is not decoded here`);
  return out;
}

function tensorOf(header: GgufHeader, name: string): GgufTensorInfo {
  const t = header.tensors.find((x) => x.name === name);
  if (t === undefined) throw new SafetensorError("TensorNotFound", `no tensor named ${JSON.stringify(name)}`);
  return t;
}

/** A GGUF over a synchronous source. */
export class GgufFile {
  private constructor(
    readonly source: SyncByteSource,
    readonly header: GgufHeader,
  ) {}

  static open(source: SyncByteSource, options: GgufOpenOptions = {}): GgufFile {
    let length = Math.min(source.byteLength, options.firstReadBytes ?? DEFAULT_GGUF_LOCAL_FIRST_READ);
    for (;;) {
      const head = source.read(0, length);
      try {
        return new GgufFile(source, parseGgufHeader(head, source.byteLength, options));
      } catch (error) {
        if (!(error instanceof GgufNeedBytes)) throw error;
        length = Math.min(source.byteLength, Math.max(error.needed, length * 2));
      }
    }
  }

  tensorInfo(name: string): GgufTensorInfo {
    return tensorOf(this.header, name);
  }

  /** A tensor's stored bytes (a view for zero-copy sources). */
  tensorBytes(name: string): Uint8Array {
    const t = this.tensorInfo(name);
    return this.source.read(t.fileOffset, t.byteLength);
  }

  /** A tensor's values as float32 (dequantized). */
  tensorF32(name: string): Float32Array {
    return decodeTensor(this.tensorInfo(name), this.tensorBytes(name));
  }

  close(): void {
    this.source.close();
  }
}

/** A GGUF over an asynchronous source (HTTP by Range, Blob, FileHandle). */
export class AsyncGgufFile {
  private constructor(
    readonly source: ByteSource,
    readonly header: GgufHeader,
    /** How many reads the header took (1 when it fitted in the first). */
    readonly headerReads: number,
  ) {}

  static async open(
    input: ByteSource | ByteSourceOpener,
    options: GgufOpenOptions & ReadOptions = {},
  ): Promise<AsyncGgufFile> {
    const first =
      options.firstReadBytes ?? (input.remote ? DEFAULT_GGUF_REMOTE_FIRST_READ : DEFAULT_GGUF_LOCAL_FIRST_READ);
    let source: ByteSource | null = null;
    try {
      let head: Uint8Array;
      if (isOpener(input)) ({ source, head } = await input.openWithHead(first, options));
      else {
        source = input;
        head = await source.read(0, Math.min(first, source.byteLength), options);
      }
      let reads = 1;
      for (;;) {
        try {
          return new AsyncGgufFile(source, parseGgufHeader(head, source.byteLength, options), reads);
        } catch (error) {
          if (!(error instanceof GgufNeedBytes)) throw error;
          // Read the rest at once: at least what the parser asked for, at least double what we have.
          const want = Math.min(source.byteLength, Math.max(error.needed, head.length * 2));
          const rest = await source.read(head.length, want - head.length, options);
          const joined = new Uint8Array(want);
          joined.set(head);
          joined.set(rest, head.length);
          head = joined;
          reads++;
        }
      }
    } catch (error) {
      await source?.close().catch(() => {});
      throw error;
    }
  }

  tensorInfo(name: string): GgufTensorInfo {
    return tensorOf(this.header, name);
  }

  async tensorBytes(name: string, options: ReadOptions = {}): Promise<Uint8Array> {
    const t = this.tensorInfo(name);
    return this.source.read(t.fileOffset, t.byteLength, options);
  }

  async tensorF32(name: string, options: ReadOptions = {}): Promise<Float32Array> {
    return decodeTensor(this.tensorInfo(name), await this.tensorBytes(name, options));
  }

  close(): Promise<void> {
    return this.source.close();
  }
}
