/**
 * Node adapter of the pickle converter (src/pickle is pure): files are read with positional reads, deflated zip
 * records are inflated with node:zlib, and tensors stream into the output without holding the checkpoint in memory.
 */
import * as zlib from "node:zlib";
import { SafetensorError } from "./format/errors.js";
import { planSerialization } from "./format/serialize.js";
import { ioError, PreadSource } from "./io/node-file.js";
import { writeAllAt, writeFileAtomic } from "./io/node-write.js";
import { type ContainerOptions, openContainer } from "./pickle/container.js";
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
    // The header is laid out from dtypes and shapes; the data are zero views of one lazily zeroed buffer, never read.
    const largest = Math.max(0, ...plan.tensors.map((t) => t.byteLength));
    const zeros = new Uint8Array(largest);
    const layout = planSerialization(
      plan.tensors.map(
        (t) => [t.name, { dtype: t.dtype, shape: t.shape, data: zeros.subarray(0, t.byteLength) }] as const,
      ),
      plan.metadata,
    );
    const byName = new Map(plan.tensors.map((t) => [t.name, t]));
    const scratch = new Uint8Array(Math.min(CHUNK_BYTES, Math.max(largest, 1)));
    writeFileAtomic(output, (fd) => {
      writeAllAt(fd, layout.header, 0);
      const dataStart = layout.header.length;
      for (const planned of layout.tensors) {
        const p = byName.get(planned.name)!;
        const t = p.tensor;
        const at = dataStart + planned.begin;
        if (p.byteLength === 0) continue;
        const where = t.source.kind === "inline" ? null : container.storage(t.source.key);
        const base = t.source.kind === "inline" ? 0 : t.source.byteOffset;
        if (isContiguous(t)) {
          const start = base + t.offset * t.elementSize;
          for (let done = 0; done < p.byteLength; ) {
            const n = Math.min(scratch.length, p.byteLength - done);
            let chunk: Uint8Array;
            if (t.source.kind === "inline") chunk = t.source.bytes.subarray(start + done, start + done + n);
            else if (where!.kind === "memory") chunk = where!.bytes.subarray(start + done, start + done + n);
            else chunk = source.readInto(where!.offset + start + done, scratch.subarray(0, n));
            if (t.swap) {
              // Never swap in place in memory the container owns (an inflated record, an inline array).
              if (chunk.buffer !== scratch.buffer) {
                scratch.set(chunk);
                chunk = scratch.subarray(0, n);
              }
              swapBytes(chunk, t.elementSize);
            }
            writeAllAt(fd, chunk, at + done);
            done += n;
          }
          continue;
        }
        // Strided views: read the span the tensor touches (strides are never negative), gather it row-major.
        const first = t.offset;
        let last = t.offset;
        for (let d = 0; d < t.shape.length; d++) last += (t.shape[d]! - 1) * t.stride[d]!;
        const spanBytes = (last - first + 1) * t.elementSize;
        if (spanBytes > maxGather || p.byteLength > maxGather) {
          throw new SafetensorError(
            "TooLarge",
            `tensor ${JSON.stringify(p.name)} is a strided view over ${spanBytes} bytes, over maxGatherBytes (${maxGather})`,
            { tensor: p.name },
          );
        }
        const spanAt = base + first * t.elementSize;
        const span =
          t.source.kind === "inline"
            ? t.source.bytes.subarray(spanAt, spanAt + spanBytes)
            : where!.kind === "memory"
              ? where!.bytes.subarray(spanAt, spanAt + spanBytes)
              : source.read(where!.offset + spanAt, spanBytes);
        const out = new Uint8Array(p.byteLength);
        gather(t, span, first, out);
        if (t.swap) swapBytes(out, t.elementSize);
        writeAllAt(fd, out, at);
      }
    });
    return {
      ...plan,
      tensors: plan.tensors.map((t) => ({
        name: t.name,
        dtype: t.dtype,
        shape: t.shape,
        sourceDtype: t.tensor.sourceDtype,
        contiguous: isContiguous(t.tensor),
      })),
      bytesWritten: layout.totalLength,
    };
  } catch (error) {
    if (error instanceof SafetensorError) throw error;
    throw ioError(error, `cannot convert ${input}`);
  } finally {
    source.close();
  }
}
