/**
 * Running planned merge jobs over any reader and sink: element-wise methods stream each tensor in chunks (memory:
 * a chunk per input), the others read whole tensors (memory: a float32 copy per input of the largest tensor). Inputs
 * are decoded to float32, rounded to the compute dtype (mergekit's `.to(dtype)` on load), merged, and encoded to the
 * output dtype with torch's rounding. Pure: the reader and sink are whatever the caller has (files, HTTP, memory).
 */
import { fromFloat32, toFloat32 } from "../codecs/index.js";
import { dtypeOf } from "../format/dtypes.js";
import { SafetensorError } from "../format/errors.js";
import { throwIfAborted } from "../io/async-source.js";
import type { MergeDtype } from "./config.js";
import { codec16Kernels, keepSortedKernel, linear16Kernel } from "./fast-kernels.js";
import {
  combineKernel,
  dellaSparsify,
  l1Norm,
  l1Rescale,
  linearKernel,
  linearTable16Kernel,
  magnitudeSparsify,
  modelStockKernel,
  nuslerpKernel,
  outlierSparsify,
  passthroughKernel,
  productTable,
  randomSparsify,
  slerpKernel,
  streamKey,
  subtractBase,
  sumRounded,
} from "./kernels.js";
import type { TensorJob } from "./plan.js";
import { type Round, roundArray, rounder } from "./round.js";

/** Reads a tensor's raw stored bytes: [byteOffset, byteOffset + byteLength) of tensor `name` of `model`. */
export interface MergeReader {
  read(model: string, name: string, byteOffset: number, byteLength: number, signal?: AbortSignal): Promise<Uint8Array>;
  /** The same bytes read into `into` (its whole length), a buffer the caller reuses; optional. */
  readInto?(model: string, name: string, byteOffset: number, into: Uint8Array, signal?: AbortSignal): Promise<void>;
}

/** Takes an output tensor's bytes at a byte offset inside it. */
export interface MergeSink {
  write(name: string, bytes: Uint8Array, byteOffset: number): void | Promise<void>;
}

export interface ExecuteOptions {
  /** Elements per chunk of an element-wise merge (default 1 Mi: 4 MiB of float32 per input). */
  chunkElements?: number;
  /** Seed of DARE's and DELLA's random drops (default 0): the same seed gives the same bytes. */
  seed?: number;
  signal?: AbortSignal;
  /** Told bytes read from inputs and written to the output as they go. */
  onBytes?: (read: number, written: number) => void;
  /** Where element-wise chunks are computed (default: in this thread, one at a time). */
  compute?: ChunkCompute;
  /** Chunks of an element-wise job read ahead while earlier ones are computed (default 1). */
  inFlight?: number;
  /** @internal Float32 buffers whole-tensor jobs take and give back (default: fresh ones each job). */
  buffers?: FloatBuffers;
  /** Where whole-tensor task vectors are sparsified (default: in this thread, one after the other). */
  sparsify?: (task: SparsifyTask) => Promise<Float32Array>;
  /**
   * A tensor's task vectors are sparsified at once (by `sparsify`) while 4 bytes per entry of each of them fit in
   * this; larger ones one after the other (default 512 MiB). Replaying torch's sort holds 4 bytes an entry while it
   * runs: two at once on the 2.37 GiB benchmark's embedding (131 M entries) would add 1 GiB to TIES's peak.
   */
  maxParallelSparsifyBytes?: number;
}

export const DEFAULT_MAX_PARALLEL_SPARSIFY_BYTES = 512 << 20;

export const DEFAULT_CHUNK_ELEMENTS = 1 << 20;

const CONSENSUS = new Set(["ties", "dare_ties", "breadcrumbs_ties", "della"]);

export function elementCount(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Bytes per element of a dtype the merge reads or writes. */
export function elementBytes(dtype: string): number {
  return dtypeOf(dtype as Parameters<typeof dtypeOf>[0]).bits / 8;
}

function isTaskArithmetic(job: TensorJob): boolean {
  return !["linear", "passthrough", "slerp", "nuslerp", "model_stock"].includes(job.method);
}

/** Can this job run chunk by chunk (no whole-tensor statistic)? */
export function isElementWise(job: TensorJob): boolean {
  switch (job.method) {
    case "linear":
    case "task_arithmetic":
    case "passthrough":
      return true;
    case "slerp":
    case "nuslerp":
    case "model_stock":
      return job.inputs.length === 1;
    default:
      // The sparsifying methods keep every entry at density 1: only the combination is left.
      return job.inputs.every((input, i) => i === job.base || (input.params.get("density") ?? 1) >= 1);
  }
}

/** Is the output the one input's bytes unchanged (a passthrough of a tensor already in the output dtype)? */
export function isCopy(job: TensorJob): boolean {
  if (job.inputs.length !== 1) return false;
  const input = job.inputs[0]!;
  if (job.method === "passthrough" && input.params.get("scale") !== undefined) return false;
  return input.dtype === job.computeDtype && job.computeDtype === job.outDtype;
}

/** Decode `count` elements of an input to float32 in `out`, rounded to the compute dtype. */
function decodeInto(bytes: Uint8Array, dtype: string, count: number, out: Float32Array, job: TensorJob): void {
  const fast = dtype === "F16" || dtype === "BF16" ? codec16Kernels() : null;
  if (fast !== null) fast.decode16(bytes, dtype as "F16" | "BF16", count, out);
  else toFloat32(dtype as Parameters<typeof toFloat32>[0], bytes, { count, out });
  if (dtype !== job.computeDtype) roundArray(out, count, job.computeDtype);
}

/** Run one job: read its inputs, merge, write the output tensor `job.name` through `sink`. */
export async function executeJob(
  job: TensorJob,
  reader: MergeReader,
  sink: MergeSink,
  options: ExecuteOptions = {},
): Promise<void> {
  const count = elementCount(job.shape);
  const outBytes = elementBytes(job.outDtype);
  const signal = options.signal;
  const report = options.onBytes ?? (() => {});
  if (isCopy(job)) {
    const input = job.inputs[0]!;
    const piece = (options.chunkElements ?? DEFAULT_CHUNK_ELEMENTS) * outBytes * 4;
    for (let at = 0; at < count * outBytes; at += piece) {
      throwIfAborted(signal);
      const bytes = await reader.read(input.model, input.name, at, Math.min(piece, count * outBytes - at), signal);
      await sink.write(job.name, bytes, at);
      report(bytes.length, bytes.length);
    }
    return;
  }
  if (isElementWise(job)) {
    await streamChunks(job, reader, sink, options);
    return;
  }
  // Whole tensors: every input decoded into one float32 array (read in pieces of at most 16 chunks; of 4 into a buffer
  // per input kept from job to job when the reader reads into buffers).
  const xs = job.inputs.map(() => options.buffers?.take(count) ?? new Float32Array(count));
  const buffers = reader.readInto === undefined ? undefined : options.buffers;
  await Promise.all(
    job.inputs.map(async (input, i) => {
      const bpe = elementBytes(input.dtype);
      const step = DEFAULT_CHUNK_ELEMENTS * (buffers === undefined ? 16 : 4);
      for (let done = 0; done < count; done += step) {
        throwIfAborted(signal);
        const m = Math.min(step, count - done);
        let bytes: Uint8Array;
        if (buffers === undefined) bytes = await reader.read(input.model, input.name, done * bpe, m * bpe, signal);
        else {
          bytes = buffers.bytes(i, m * bpe);
          await reader.readInto!(input.model, input.name, done * bpe, bytes, signal);
        }
        decodeInto(bytes, input.dtype, m, xs[i]!.subarray(done, done + m), job);
        report(bytes.length, 0);
      }
    }),
  );
  let out: Float32Array;
  // Arrays that came back from other threads (the task vectors handed over and back), given back with the others.
  const spent: Float32Array[] = [];
  if (options.sparsify !== undefined && isTaskArithmetic(job)) {
    out = await taskArithmeticParallel(job, xs, count, { ...options, sparsify: options.sparsify }, spent);
  } else {
    out = new Float32Array(count);
    mergeValues(job, xs, out, options.seed ?? 0, new Float32Array(count));
  }
  for (let done = 0; done < count; done += DEFAULT_CHUNK_ELEMENTS) {
    const m = Math.min(DEFAULT_CHUNK_ELEMENTS, count - done);
    const encoded = encodeValues(out.subarray(done, done + m), job.outDtype);
    await sink.write(job.name, encoded, done * outBytes);
    report(0, encoded.length);
  }
  options.buffers?.give([...xs, ...spent, out]);
}

/**
 * Float32 buffers of whole-tensor jobs, kept from one job to the next (the largest few): a fresh one is zeroed page
 * by page as it is first touched (3 × 1.27 G entries for the bench's TIES). Measured on the 2-core VM, that TIES at
 * load ~5: 85 -> 78 s of CPU (system 27.5 -> 21.3 s), peak RSS 2437 -> 2423 MiB, same bytes.
 */
export class FloatBuffers {
  readonly #spare: ArrayBuffer[] = [];
  readonly #bytes: Uint8Array[] = [];
  constructor(readonly keep = 4) {}

  /** `count` float32 values (not zeroed: the caller writes every one), in the smallest spare buffer that holds them. */
  take(count: number): Float32Array {
    let i = -1; // sorted largest first
    while (i + 1 < this.#spare.length && this.#spare[i + 1]!.byteLength >= count * 4) i++;
    return i < 0 ? new Float32Array(count) : new Float32Array(this.#spare.splice(i, 1)[0]!, 0, count);
  }

  /** `length` bytes of read buffer number `slot` (the same memory each time, grown as needed; not zeroed). */
  bytes(slot: number, length: number): Uint8Array {
    if ((this.#bytes[slot]?.length ?? 0) < length) this.#bytes[slot] = new Uint8Array(length);
    return this.#bytes[slot]!.subarray(0, length);
  }

  /** The buffers of arrays no longer used (those handed to another thread and not back are skipped). */
  give(arrays: readonly Float32Array[]): void {
    for (const array of arrays) {
      const buffer = array.buffer;
      if (buffer instanceof ArrayBuffer && buffer.byteLength > 0 && !this.#spare.includes(buffer)) {
        this.#spare.push(buffer);
      }
    }
    this.#spare.sort((a, b) => b.byteLength - a.byteLength);
    this.#spare.length = Math.min(this.#spare.length, this.keep);
  }
}

/**
 * Computes one chunk of an element-wise job: the inputs' raw bytes (`count` elements each) → the output's bytes. Runs
 * here by default; the Node adapter hands chunks to worker threads (`node-pool.ts`).
 */
export type ChunkCompute = (job: TensorJob, raws: Uint8Array[], count: number) => Promise<Uint8Array>;

/** Scratch arrays of one thread's chunk computations, grown as needed. */
class ChunkScratch {
  xs: Float32Array[] = [];
  out = new Float32Array(0);
  tmp = new Float32Array(0);

  ensure(inputs: number, count: number): void {
    if (this.out.length < count) {
      this.out = new Float32Array(count);
      this.tmp = new Float32Array(count);
      this.xs = [];
    }
    while (this.xs.length < inputs) this.xs.push(new Float32Array(this.out.length));
  }
}

const localScratch = new ChunkScratch();

/**
 * One chunk of an element-wise job, computed in this thread: decode, merge, encode. `into(length)` gives the buffer
 * the encoded bytes go to (default: a new one; a worker reuses one, as fresh buffers are zeroed first and pile up
 * dead until V8 collects them).
 */
export function computeChunk(
  job: TensorJob,
  raws: readonly Uint8Array[],
  count: number,
  scratch = localScratch,
  into?: (length: number) => Uint8Array,
): Uint8Array {
  scratch.ensure(raws.length, count);
  const linear = linear16Params(job);
  const fast = linear16Kernel();
  if (linear !== null && fast !== null) {
    const encoded = into?.(count * 2) ?? new Uint8Array(count * 2);
    fast(raws, linear.weights, linear.divisor, linear.dtype, count, encoded);
    return encoded;
  }
  if (isTableLinear(job) && raws.every((r) => r.byteOffset % 2 === 0)) {
    const out = scratch.out.subarray(0, count);
    const dtype = job.computeDtype as "F16" | "BF16";
    const round = rounder(dtype);
    const weights = job.inputs.map((input) => round(input.params.get("weight") ?? 0));
    linearTable16Kernel(
      raws.map((r) => new Uint16Array(r.buffer, r.byteOffset, count)),
      weights.map((w) => productTable(dtype, w)),
      (job.params.get("normalize") ?? 1) !== 0 ? sumRounded(weights, round) : null,
      dtype,
      out,
      count,
    );
    return encodeValues(out, job.outDtype, into);
  }
  const xs = raws.map((bytes, i) => {
    const x = scratch.xs[i]!.subarray(0, count);
    decodeInto(bytes, job.inputs[i]!.dtype, count, x, job);
    return x;
  });
  const out = scratch.out.subarray(0, count);
  mergeValues(job, xs, out, 0, scratch.tmp.subarray(0, count));
  return encodeValues(out, job.outDtype, into);
}

/**
 * Is this element-wise job's chunk computed by a registered fast kernel (then computing it in the calling thread
 * beats handing it to a worker)?
 */
export function hasFastChunkKernel(job: TensorJob): boolean {
  return isTableLinear(job) && linear16Kernel() !== null;
}

/**
 * The arguments of a 16-bit linear kernel (`Linear16Kernel`) for this job: its dtype, its weights rounded to it, and
 * the divisor (null: no normalize); null when the job is not a linear merge of 16-bit inputs in their own dtype.
 */
export function linear16Params(
  job: TensorJob,
): { dtype: "F16" | "BF16"; weights: Float32Array; divisor: number | null } | null {
  if (!isTableLinear(job)) return null;
  const dtype = job.computeDtype as "F16" | "BF16";
  const round = rounder(dtype);
  const weights = job.inputs.map((input) => round(input.params.get("weight") ?? 0));
  const divisor = (job.params.get("normalize") ?? 1) !== 0 ? sumRounded(weights, round) : null;
  return { dtype, weights: Float32Array.from(weights), divisor };
}

/** A linear merge of 16-bit inputs computed and written in that same dtype: products come from tables. */
function isTableLinear(job: TensorJob): boolean {
  const dtype = job.computeDtype;
  return (
    job.method === "linear" &&
    (dtype === "F16" || dtype === "BF16") &&
    job.outDtype === dtype &&
    job.inputs.every((input) => input.dtype === dtype)
  );
}

/** Element-wise jobs: chunks read in order and computed (here or by `options.compute`), a few in flight. */
async function streamChunks(
  job: TensorJob,
  reader: MergeReader,
  sink: MergeSink,
  options: ExecuteOptions,
): Promise<void> {
  const count = elementCount(job.shape);
  const chunk = Math.max(1, options.chunkElements ?? DEFAULT_CHUNK_ELEMENTS);
  const outBytes = elementBytes(job.outDtype);
  const report = options.onBytes ?? (() => {});
  const compute: ChunkCompute = options.compute ?? (async (j, raws, n) => computeChunk(j, raws, n));
  const depth = Math.max(1, options.inFlight ?? 1);
  const inflight: Promise<void>[] = [];
  let failed: unknown = null;
  const readChunk = (first: number): Promise<Uint8Array[]> => {
    const n = Math.min(chunk, count - first);
    const reads = Promise.all(
      job.inputs.map((input) => {
        const bpe = elementBytes(input.dtype);
        return reader.read(input.model, input.name, first * bpe, n * bpe, options.signal);
      }),
    );
    reads.catch(() => {}); // awaited below; a read still ahead when an earlier chunk fails is dropped
    return reads;
  };
  // The next chunk's reads are under way while this one is computed and written (the sink may write synchronously).
  let ahead = count > 0 ? readChunk(0) : null;
  for (let first = 0; first < count; first += chunk) {
    throwIfAborted(options.signal);
    if (failed !== null) break;
    const n = Math.min(chunk, count - first);
    const raws = await ahead!;
    ahead = first + chunk < count ? readChunk(first + chunk) : null;
    report(
      raws.reduce((sum, r) => sum + r.length, 0),
      0,
    );
    const at = first * outBytes;
    const done = compute(job, raws, n).then(
      async (encoded) => {
        await sink.write(job.name, encoded, at);
        report(0, encoded.length);
      },
      (error: unknown) => {
        failed ??= error;
      },
    );
    inflight.push(done);
    if (inflight.length >= depth) await inflight.shift();
  }
  await Promise.all(inflight);
  if (failed !== null) throw failed;
}

function encodeValues(values: Float32Array, dtype: string, into?: (length: number) => Uint8Array): Uint8Array {
  const bytes = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  const out = into?.(elementBytes(dtype) * values.length);
  if (dtype === "F32") {
    if (out === undefined) return bytes.slice();
    out.set(bytes);
    return out;
  }
  const fast = codec16Kernels();
  if (fast !== null) return fast.encode16(values, dtype as "F16" | "BF16", out);
  return fromFloat32(dtype as "F16" | "BF16", values, out === undefined ? undefined : { out });
}

/**
 * The method on float32 values in the compute dtype: `xs` (one array per input, changed in place) → `out`: a chunk
 * of an element-wise job, the whole tensor otherwise. Random drops are keyed by element index in the whole tensor.
 */
export function mergeValues(
  job: TensorJob,
  xs: Float32Array[],
  out: Float32Array,
  seed: number,
  scratch: Float32Array = new Float32Array(out.length),
): void {
  const round = rounder(job.computeDtype);
  const dtype = job.computeDtype;
  const count = out.length;
  const weight = (i: number) => round(job.inputs[i]!.params.get("weight") ?? 0);
  switch (job.method) {
    case "linear":
      linearKernel(
        xs,
        xs.map((_, i) => weight(i)),
        (job.params.get("normalize") ?? 1) !== 0,
        dtype,
        out,
        count,
        scratch,
      );
      return;
    case "passthrough":
      if (xs.length !== 1) mismatchInputs(job, "passthrough takes exactly one model per tensor");
      passthroughKernel(xs[0]!, job.inputs[0]!.params.get("scale"), dtype, out, count);
      return;
    case "slerp":
      slerpJob(job, xs, out);
      return;
    case "nuslerp":
      nuslerpJob(job, xs, out, round);
      return;
    case "model_stock":
      modelStockJob(job, xs, out, round);
      return;
    default:
      taskArithmeticJob(job, xs, out, seed, scratch);
  }
}

function mismatchInputs(job: TensorJob, message: string): never {
  throw new SafetensorError("MergeMismatch", `${job.name}: ${message}`, { tensor: job.name });
}

/** One task vector to sparsify (a worker's task when run in parallel). Structured-cloneable. */
export interface SparsifyTask {
  method: string;
  delta: Float32Array;
  density: number;
  gamma: number;
  epsilon: number;
  rescale: boolean;
  dtype: MergeDtype;
  /** Row length for DELLA's ranks (dim 1; a 1-D tensor is one row). */
  cols: number;
  seed: number;
  stream: number;
}

/**
 * Do equal magnitudes almost surely straddle the sort's boundaries, so that torch's sort must be replayed anyway? Yes
 * for 16-bit task vectors (at most 32 K distinct magnitudes) of more than a few thousand entries, when the replay is
 * the addon's: the histograms that would find the rare exception first are skipped. Measured on the 2-core VM: the two
 * histogram passes took 65 ms of CPU per 16 Mi entries, ~10 s over the bench's TIES (two 1.27 G-entry task vectors).
 */
function tiesLikely(task: SparsifyTask): boolean {
  return task.dtype !== "F32" && task.delta.length >= 1 << 16 && keepSortedKernel() !== null;
}

/** Sparsify a task vector in place as its method says (and rescale it to its L1 norm when asked); returns it. */
export function sparsifyDelta(task: SparsifyTask): Float32Array {
  const { delta, density } = task;
  if (density >= 1) return delta;
  const before = task.rescale ? l1Norm(delta) : 0;
  switch (task.method) {
    case "ties":
      magnitudeSparsify(delta, density, tiesLikely(task));
      break;
    case "breadcrumbs":
    case "breadcrumbs_ties":
      outlierSparsify(delta, density, task.gamma, tiesLikely(task));
      break;
    case "dare_linear":
    case "dare_ties":
      randomSparsify(delta, density, task.seed, task.stream);
      break;
    case "della":
    case "della_linear":
      dellaSparsify(delta, task.cols, density, task.epsilon, task.seed, task.stream);
      break;
  }
  if (task.rescale) l1Rescale(delta, before, rounder(task.dtype));
  return delta;
}

/** The task-arithmetic family's sparsification tasks of a whole tensor's task vectors (`deltas`, in input order). */
function sparsifyTasks(job: TensorJob, deltas: Float32Array[], seed: number): SparsifyTask[] {
  const others = job.inputs.map((_, i) => i).filter((i) => i !== job.base);
  const count = deltas[0]?.length ?? 0;
  const cols = job.shape.length >= 2 ? job.shape[1]! * elementCount(job.shape.slice(2)) : count;
  return others.map((i, k) => {
    const params = job.inputs[i]!.params;
    return {
      method: job.method,
      delta: deltas[k]!,
      density: params.get("density") ?? 1,
      gamma: params.get("gamma") ?? 0.01,
      epsilon: params.get("epsilon") ?? 0.15,
      rescale: (job.params.get("rescale") ?? 0) !== 0,
      dtype: job.computeDtype,
      cols,
      seed,
      stream: streamKey(`${job.name}\u0000${i}`),
    };
  });
}

/** Task vectors of a task-arithmetic job: every non-base input minus the base, in place; null when only the base. */
function taskVectors(job: TensorJob, xs: Float32Array[], count: number): Float32Array[] | null {
  const others = job.inputs.map((_, i) => i).filter((i) => i !== job.base);
  if (others.length === 0) return null;
  const deltas = others.map((i) => xs[i]!);
  subtractBase(deltas, xs[job.base]!, job.computeDtype, count);
  return deltas;
}

/** The combination of (sparsified) task vectors with the base. */
function combineTaskVectors(
  job: TensorJob,
  base: Float32Array,
  deltas: Float32Array[],
  out: Float32Array,
  scratch: Float32Array,
): void {
  const round = rounder(job.computeDtype);
  const others = job.inputs.map((_, i) => i).filter((i) => i !== job.base);
  combineKernel(
    base,
    deltas,
    others.map((i) => round(job.inputs[i]!.params.get("weight") ?? 0)),
    {
      consensus: CONSENSUS.has(job.method),
      normalize: (job.params.get("normalize") ?? 0) !== 0,
      lambda: job.params.get("lambda") ?? 1,
    },
    job.computeDtype,
    out,
    out.length,
    scratch,
  );
}

function taskArithmeticJob(
  job: TensorJob,
  xs: Float32Array[],
  out: Float32Array,
  seed: number,
  scratch: Float32Array,
): void {
  const deltas = taskVectors(job, xs, out.length);
  if (deltas === null) {
    out.set(xs[job.base]!);
    return;
  }
  if (!isElementWise(job)) for (const task of sparsifyTasks(job, deltas, seed)) sparsifyDelta(task);
  combineTaskVectors(job, xs[job.base]!, deltas, out, scratch);
}

/**
 * A whole-tensor task-arithmetic job whose task vectors are sparsified by `sparsify` (worker threads: each vector is
 * handed over and back, not copied), then combined here.
 */
async function taskArithmeticParallel(
  job: TensorJob,
  xs: Float32Array[],
  count: number,
  options: ExecuteOptions & { sparsify: (task: SparsifyTask) => Promise<Float32Array> },
  spent: Float32Array[],
): Promise<Float32Array> {
  const deltas = taskVectors(job, xs, count);
  if (deltas === null) return xs[job.base]!;
  const tasks = sparsifyTasks(job, deltas, options.seed ?? 0);
  let done: Float32Array[];
  if (tasks.length * count * 4 <= (options.maxParallelSparsifyBytes ?? DEFAULT_MAX_PARALLEL_SPARSIFY_BYTES)) {
    done = await Promise.all(tasks.map((task) => options.sparsify(task)));
  } else {
    done = [];
    for (const task of tasks) done.push(await options.sparsify(task));
  }
  // The combination reads every task vector at an entry before it writes that entry, so the first vector takes the
  // result and the second the divisors: two float32 copies of the tensor less (the embedding's 0.5 GiB each).
  const out = done[0]!;
  combineTaskVectors(job, xs[job.base]!, done, out, done[1] ?? new Float32Array(count));
  spent.push(...done.slice(1));
  return out;
}

function slerpJob(job: TensorJob, xs: Float32Array[], out: Float32Array): void {
  if (xs.length === 1) {
    out.set(xs[0]!);
    return;
  }
  if (xs.length !== 2) mismatchInputs(job, "slerp takes exactly two models");
  const other = job.base === 0 ? 1 : 0;
  const short = job.computeDtype === "F16" || job.computeDtype === "BF16";
  slerpKernel(job.params.get("t")!, xs[job.base]!, xs[other]!, out, short);
  // numpy computes in float32; the result is cast back to the compute dtype.
  roundArray(out, out.length, job.computeDtype);
}

function nuslerpJob(job: TensorJob, xs: Float32Array[], out: Float32Array, round: Round): void {
  if (xs.length === 1) {
    out.set(xs[0]!);
    return;
  }
  const others = job.inputs.map((_, i) => i).filter((i) => i !== job.base);
  if (others.length !== 2) mismatchInputs(job, "nuslerp takes exactly two models (plus an optional base model)");
  const w = others.map((i) => job.inputs[i]!.params.get("weight") ?? 0);
  const total = w[0]! + w[1]!;
  const t = Math.abs(total) < 1e-6 ? 0.5 : w[1]! / total;
  const flatten = (job.params.get("nuslerp_flatten") ?? 1) !== 0;
  const rowWise = (job.params.get("nuslerp_row_wise") ?? 0) !== 0;
  const [a, b] = others.map((i) => xs[i]!) as [Float32Array, Float32Array];
  if (job.base < 0) {
    nuslerpKernel(t, a, b, job.shape, flatten, rowWise, round, out);
    return;
  }
  const base = xs[job.base]!;
  subtractBase([a, b], base, job.computeDtype, out.length);
  nuslerpKernel(t, a, b, job.shape, flatten, rowWise, round, out);
  for (let i = 0; i < out.length; i++) out[i] = round(base[i]! + out[i]!);
}

function modelStockJob(job: TensorJob, xs: Float32Array[], out: Float32Array, round: Round): void {
  if (xs.length === 1) {
    out.set(xs[0]!);
    return;
  }
  if (xs.length < 3) mismatchInputs(job, "model_stock needs a base model and at least two others");
  const ws = job.inputs
    .map((_, i) => i)
    .filter((i) => i !== job.base)
    .map((i) => xs[i]!);
  const filterWise = (job.params.get("filter_wise") ?? 0) !== 0;
  const rowLength = filterWise ? (job.shape.at(-1) ?? out.length) : out.length;
  modelStockKernel(xs[job.base]!, ws, rowLength, round, out);
}
