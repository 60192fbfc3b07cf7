/**
 * `mergeModels` (Node): mergekit's YAML (or the same as an object) → a sharded checkpoint in `outDir`, streamed. The
 * config is checked before any model is opened; models are opened by their headers; each output tensor is computed
 * from ranged reads of its inputs and written through the streaming writer into staged shards, which one commit puts
 * in place with the index, config.json and tokenizer files (old directory or new, never a mix: `shards/save-commit`).
 */
import { createRequire } from "node:module";
import * as path from "node:path";
import { SafetensorError } from "../format/errors.js";
import { throwIfAborted } from "../io/async-source.js";
import { readFullyAtAsync, writeAtPath } from "../io/node-chunk-io.js";
import { ioError } from "../io/node-file.js";
import { writeError } from "../io/node-write.js";
import type { NodeOpenOptions } from "../read/node-async.js";
import { type MergeConfig, parseMergeConfig } from "./config.js";
import {
  computeChunk,
  DEFAULT_CHUNK_ELEMENTS,
  elementBytes,
  elementCount,
  executeJob,
  FloatBuffers,
  hasFastChunkKernel,
  isCopy,
  isElementWise,
  linear16Params,
  type MergeReader,
} from "./execute.js";
import { installNativeKernels, type Linear16FileKernel, nativeLinear16FileKernel } from "./node-native.js";
import { outputBytes, sideFilesOf, type TensorTarget, TOKENIZER_FILES, writeCheckpoint } from "./node-output.js";
import { ChunkPool, Flight, threadCount } from "./node-pool.js";
import { type ModelSource, openModel } from "./node-source.js";
import { type MergePlan, planMerge, type TensorJob } from "./plan.js";

export interface MergeProgress {
  tensorsDone: number;
  tensorsTotal: number;
  bytesRead: number;
  bytesWritten: number;
  /** Bytes of the output's tensors. */
  bytesTotal: number;
}

export interface MergeModelsOptions extends NodeOpenOptions {
  /** Local model paths in the config are relative to this directory (default: the current one, as mergekit). */
  modelsDir?: string;
  /** Largest shard (bytes or "5GB"; default 5GB, as huggingface_hub and mergekit). */
  maxShardSize?: number | string;
  /** Seed of DARE's and DELLA's random drops (default 0). */
  seed?: number;
  /** Elements per chunk of element-wise methods (default 1 Mi). */
  chunkElements?: number;
  /** Threads computing element-wise chunks (default: the CPUs, at most 4; 1 computes in the calling thread). */
  threads?: number;
  /**
   * Whole-tensor task vectors (TIES, DARE, breadcrumbs, DELLA) are sparsified in parallel while 4 bytes per entry of
   * each fit in this (default 512 MiB); larger ones one after the other, which bounds the peak.
   */
  maxParallelSparsifyBytes?: number;
  /**
   * Pieces of an output tensor computed in the calling thread (whole-tensor methods: TIES, DARE, SLERP...) are written
   * around the page cache from this many bytes (default 1 MiB); smaller ones through it.
   */
  directWriteBytes?: number;
  /** Copy the base's (or first model's) tokenizer files even without `tokenizer_source` (default true, as mergekit). */
  copyTokenizer?: boolean;
  fsync?: boolean;
  onProgress?: (progress: MergeProgress) => void;
}

export interface MergeSummary {
  method: string;
  /** Files written into the output directory. */
  files: string[];
  tensors: number;
  /** Tensor bytes read from the models. */
  bytesRead: number;
  /** Tensor bytes written. */
  bytesWritten: number;
  models: { location: string; tensorsRead: number }[];
}

/**
 * The YAML parser, loaded on the first config parsed: `yaml` is ~100 CommonJS modules, and loading them at import was
 * most of what `import("safetensors-ts")` cost (a fresh process, CPU medians of 20 runs: 131 ms with it against 69 ms
 * for bare `node`; see bench/RESULTS.md's import figure).
 */
let yaml: typeof import("yaml") | undefined;
function parseYaml(text: string): unknown {
  yaml ??= createRequire(import.meta.url)("yaml") as typeof import("yaml");
  return yaml.parse(text, { maxAliasCount: 100 });
}

/**
 * Load the YAML parser ahead of `parseMergeYaml`, asynchronously: where a bundler has put `yaml` in a chunk of its
 * own (the CLI's bundle: scripts/esbuild-yaml.mjs), that one file instead of the package's ~100 modules.
 */
export async function loadMergeYaml(): Promise<void> {
  yaml ??= await import("yaml");
}

/** Parse mergekit's YAML (refused by name when it asks for what is not supported). Nothing is read. */
export function parseMergeYaml(text: string): MergeConfig {
  let parsed: unknown;
  try {
    parsed = parseYaml(text);
  } catch (error) {
    throw new SafetensorError("InvalidMergeConfig", `the config is not valid YAML: ${(error as Error).message}`);
  }
  return parseMergeConfig(parsed);
}

/** Merge models as mergekit's config says, into the checkpoint directory `outDir`. */
export async function mergeModels(
  config: string | MergeConfig | Record<string, unknown>,
  outDir: string,
  options: MergeModelsOptions = {},
): Promise<MergeSummary> {
  if (typeof config === "string") await loadMergeYaml();
  const checked =
    typeof config === "string"
      ? parseMergeYaml(config)
      : "slices" in config && "form" in config
        ? (config as MergeConfig)
        : parseMergeConfig(config);
  const sources = new Map<string, ModelSource>();
  try {
    for (const model of checked.models) {
      const remote = /^[a-z][a-z0-9+.-]*:\/\//i.test(model);
      const location = remote || options.modelsDir === undefined ? model : path.resolve(options.modelsDir, model);
      sources.set(model, await openModel(location, options));
    }
    const plan = planMerge(checked, new Map([...sources].map(([name, source]) => [name, source.catalog])));
    return await writeMerge(checked, plan, sources, outDir, options);
  } finally {
    await Promise.all([...sources.values()].map((s) => s.close().catch(() => {})));
  }
}

async function writeMerge(
  config: MergeConfig,
  plan: MergePlan,
  sources: ReadonlyMap<string, ModelSource>,
  outDir: string,
  options: MergeModelsOptions,
): Promise<MergeSummary> {
  const jobs = new Map(plan.jobs.map((job) => [job.name, job]));
  if (jobs.size !== plan.jobs.length) {
    throw new SafetensorError("MergeMismatch", "two output tensors get the same name (overlapping slices?)");
  }
  const outputs = plan.jobs.map((job) => ({ name: job.name, dtype: job.outDtype, shape: job.shape }));
  const copyTokenizer = config.tokenizerSource === "base" || (options.copyTokenizer ?? true);
  const template = sources.get(plan.templateModel)!;
  const changes: Record<string, unknown> = { num_hidden_layers: plan.numLayers };
  // Per-layer lists (transformers checks that `layer_types` has num_hidden_layers entries): each output layer takes
  // its source layer's entry.
  const layerTypes = template.config?.layer_types;
  if (Array.isArray(layerTypes) && layerTypes.length > 0) {
    changes.layer_types = plan.sourceLayers.map((i) => layerTypes[Math.min(i, layerTypes.length - 1)]);
  }
  const sideFiles = await sideFilesOf(
    template,
    config.outDtype ?? config.dtype,
    changes,
    copyTokenizer ? TOKENIZER_FILES : [],
  );
  const tensorsRead = new Map<string, number>();
  // Whole tensors are read into buffers kept from job to job: a fresh buffer per read was 7.1 GiB of first-touched pages
  // over the bench's TIES (three 2.37 GiB inputs), measured with perf on the 2-core VM at ~10% of its CPU.
  const reader: MergeReader = {
    read(model, name, byteOffset, byteLength, signal) {
      return sources.get(model)!.read(name, byteOffset, byteLength, signal);
    },
    async readInto(model, name, byteOffset, into, signal) {
      const source = sources.get(model)!;
      const at = source.locate(name);
      if (at === null) into.set(await source.read(name, byteOffset, into.length, signal));
      else
        await readFullyAtAsync(at.fd, into, at.position + byteOffset).catch((error: unknown) => {
          throw ioError(error, `cannot read ${source.location}`);
        });
    },
  };
  const progress: MergeProgress = {
    tensorsDone: 0,
    tensorsTotal: plan.jobs.length,
    bytesRead: 0,
    bytesWritten: 0,
    bytesTotal: outputBytes(outputs),
  };
  // Measured on the 2-core VM (load 13-16, linear merge of 2 x 1 Mi fp16 chunks): one thread 77 ns an element
  // (decode 12, kernel 50, encode 15), two workers ~2x; the main thread meanwhile reads and writes.
  // With the addon's SIMD kernel a chunk takes well under a millisecond: it is computed here (handing it to a worker
  // cost more than computing it), and a merge whose every job has such a kernel starts no workers.
  // Whole-tensor jobs decode their inputs and encode their output here: 2.5 and 5.5 ns an entry in the codecs, ~10
  // and ~7 s of this thread's CPU over the bench's TIES (3.8 G entries decoded, 1.27 G encoded), a fraction with F16C.
  installNativeKernels();
  // Element-wise jobs over local files: workers read, compute and write their own chunks (file tasks, node-pool.ts),
  // with direct writes; copies go file to file. Measured on the 2-core VM (the bench's linear merge, load 4-8): in
  // the main thread with buffered writes 24 s wall (1.9 s user + 16.4 s system CPU: page-cache pages faulted in on
  // the host, see io/node-chunk-io.ts); two workers with direct writes 5.7-6.0 s (1.9 user + 2.9-3.9 system), same
  // bytes, peak RSS 105 MiB.
  const located = (job: TensorJob) => job.inputs.map((input) => sources.get(input.model)!.locate(input.name));
  const inFiles = (job: TensorJob) => !isCopy(job) && isElementWise(job) && located(job).every((at) => at !== null);
  // A 16-bit linear merge over local files is the addon's from file to file, started from here (no worker needed).
  const linearFile = nativeLinear16FileKernel();
  const nativeFile = (job: TensorJob) => linearFile !== null && inFiles(job) && linear16Params(job) !== null;
  const needsPool = plan.jobs.some(
    (job) => (inFiles(job) && !nativeFile(job)) || (!isCopy(job) && !(isElementWise(job) && hasFastChunkKernel(job))),
  );
  // Checked whether a pool starts or not: a bad value is refused before anything is written.
  const threads = threadCount(options.threads);
  const pool = needsPool ? ChunkPool.create(threads) : null;
  const compute =
    pool === null
      ? undefined
      : (job: TensorJob, raws: Uint8Array[], count: number) =>
          hasFastChunkKernel(job) ? Promise.resolve(computeChunk(job, raws, count)) : pool.compute(job, raws, count);
  const chunkElements = options.chunkElements ?? DEFAULT_CHUNK_ELEMENTS;
  // A 16-bit linear merge that the addon does from file to file takes larger tasks (its pieces are its own).
  const fileLinear = linearFile !== null;
  const taskElements = (job: TensorJob) =>
    fileLinear && linear16Params(job) !== null
      ? (options.chunkElements ?? DEFAULT_FILE_LINEAR_ELEMENTS)
      : chunkElements;
  const directWriteBytes = options.directWriteBytes ?? DEFAULT_DIRECT_WRITE_BYTES;
  const buffers = new FloatBuffers();
  const report = (read: number, written: number) => {
    progress.bytesRead += read;
    progress.bytesWritten += written;
    options.onProgress?.(progress);
  };
  const files = await writeCheckpoint(outDir, outputs, sideFiles, options, async (tensor, write, target) => {
    const job = jobs.get(tensor.name)!;
    const at = located(job);
    if (isCopy(job) && at[0] !== null) {
      const length = outputBytes([tensor]);
      target.copyFrom(at[0]!.fd, at[0]!.position, length, 0);
      report(length, length);
    } else if (nativeFile(job)) {
      await nativeFileChunks(
        job,
        at as { fd: number; position: number }[],
        linearFile!,
        target,
        taskElements(job),
        threads,
        report,
        options.signal,
      );
    } else if (pool !== null && inFiles(job)) {
      await fileChunks(
        job,
        at as { fd: number; position: number }[],
        pool,
        target,
        taskElements(job),
        report,
        options.signal,
      );
    } else
      await executeJob(
        job,
        reader,
        { write: (_name, bytes, offset) => writePiece(bytes, offset, write, target, directWriteBytes) },
        {
          chunkElements: options.chunkElements,
          seed: options.seed,
          compute,
          sparsify: pool?.sparsify,
          buffers,
          maxParallelSparsifyBytes: options.maxParallelSparsifyBytes,
          inFlight: pool === null ? 2 : pool.size + 1,
          signal: options.signal,
          onBytes: report,
        },
      );
    for (const input of job.inputs) tensorsRead.set(input.model, (tensorsRead.get(input.model) ?? 0) + 1);
    progress.tensorsDone++;
    options.onProgress?.(progress);
  }).finally(() => pool?.close());
  return {
    method: config.method,
    files,
    tensors: plan.jobs.length,
    bytesRead: progress.bytesRead,
    bytesWritten: progress.bytesWritten,
    models: config.models.map((location) => ({ location, tensorsRead: tensorsRead.get(location) ?? 0 })),
  };
}

export const DEFAULT_DIRECT_WRITE_BYTES = 1 << 20;

/**
 * Elements per task of a 16-bit linear merge the addon does from file to file (native/merge_file.c: 32 MiB of F16
 * output, eight of its pieces; two tasks a worker in flight).
 */
export const DEFAULT_FILE_LINEAR_ELEMENTS = 16 << 20;

/**
 * A piece of an output tensor computed in this thread (whole-tensor methods: TIES, DARE, SLERP...): written directly,
 * as the workers write theirs (io/node-chunk-io.ts), from `directWriteBytes`; through the writer below it. Measured
 * on the 2-core VM, the bench's TIES at load 5-6 (with the F16C and SIMD-scan sort replay of the same commit): 214 ->
 * 175 s wall, 110.8 + 33.3 -> 57.6 + 27.5 s of user + system CPU, same bytes.
 */
function writePiece(
  bytes: Uint8Array,
  offset: number,
  write: (bytes: Uint8Array, offset: number) => void,
  target: TensorTarget,
  directWriteBytes: number,
): void {
  if (bytes.length < directWriteBytes) {
    write(bytes, offset);
    return;
  }
  const at = target.claim(offset, bytes.length);
  try {
    writeAtPath(at.path, bytes, at.position);
  } catch (error) {
    throw writeError(error, "cannot write the output");
  }
}

/** How many tasks the addon merged from file to file in this thread's merges (for tests). */
export const nativeFileCounters = { tasks: 0 };

/**
 * Threads of each native file task: with two tasks at once, four, so that while one thread waits for its write the
 * others read and merge.
 */
const NATIVE_FILE_THREADS = 2;

/**
 * A 16-bit linear merge over local files, task by task by the addon from file to file on libuv's pool, `tasks` at
 * once (the merge's `threads`, as many as its pool would have workers). A task the addon cannot do here (no direct I/O on this file system) is read, merged and written by this thread.
 */
async function nativeFileChunks(
  job: TensorJob,
  inputs: readonly { fd: number; position: number }[],
  merge: Linear16FileKernel,
  target: TensorTarget,
  chunkElements: number,
  tasks: number,
  report: (read: number, written: number) => void,
  signal?: AbortSignal,
): Promise<void> {
  const count = elementCount(job.shape);
  const params = linear16Params(job)!;
  const flight = new Flight(tasks);
  for (let first = 0; first < count; first += chunkElements) {
    if (signal?.aborted) {
      await flight.drain();
      throwIfAborted(signal);
    }
    const n = Math.min(chunkElements, count - first);
    const at = inputs.map((input) => ({ fd: input.fd, position: input.position + first * 2 }));
    const out = target.claim(first * 2, n * 2);
    const task = merge(at, params.weights, params.divisor, params.dtype, n, out, NATIVE_FILE_THREADS).then(
      async (done) => {
        if (done) nativeFileCounters.tasks++;
        else await mergeHere(job, at, n, out);
        report(n * 2 * inputs.length, n * 2);
      },
    );
    await flight.add(
      task.catch((error: unknown) => {
        if ((error as NodeJS.ErrnoException).code === "ENODATA") {
          throw new SafetensorError("SourceChanged", "an input ends before its header's end");
        }
        throw writeError(error, "cannot write the output");
      }),
    );
  }
  await flight.drain();
}

/** One chunk of an element-wise job read, computed and written by this thread. */
async function mergeHere(
  job: TensorJob,
  inputs: readonly { fd: number; position: number }[],
  count: number,
  out: { path: string; position: number },
): Promise<void> {
  const raws = await Promise.all(
    inputs.map(async (input, i) => {
      const into = new Uint8Array(count * elementBytes(job.inputs[i]!.dtype));
      await readFullyAtAsync(input.fd, into, input.position).catch((error: unknown) => {
        throw ioError(error, "cannot read an input");
      });
      return into;
    }),
  );
  writeAtPath(out.path, computeChunk(job, raws, count), out.position);
}

/**
 * An element-wise job over local files, chunk by chunk on the pool's workers: each reads its chunk of every input,
 * computes it and writes it at its place in the output. At most two chunks a worker are in flight.
 */
async function fileChunks(
  job: TensorJob,
  inputs: readonly { fd: number; position: number }[],
  pool: ChunkPool,
  target: TensorTarget,
  chunkElements: number,
  report: (read: number, written: number) => void,
  signal?: AbortSignal,
): Promise<void> {
  const count = elementCount(job.shape);
  const outBytes = elementBytes(job.outDtype);
  const flight = new Flight(2 * pool.size);
  for (let first = 0; first < count; first += chunkElements) {
    if (signal?.aborted) {
      await flight.drain();
      throwIfAborted(signal);
    }
    const n = Math.min(chunkElements, count - first);
    const reads = job.inputs.map((input, i) => {
      const bpe = elementBytes(input.dtype);
      return { fd: inputs[i]!.fd, position: inputs[i]!.position + first * bpe, length: n * bpe };
    });
    const task = pool.file({
      reads,
      compute: { kind: "chunk", job, count: n },
      out: target.claim(first * outBytes, n * outBytes),
    });
    const read = reads.reduce((sum, r) => sum + r.length, 0);
    await flight.add(task.then((written) => report(read, written)));
  }
  await flight.drain();
}
