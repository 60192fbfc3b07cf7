/**
 * Node adapter of the pickle converter (src/pickle is pure): files are read with positional reads, deflated zip
 * records are inflated with node:zlib, and tensors stream into the output without holding the checkpoint in memory.
 */

import * as fs from "node:fs";
import * as zlib from "node:zlib";
import { dtypeInfo } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { ioError, PreadSource } from "../io/node-file.js";
import { type AtomicWriteOptions, writeAllAt, writeFileAtomic } from "../io/node-write.js";
import { createWriter, type SafetensorsWriter } from "../io/stream-writer.js";
import { SafetensorsFile } from "../read/file.js";
import { type Container, type ContainerOptions, openContainer } from "./container.js";
import { type ConversionPlan, type ConvertOptions, type PlannedTensor, planConversion } from "./plan.js";
import { type ScanReport, scanSource } from "./scan.js";
import { contiguousStrides } from "./torch.js";
import { planZip, stateDictPickle, type TorchTensorSpec, torchTypeOf, zipDirectory } from "./writer.js";

/** Chunk of reads and writes: large enough for sequential disk speed, small enough for a flat RSS. */
const CHUNK_BYTES = 8 << 20;

/** Options of `convertPickleFile`. */
export interface NodeConvertOptions extends ConvertOptions {
  /** Largest non-contiguous tensor span gathered in memory, in bytes. Default 1 GiB. */
  maxGatherBytes?: number;
}

/** Output is capped at the record's declared size (which maxInflateBytes bounds): a bomb stops there. */
function inflateRaw(compressed: Uint8Array, size: number, name: string): Uint8Array {
  try {
    return zlib.inflateRawSync(compressed, { maxOutputLength: Math.max(size, 1) });
  } catch (error) {
    throw new SafetensorError(
      "InvalidCheckpoint",
      `zip: deflated record ${name} does not inflate to its declared ${size} bytes: ${(error as Error).message}`,
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

/** What `convertPickleFile` wrote: the plan it followed and every tensor written. */
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

/** A checkpoint opened and planned (policy applied), its file still open for the write. */
export interface PlannedCheckpoint {
  readonly input: string;
  readonly source: PreadSource;
  readonly container: Container;
  readonly plan: ConversionPlan;
}

/** Open and plan a checkpoint: refuses (UnsafePickle, …) before anything is written. Close `source` when done. */
export function openPlanned(input: string, options: NodeConvertOptions = {}): PlannedCheckpoint {
  const source = PreadSource.open(input);
  try {
    const nodeOptions = withNodeOptions(options);
    const container = openContainer(source, nodeOptions);
    return { input, source, container, plan: planConversion(container, nodeOptions) };
  } catch (error) {
    source.close();
    if (error instanceof SafetensorError) throw error;
    throw ioError(error, `cannot convert ${input}`);
  }
}

/** Stream a planned checkpoint into `output` (atomic: the file appears only when complete). */
export function writePlanned(
  planned: PlannedCheckpoint,
  output: string,
  options: NodeConvertOptions & AtomicWriteOptions = {},
): ConversionReport {
  const { plan, container, source } = planned;
  const maxGather = options.maxGatherBytes ?? 1 << 30;
  const writer = createWriter(
    output,
    plan.tensors.map((t) => [t.name, { dtype: t.dtype, shape: t.shape }] as const),
    plan.metadata,
    { fsync: options.fsync, mode: options.mode },
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
  } catch (error) {
    if (error instanceof SafetensorError) throw error;
    throw ioError(error, `cannot convert ${planned.input}`);
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
}

/**
 * Convert a PyTorch checkpoint to a safetensors file. Refuses (UnsafePickle, writing nothing) when the file names a
 * dangerous global, or one not allowlisted unless `allowUnknown`. The output appears atomically, only when complete.
 */
export function convertPickleFile(input: string, output: string, options: NodeConvertOptions = {}): ConversionReport {
  const planned = openPlanned(input, options);
  try {
    return writePlanned(planned, output, options);
  } finally {
    planned.source.close();
  }
}

/** What `convertToTorchFile` wrote. */
export interface TorchWriteReport {
  readonly tensors: number;
  /** Names written as the same tensor object as another (tied), from the safetensors metadata. */
  readonly aliases: ReadonlyMap<string, string>;
  readonly bytesWritten: number;
}

/**
 * Write a safetensors file as a torch zip checkpoint that `torch.load(weights_only=True)` reads: protocol 2, only
 * allowlisted globals, stored records aligned to 64 bytes. Metadata entries `NAME: KEPT` naming a tensor (what
 * `save_model` and our converter record for tied weights) become the same tensor object again.
 */
export function convertToTorchFile(input: string, output: string): TorchWriteReport {
  using file = SafetensorsFile.open(PreadSource.open(input));
  const infos = [...file.header.tensors.values()].sort((a, b) => a.dataOffsets[0] - b.dataOffsets[0]);
  const specs: TorchTensorSpec[] = infos.map((info) => {
    torchTypeOf(info.dtype);
    return {
      name: info.name,
      dtype: info.dtype,
      shape: info.shape,
      byteLength: info.byteLength,
      elementSize: dtypeInfo(info.dtype)!.bits / 8,
    };
  });
  const aliases = new Map<string, string>();
  for (const [key, value] of file.metadata() ?? []) {
    if (!file.header.tensors.has(key) && file.header.tensors.has(value)) aliases.set(key, value);
  }
  const pkl = stateDictPickle(specs, aliases);
  const text = (s: string) => new TextEncoder().encode(s);
  const small: [string, Uint8Array][] = [
    ["archive/data.pkl", pkl],
    ["archive/.format_version", text("1")],
    ["archive/.storage_alignment", text("64")],
    ["archive/byteorder", text("little")],
  ];
  // CRCs of the storages are known only after streaming them; headers are written after their data.
  const records = [
    ...small.map(([name, bytes]) => ({ name, size: bytes.length, crc32: zlib.crc32(bytes) })),
    ...specs.map((t, i) => ({ name: `archive/data/${i}`, size: t.byteLength, crc32: 0 })),
    { name: "archive/version", size: 2, crc32: zlib.crc32(text("3\n")) },
  ];
  const layout = planZip(records);
  const source = PreadSource.open(input);
  try {
    writeFileAtomic(output, (fd) => {
      const planned = [...layout.records];
      small.forEach(([, bytes], i) => {
        writeAllAt(fd, planned[i]!.localHeader, planned[i]!.headerOffset);
        writeAllAt(fd, bytes, planned[i]!.dataOffset);
      });
      const scratch = new Uint8Array(CHUNK_BYTES);
      infos.forEach((info, i) => {
        const r = planned[small.length + i]!;
        let crc = 0;
        const from = file.header.dataStart + info.dataOffsets[0];
        for (let done = 0; done < info.byteLength; ) {
          const n = Math.min(scratch.length, info.byteLength - done);
          const chunk = source.readInto(from + done, scratch.subarray(0, n));
          crc = zlib.crc32(chunk, crc);
          writeAllAt(fd, chunk, r.dataOffset + done);
          done += n;
        }
        // The CRC field of the local header (offset 14), known now that the bytes went by.
        new DataView(r.localHeader.buffer).setUint32(14, crc >>> 0, true);
        writeAllAt(fd, r.localHeader, r.headerOffset);
        planned[small.length + i] = { ...r, crc32: crc >>> 0 };
      });
      const last = planned[planned.length - 1]!;
      writeAllAt(fd, last.localHeader, last.headerOffset);
      writeAllAt(fd, text("3\n"), last.dataOffset);
      writeAllAt(fd, zipDirectory(planned, layout.end), layout.end);
    });
  } finally {
    source.close();
  }
  return { tensors: specs.length, aliases, bytesWritten: fs.statSync(output).size };
}
