/**
 * Node adapter of the pickle converter (src/pickle is pure): files are read with positional reads, deflated zip
 * records are inflated with node:zlib, and tensors stream into the output without holding the checkpoint in memory.
 */
import * as zlib from "node:zlib";
import { SafetensorError } from "./format/errors.js";
import { ioError, PreadSource } from "./io/node-file.js";
import { createWriter, type SafetensorsWriter } from "./io/stream-writer.js";
import { type Container, type ContainerOptions, openContainer } from "./pickle/container.js";
import { type ConversionPlan, type ConvertOptions, type PlannedTensor, planConversion } from "./pickle/plan.js";
import { type ScanReport, scanSource } from "./pickle/scan.js";
import { contiguousStrides } from "./pickle/torch.js";

/** Chunk of reads and writes: large enough for sequential disk speed, small enough for a flat RSS. */
const CHUNK_BYTES = 8 << 20;

export interface NodeConvertOptions extends ConvertOptions {
  /** Largest non-contiguous tensor span gathered in memory, in bytes. Default 1 GiB. */
  maxGatherBytes?: number;
}

function inflateRaw(compressed: Uint8Array, size: number): Uint8Array {
  try {
    return zlib.inflateRawSync(compressed, { maxOutputLength: Math.max(size, 1) });
  } catch (error) {
    throw new SafetensorError(
      "InvalidCheckpoint",
      `zip: a deflated record does not inflate: ${(error as Error).message}`,
    );
  }
}

function withNodeOptions<T extends ContainerOptions>(options: T): T {
  return { inflateRaw, ...options };
}

/** Scan a checkpoint file: every global its pickles name, where, and a verdict. Nothing in it is executed. */
export function scanPickleFile(path: string, options: ContainerOptions = {}): ScanReport {
  const source = PreadSource.open(path);
  try {
    return scanSource(source, withNodeOptions(options));
  } finally {
    source.close();
  }
}

export interface ConversionReport extends Omit<ConversionPlan, "tensors"> {
  readonly tensors: readonly {
    name: string;
    dtype: string;
    shape: readonly number[];
    sourceDtype: string;
    contiguous: boolean;
  }[];
  readonly bytesWritten: number;
}

/** Plan a conversion without writing anything (what `convert` would do, or why it refuses). */
export function planPickleFile(path: string, options: ConvertOptions = {}): ConversionPlan {
  const source = PreadSource.open(path);
  try {
    return planConversion(openContainer(source, withNodeOptions(options)), withNodeOptions(options));
  } finally {
    source.close();
  }
}

function isContiguous(t: PlannedTensor["tensor"]): boolean {
  const c = contiguousStrides(t.shape);
  return t.shape.every((d, i) => d <= 1 || t.stride[i] === c[i]);
}

function swapBytes(bytes: Uint8Array, size: number): void {
  for (let i = 0; i + size <= bytes.length; i += size) {
    for (let a = i, b = i + size - 1; a < b; a++, b--) {
      const x = bytes[a]!;
      bytes[a] = bytes[b]!;
      bytes[b] = x;
    }
  }
}

/** Gather a strided tensor from `span` (its storage bytes starting at element `spanStart`) into contiguous bytes. */
function gather(t: PlannedTensor["tensor"], span: Uint8Array, spanStart: number, out: Uint8Array): void {
  const n = t.shape.length;
  const es = t.elementSize;
  // Trailing dims that are already row-major form one block copied at once.
  let k = n;
  let block = 1;
  while (k > 0 && (t.shape[k - 1]! <= 1 || t.stride[k - 1] === block)) {
    block *= t.shape[k - 1]!;
    k--;
  }
  const blockBytes = block * es;
  const index = new Array<number>(k).fill(0);
  let written = 0;
  for (;;) {
    let element = t.offset - spanStart;
    for (let d = 0; d < k; d++) element += index[d]! * t.stride[d]!;
    out.set(span.subarray(element * es, element * es + blockBytes), written);
    written += blockBytes;
    let d = k - 1;
    while (d >= 0 && ++index[d]! >= t.shape[d]!) index[d--] = 0;
    if (d < 0) break;
  }
}

/** Stream one tensor into the writer: contiguous bytes straight from the file, strided views gathered first. */
function writeTensor(
  writer: SafetensorsWriter,
  p: PlannedTensor,
  container: Container,
  source: PreadSource,
  scratch: Uint8Array,
  maxGather: number,
): void {
  const t = p.tensor;
  if (p.byteLength === 0) return;
  const where = t.source.kind === "inline" ? null : container.storage(t.source.key);
  const fileOffset = where?.kind === "range" ? where.offset : 0;
  const base = t.source.kind === "inline" ? 0 : t.source.byteOffset;
  const window = (at: number, length: number): Uint8Array | null =>
    t.source.kind === "inline"
      ? t.source.bytes.subarray(at, at + length)
      : where!.kind === "memory"
        ? where!.bytes.subarray(at, at + length)
        : null;
  if (isContiguous(t)) {
    const start = base + t.offset * t.elementSize;
    if (!t.swap && where?.kind === "range") {
      // The common case: a kernel-side copy of the record's bytes (copy_file_range when available).
      writer.copyFrom(p.name, source.descriptor, where.offset + start, p.byteLength, 0);
      return;
    }
    for (let done = 0; done < p.byteLength; ) {
      const n = Math.min(scratch.length, p.byteLength - done);
      let chunk = window(start + done, n) ?? source.readInto(fileOffset + start + done, scratch.subarray(0, n));
      if (t.swap) {
        // Never swap in place in memory the container owns (an inflated record, an inline array).
        if (chunk.buffer !== scratch.buffer) {
          scratch.set(chunk);
          chunk = scratch.subarray(0, n);
        }
        swapBytes(chunk, t.elementSize);
      }
      writer.write(p.name, chunk, done);
      done += n;
    }
    return;
  }
  // Strided views: read the span the tensor touches (strides are never negative), gather it row-major.
  let last = t.offset;
  for (let d = 0; d < t.shape.length; d++) last += (t.shape[d]! - 1) * t.stride[d]!;
  const spanBytes = (last - t.offset + 1) * t.elementSize;
  if (spanBytes > maxGather || p.byteLength > maxGather) {
    throw new SafetensorError(
      "TooLarge",
      `tensor ${JSON.stringify(p.name)} is a strided view over ${spanBytes} bytes, over maxGatherBytes (${maxGather})`,
      { tensor: p.name },
    );
  }
  const spanAt = base + t.offset * t.elementSize;
  const span = window(spanAt, spanBytes) ?? source.read(fileOffset + spanAt, spanBytes);
  const out = new Uint8Array(p.byteLength);
  gather(t, span, t.offset, out);
  if (t.swap) swapBytes(out, t.elementSize);
  writer.write(p.name, out, 0);
}

/**
 * Convert a PyTorch checkpoint to a safetensors file. Refuses (UnsafePickle, writing nothing) when the file names a
 * dangerous global, or one not allowlisted unless `allowUnknown`. The output appears atomically, only when complete.
 */
export function convertPickleFile(input: string, output: string, options: NodeConvertOptions = {}): ConversionReport {
  const source = PreadSource.open(input);
  try {
    const nodeOptions = withNodeOptions(options);
    const container = openContainer(source, nodeOptions);
    const plan = planConversion(container, nodeOptions);
    const maxGather = options.maxGatherBytes ?? 1 << 30;
    const writer = createWriter(
      output,
      plan.tensors.map((t) => [t.name, { dtype: t.dtype, shape: t.shape }] as const),
      plan.metadata,
    );
    try {
      const largest = Math.max(0, ...plan.tensors.map((t) => t.byteLength));
      const scratch = new Uint8Array(Math.min(CHUNK_BYTES, Math.max(largest, 1)));
      // In file order, so the output is written front to back.
      const order = new Map(writer.layout.tensors.map((t, i) => [t.name, i]));
      for (const p of [...plan.tensors].sort((a, b) => order.get(a.name)! - order.get(b.name)!)) {
        writeTensor(writer, p, container, source, scratch, maxGather);
      }
      writer.commit();
    } finally {
      writer.abort();
    }
    return {
      ...plan,
      tensors: plan.tensors.map((t) => ({
        name: t.name,
        dtype: t.dtype,
        shape: t.shape,
        sourceDtype: t.tensor.sourceDtype,
        contiguous: isContiguous(t.tensor),
      })),
      bytesWritten: writer.layout.totalLength,
    };
  } catch (error) {
    if (error instanceof SafetensorError) throw error;
    throw ioError(error, `cannot convert ${input}`);
  } finally {
    source.close();
  }
}
