/**
 * `safetensors to-gguf` as a library function: a model folder (local or remote) to a GGUF file, streamed. Each
 * tensor is read in chunks of whole rows, converted (see kernel.ts) and written at its planned offset in a
 * temporary file that replaces OUT only when complete (atomic, as every write here). Memory is O(chunk) whatever
 * the model's size: nothing holds a whole tensor, except a permuted 1-D bias.
 *
 * Tensors whose bytes do not change (same type, no permutation, no +1) are copied by the kernel
 * (copy_file_range) when the model is local.
 */
import * as fs from "node:fs";
import { SafetensorError } from "../format/errors.js";
import { copyRange, preallocate } from "../io/node-copy.js";
import { AtomicFile, type AtomicWriteOptions, writeAllAt, writeError } from "../io/node-write.js";
import {
  addOne,
  convertDirect,
  decodeSource,
  encodeOutput,
  outputBytes,
  permuteRows,
  preferQ8Kernel,
  sourceBytes,
} from "./kernel.js";
import { type ModelFolder, type OpenModelOptions, openModelFolder } from "./node-model.js";
import { QuantPool } from "./node-pool.js";
import { nativeQ8Kernel } from "./node-q8-native.js";
import { type ConversionPlan, type OutputType, type PlanOptions, planConversion, type TensorJob } from "./plan.js";
import { ggmlTypeByName } from "./types.js";
import { planGguf } from "./writer.js";

/** Source bytes read per chunk (default 8 MiB): large enough for disk speed, small enough for O(chunk) memory. */
export const DEFAULT_CHUNK_BYTES = 8 << 20;

export interface ToGgufOptions extends PlanOptions, OpenModelOptions, AtomicWriteOptions {
  type?: OutputType;
  chunkBytes?: number;
  /** Worker threads for quantizing (default: the machine's cores, up to 4; 0 = main thread only). */
  threads?: number;
  onProgress?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

export interface ToGgufResult {
  readonly file: string;
  readonly bytes: number;
  readonly tensors: number;
  readonly parameters: number;
  readonly architecture: string;
  readonly type: OutputType;
}

/** Plan a conversion without writing anything (what `to-gguf --dry-run` prints). */
export async function planToGguf(model: string, options: ToGgufOptions = {}): Promise<ConversionPlan> {
  const folder = await openModelFolder(model, options);
  try {
    return await planFolder(folder, options);
  } finally {
    await folder.close();
  }
}

function planFolder(folder: ModelFolder, options: ToGgufOptions): Promise<ConversionPlan> {
  return planConversion(
    {
      config: folder.config,
      generationConfig: folder.generationConfig,
      directoryName: folder.name,
      tokenizer: folder.tokenizer,
      tensors: folder.tensors,
    },
    options.type ?? "F16",
    options,
  );
}

/** Convert MODEL (a directory, index or remote folder) to a GGUF file at `out`. */
export async function toGguf(model: string, out: string, options: ToGgufOptions = {}): Promise<ToGgufResult> {
  const type = options.type ?? "F16";
  const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  if (!(Number.isSafeInteger(chunkBytes) && chunkBytes >= 4096)) {
    throw new SafetensorError("InvalidOption", "chunkBytes must be an integer of at least 4096");
  }
  const folder = await openModelFolder(model, options);
  if (type === "Q8_0") preferQ8Kernel(nativeQ8Kernel());
  let file: AtomicFile | undefined;
  const fds = new Map<number, number>();
  const pool = QuantPool.create(type, options.threads);
  try {
    const plan = await planFolder(folder, options);
    const layout = planGguf(
      plan.metadata,
      plan.jobs.map((j) => ({ name: j.name, dims: j.dims, type: ggmlTypeByName(j.type) })),
    );
    file = AtomicFile.create(out, options);
    const fd = file.fd;
    try {
      // Sized first: the workers' direct writes would otherwise extend the file from two threads at once. With its
      // blocks where the file system can: the rename over an earlier file then has nothing to flush (node-copy.ts).
      preallocate(fd, layout.fileSize);
      fs.ftruncateSync(fd, layout.fileSize);
      writeAllAt(fd, layout.header, 0);
    } catch (error) {
      throw writeError(error, `cannot write ${out}`);
    }
    const total = layout.sizes.reduce((a, b) => a + b, 0);
    let done = 0;
    const progress = (n: number) => {
      done += n;
      options.onProgress?.(done, total);
    };
    const byName = new Map(folder.tensors.map((t) => [t.name, t]));
    const buffers = new Buffers();
    for (let i = 0; i < plan.jobs.length; i++) {
      if (options.signal?.aborted) throw options.signal.reason ?? new Error("aborted");
      const job = plan.jobs[i]!;
      const at = layout.offsets[i]!;
      if (job.data !== undefined) {
        const bytes = new Uint8Array(outputBytes(job.type, job.data.length));
        encodeOutput(job.type, job.data, job.data.length, bytes);
        writeAt(fd, bytes, at, out);
        progress(bytes.length);
        continue;
      }
      const source = byName.get(job.source!)!;
      const part = folder.parts[source.part]!;
      let inFd: number | undefined;
      if (part.path !== undefined) {
        inFd = fds.get(source.part);
        if (inFd === undefined) {
          inFd = fs.openSync(part.path, "r");
          fds.set(source.part, inFd);
        }
      }
      const read = async (offset: number, length: number): Promise<Uint8Array> => {
        if (inFd !== undefined) {
          const buf = buffers.take(length);
          let got = 0;
          while (got < length) {
            const n = fs.readSync(inFd, buf, got, length - got, offset + got);
            if (n === 0) throw new SafetensorError("SourceChanged", `${part.file} is shorter than its header says`);
            got += n;
          }
          return buf;
        }
        const [bytes] = await part.remote!.readRanges([{ start: offset, end: offset + length }], {
          signal: options.signal,
        });
        return bytes!;
      };
      await convertTensor(job, source.offset, read, inFd, file, at, out, chunkBytes, pool, buffers, progress);
    }
    file.commit();
    return {
      file: out,
      bytes: layout.fileSize,
      tensors: plan.jobs.length,
      parameters: plan.totalParameters,
      architecture: plan.arch.gguf,
      type,
    };
  } catch (error) {
    file?.abort();
    throw error;
  } finally {
    for (const f of fds.values()) fs.closeSync(f);
    await pool?.close();
    await folder.close();
  }
}

function writeAt(fd: number, bytes: Uint8Array, at: number, out: string): void {
  try {
    writeAllAt(fd, bytes, at);
  } catch (error) {
    throw writeError(error, `cannot write ${out}`);
  }
}

/**
 * Chunk buffers reused through the whole conversion: a fresh ArrayBuffer per chunk is external memory that V8
 * collects late, and the process grew to ~200 MiB of dead chunks on the 2.37 GiB benchmark (277 MiB with two
 * workers) before this; reused, ~4 chunks exist at any time.
 */
class Buffers {
  private free: ArrayBuffer[] = [];
  /** A buffer of at least `length` bytes (a view of exactly `length`). */
  take(length: number): Uint8Array {
    const i = this.free.findIndex((b) => b.byteLength >= length);
    const buffer = i >= 0 ? this.free.splice(i, 1)[0]! : new ArrayBuffer(length);
    return new Uint8Array(buffer, 0, length);
  }
  give(bytes: Uint8Array): void {
    if (bytes.buffer instanceof ArrayBuffer && bytes.buffer.byteLength > 0 && this.free.length < 8) {
      this.free.push(bytes.buffer);
    }
  }
}

async function convertTensor(
  job: TensorJob,
  sourceOffset: number,
  read: (offset: number, length: number) => Promise<Uint8Array>,
  inFd: number | undefined,
  output: AtomicFile,
  outAt: number,
  out: string,
  chunkBytes: number,
  pool: QuantPool | null,
  buffers: Buffers,
  progress: (n: number) => void,
): Promise<void> {
  const outFd = output.fd;
  const elementBytes = sourceBytes(job.sourceDtype);
  const unchanged = job.type === job.sourceDtype && !job.plusOne;
  // A permuted 1-D bias: its elements are the rows being reordered.
  const oneD = job.dims.length === 1;
  const rows = oneD && job.permuteHeads > 0 ? job.rowLength : job.keepRows;
  const rowLength = oneD && job.permuteHeads > 0 ? 1 : job.rowLength;
  const rowBytes = rowLength * elementBytes;
  const headRows = job.permuteHeads > 0 ? rows / job.permuteHeads : 1;
  if (unchanged && job.permuteHeads === 0 && inFd !== undefined) {
    const length = rows * rowBytes;
    try {
      copyRange(inFd, sourceOffset, outFd, outAt, length);
    } catch (error) {
      throw writeError(error, `cannot write ${out}`);
    }
    progress(length);
    return;
  }
  // Whole rows per chunk, whole heads when permuting.
  let chunkRows = Math.max(1, Math.floor(chunkBytes / rowBytes));
  if (job.permuteHeads > 0) chunkRows = Math.max(headRows, Math.floor(chunkRows / headRows) * headRows);
  const outRowBytes = outputBytes(job.type, rowLength);
  let written = 0;
  const pending: Promise<void>[] = [];
  for (let r = 0; r < rows; r += chunkRows) {
    const n = Math.min(chunkRows, rows - r);
    const at = outAt + written;
    written += n * outRowBytes;
    const count = n * rowLength;
    if (pool !== null && !unchanged && !job.plusOne && count >= 4096 && inFd !== undefined) {
      // A local chunk: the worker reads, reorders, converts and writes it itself (the main thread touches none of
      // its bytes), while the other worker does the next.
      const permute = job.permuteHeads > 0 ? { rowBytes, headRows } : undefined;
      const inAt = sourceOffset + r * rowBytes;
      const task = pool.runFile(job.sourceDtype, job.type, count, inFd, inAt, output.temp, at, permute).then(
        (done) => progress(done),
        (error) => {
          throw writeError(error, `cannot write ${out}`);
        },
      );
      task.catch(() => {});
      pending.push(task);
      if (pending.length >= 2 * pool.size) await pending.shift();
      continue;
    }
    let src = await read(sourceOffset + r * rowBytes, n * rowBytes);
    if (job.permuteHeads > 0) {
      const permuted = buffers.take(src.length);
      permuteRows(src, permuted, n, rowBytes, headRows);
      buffers.give(src);
      src = permuted;
    }
    if (unchanged) {
      writeAt(outFd, src, at, out);
      progress(src.length);
      buffers.give(src);
      continue;
    }
    const bytes = buffers.take(n * outRowBytes);
    if (pool !== null && !job.plusOne && count >= 4096) {
      // Quantized in a worker while the next chunk is read; at most pool.size chunks in flight. Both buffers go to
      // the worker and come back.
      const task = pool.run(job.sourceDtype, job.type, src, count, bytes).then(({ src: back, out: done }) => {
        writeAt(outFd, done, at, out);
        progress(done.length);
        buffers.give(back);
        buffers.give(done);
      });
      task.catch(() => {}); // awaited below; this only keeps a failure from being reported as unhandled
      pending.push(task);
      if (pending.length >= pool.size) await pending.shift();
      continue;
    }
    if (job.plusOne || !convertDirect(job.sourceDtype, job.type, src, count, bytes)) {
      const values = new Float32Array(count);
      decodeSource(job.sourceDtype, src, count, values);
      if (job.plusOne) addOne(values, count, job.sourceDtype);
      encodeOutput(job.type, values, count, bytes);
    }
    writeAt(outFd, bytes, at, out);
    progress(bytes.length);
    buffers.give(src);
    buffers.give(bytes);
  }
  await Promise.all(pending);
}
