/**
 * `loadToGPU`: a checkpoint's tensors from a URL, a File or an open handle into WebGPU buffers, chunk by chunk, so
 * that page memory holds at most `concurrency` chunks whatever the model's size; optionally converted to F16/F32 on
 * the device. Pure: runs in browsers, and in Node with a WebGPU binding.
 *
 * Chunks go in with `queue.writeBuffer`, not through buffers created with `mappedAtCreation`. Measured in headless
 * Chromium 150 on SwiftShader (`npm run bench:gpu -- --only method --runs 3`: 1 GiB as 64 buffers of 16 MiB, the
 * queue drained every 4): writeBuffer 6.1 / 9.7 / 7.6 s, mappedAtCreation 17.3 / 15.6 / 12.4 s (median 7.6 against
 * 15.6 s, load average 16 on 2 cores); renderer peaks alike (223-225 against 209-224 MiB). A mapped buffer is also
 * page memory as large as the whole buffer until it is unmapped: for a 1 GiB tensor that defeats `chunkBytes`.
 */

import type { Dtype } from "../format/dtypes.js";
import { quoteName, SafetensorError } from "../format/errors.js";
import type { TensorInfo } from "../format/header.js";
import { throwIfAborted } from "../io/async-source.js";
import type { AsyncSafetensorsFile } from "../read/async-file.js";
import type { HttpOptions } from "../remote/http.js";
import type { AsyncShardedOptions } from "../shards/async.js";
import { Converter, writePadded } from "./convert.js";
import {
  DEFAULT_GPU_CHUNK_BYTES,
  DEFAULT_GPU_LOCAL_CONCURRENCY,
  DEFAULT_GPU_MAX_GAP,
  DEFAULT_GPU_REMOTE_CONCURRENCY,
} from "./defaults.js";
import { type GpuLoadInput, openInput, type SourceCache } from "./open.js";
import { type LoadPlan, type PlanInput, pad4, planLoad, type TargetDtype } from "./plan.js";
import { BufferUsage, type GpuBufferLike, type GpuDeviceLike } from "./webgpu.js";

export { DEFAULT_GPU_CHUNK_BYTES, DEFAULT_GPU_LOCAL_CONCURRENCY, DEFAULT_GPU_MAX_GAP, DEFAULT_GPU_REMOTE_CONCURRENCY };

export interface GpuLoadProgress {
  /** Source bytes of the selected tensors written to the device so far, and in all. */
  readonly bytes: number;
  readonly totalBytes: number;
  /** Tensors complete so far, and in all. */
  readonly tensors: number;
  readonly totalTensors: number;
}

export interface LoadToGpuOptions extends AsyncShardedOptions, HttpOptions {
  /** The tensors to load: names (each must exist), or a predicate. Default: all. */
  filter?: readonly string[] | ((name: string, info: TensorInfo) => boolean);
  /** Usage flags of the buffers (default STORAGE | COPY_SRC); COPY_DST is always added. */
  usage?: number;
  /** Convert float tensors on the device: BF16, F16, F32 and F8 types to "f16" or "f32". Others load as stored. */
  dtype?: TargetDtype;
  /** Largest read and staging allocation (default 4 MiB, rounded down to a multiple of 256, at least 64 KiB). */
  chunkBytes?: number;
  /** Reads in flight (default 4 for URLs, 2 otherwise). */
  concurrency?: number;
  /**
   * Bytes handed to the device's queue and not yet taken by it, at most (default 2 × chunkBytes). The queue keeps a
   * copy of what `writeBuffer` is given in page memory until the device is done with it.
   */
  maxQueuedBytes?: number;
  /** A tensor larger than maxBufferSize is split along dim 0 into several buffers (`buffers`); else refused. */
  split?: boolean;
  /** The largest buffer to create (default and ceiling: the device's `limits.maxBufferSize`). */
  maxBufferSize?: number;
  /** Label prefix of the buffers (default none: the tensor's name). */
  label?: string;
  onProgress?: (progress: GpuLoadProgress) => void;
  signal?: AbortSignal;
  /** Keep downloaded bytes and serve them the next time (`openWeightCache()`); URLs only. */
  cache?: SourceCache;
}

export interface GpuTensorPart<B> {
  readonly buffer: B;
  /** Rows [first, end) of dim 0. */
  readonly rows: readonly [number, number];
  readonly shape: readonly number[];
  readonly byteLength: number;
}

interface GpuTensorCommon {
  /** The dtype in the buffer (F32 or F16 after a conversion). */
  readonly dtype: Dtype;
  /** The dtype in the file. */
  readonly sourceDtype: Dtype;
  readonly shape: readonly number[];
  /** Bytes of data; the buffer's size is this rounded up to a multiple of 4 (the tail is zeros). */
  readonly byteLength: number;
}

/** One tensor on the device: in one `buffer`, or split along dim 0 over `buffers`. */
export type GpuTensor<B = GpuBufferLike> =
  | (GpuTensorCommon & { readonly buffer: B; readonly buffers?: undefined })
  | (GpuTensorCommon & { readonly buffer?: undefined; readonly buffers: readonly GpuTensorPart<B>[] });

function integer(value: number | undefined, fallback: number, name: string, min: number): number {
  const v = value ?? fallback;
  if (!(Number.isSafeInteger(v) && v >= min)) {
    throw new SafetensorError("InvalidOption", `${name} must be an integer ≥ ${min}, got ${value}`);
  }
  return v;
}

function select(files: readonly AsyncSafetensorsFile[], filter: LoadToGpuOptions["filter"]): PlanInput[] {
  const inputs: PlanInput[] = [];
  const wanted = Array.isArray(filter) ? new Set<string>(filter) : null;
  const found = new Set<string>();
  files.forEach((file, index) => {
    for (const name of file.offsetKeys()) {
      const info = file.info(name);
      const take = wanted ? wanted.has(name) : typeof filter === "function" ? filter(name, info) : true;
      if (!take) continue;
      found.add(name);
      inputs.push({ file: index, info, dataStart: file.header.dataStart });
    }
  });
  for (const name of wanted ?? []) {
    if (!found.has(name)) {
      throw new SafetensorError("TensorNotFound", `no tensor named ${quoteName(name)}`, { tensor: name });
    }
  }
  return inputs;
}

/**
 * Load a checkpoint's tensors into buffers of `device`. Resolves to the tensors in file order (shard by shard for a
 * sharded checkpoint). On failure or abort, every buffer made so far is destroyed.
 */
export async function loadToGPU<B extends GpuBufferLike>(
  device: GpuDeviceLike<B>,
  source: GpuLoadInput,
  options: LoadToGpuOptions = {},
): Promise<Map<string, GpuTensor<B>>> {
  const signal = options.signal;
  throwIfAborted(signal);
  const deviceMax = device.limits.maxBufferSize;
  const maxBufferSize = integer(options.maxBufferSize, deviceMax, "maxBufferSize", 4);
  if (maxBufferSize > deviceMax) {
    throw new SafetensorError("InvalidOption", `maxBufferSize ${maxBufferSize} is over the device's ${deviceMax}`);
  }
  const chunk = integer(options.chunkBytes, DEFAULT_GPU_CHUNK_BYTES, "chunkBytes", 64 << 10);
  const segmentBytes = chunk - (chunk % 256);
  const remote = typeof source === "string" || source instanceof URL;
  const concurrency = integer(
    options.concurrency,
    remote ? DEFAULT_GPU_REMOTE_CONCURRENCY : DEFAULT_GPU_LOCAL_CONCURRENCY,
    "concurrency",
    1,
  );
  const maxQueued = integer(options.maxQueuedBytes, 2 * segmentBytes, "maxQueuedBytes", 1);
  const usage = (options.usage ?? BufferUsage.STORAGE | BufferUsage.COPY_SRC) | BufferUsage.COPY_DST;
  const opened = await openInput(source, { ...options, concurrency: Math.max(concurrency, 1) });
  const made: B[] = [];
  let converter: Converter | null = null;
  device.pushErrorScope("out-of-memory");
  device.pushErrorScope("validation");
  let scopes = 2;
  try {
    const plan = planLoad(select(opened.files, options.filter), {
      target: options.dtype,
      maxBufferSize,
      split: options.split === true,
      segmentBytes,
      maxGap: DEFAULT_GPU_MAX_GAP,
    });
    const buffers = plan.tensors.map((t) =>
      t.parts.map((part) => {
        const name = t.parts.length > 1 ? `${t.name}[${part.rows[0]}:${part.rows[1]}]` : t.name;
        const buffer = device.createBuffer({
          label: options.label === undefined ? name : `${options.label}${name}`,
          size: pad4(part.byteLength),
          usage,
        });
        made.push(buffer);
        return buffer;
      }),
    );
    if (plan.tensors.some((t) => t.conversion !== null)) converter = new Converter(device, segmentBytes);
    const limits = { concurrency, chunkBytes: segmentBytes, maxQueued };
    await copyAll(device, opened.files, plan, buffers, converter, limits, options);
    scopes = 0;
    const validation = await device.popErrorScope();
    const memory = await device.popErrorScope();
    const error = validation ?? memory;
    if (error) {
      throw new SafetensorError("GpuError", `the device refused the load: ${error.message}`);
    }
    const out = new Map<string, GpuTensor<B>>();
    plan.tensors.forEach((t, i) => {
      const common = { dtype: t.dtype, sourceDtype: t.info.dtype, shape: t.info.shape, byteLength: t.byteLength };
      const parts = buffers[i]!;
      out.set(
        t.name,
        t.parts.length === 1
          ? { ...common, buffer: parts[0]! }
          : {
              ...common,
              buffers: t.parts.map((part, p) => ({
                buffer: parts[p]!,
                rows: part.rows,
                shape: part.shape,
                byteLength: part.byteLength,
              })),
            },
      );
    });
    return out;
  } catch (error) {
    for (const buffer of made) buffer.destroy();
    throw error;
  } finally {
    while (scopes-- > 0) await device.popErrorScope().catch(() => null);
    converter?.destroy();
    await opened.close().catch(() => {});
  }
}

type Queue = Parameters<typeof writePadded>[0];

/** Run the plan's reads, `concurrency` at a time, writing (or converting) each segment as its read arrives. */
async function copyAll<B extends GpuBufferLike>(
  device: GpuDeviceLike<B>,
  files: readonly AsyncSafetensorsFile[],
  plan: LoadPlan,
  buffers: readonly (readonly B[])[],
  converter: Converter | null,
  limits: { concurrency: number; chunkBytes: number; maxQueued: number },
  options: LoadToGpuOptions,
): Promise<void> {
  const { concurrency, chunkBytes, maxQueued } = limits;
  const queue = device.queue as unknown as Queue;
  const signal = options.signal;
  const left = plan.tensors.map((t) => t.info.byteLength);
  let tensors = left.filter((n) => n === 0).length;
  let bytes = 0;
  let next = 0;
  const report = () =>
    options.onProgress?.({
      bytes,
      totalBytes: plan.totalBytes,
      tensors,
      totalTensors: plan.tensors.length,
    });
  report();
  // The queue copies what writeBuffer is given, and the copies wait in page memory until the device takes them: a
  // read's bytes go to the queue only while less than maxQueued is waiting there. When reads outran the device
  // (served from the OPFS cache), waiting for the queue only every concurrency × chunkBytes let up to twice that
  // pile up: the 2.37 GiB bench checkpoint from the cache peaked the renderer at 272-285 MiB, 4 reads of 4 MiB in
  // flight (idle page 126 MiB).
  let queued = 0;
  const wake: (() => void)[] = [];
  // Room is taken before the read's writes, in the turn the check passes: workers woken together do not all pass.
  const room = async (n: number) => {
    while (queued > 0 && queued + n > maxQueued) await new Promise<void>((resolve) => wake.push(resolve));
    queued += n;
  };
  const submitted = (n: number) => {
    const taken = () => {
      queued -= n;
      for (const resolve of wake.splice(0)) resolve();
    };
    // A lost device rejects here and again in the last onSubmittedWorkDone below, which reports it.
    device.queue.onSubmittedWorkDone().then(taken, taken);
  };
  const worker = async () => {
    try {
      await work();
    } catch (error) {
      next = plan.reads.length; // the other workers stop after their current read
      throw error;
    }
  };
  const work = async () => {
    // One staging buffer per worker, reused for every read, that HTTP bodies are read straight into (BYOB): a load
    // leaves no garbage the size of a read or of a body's chunk. Headless Chromium, bench checkpoint, 16 MiB reads:
    // a fresh buffer per read peaked the renderer at 702 MiB, chunks copied into a reused buffer at 959 MiB (the
    // chunks' own buffers waiting for the collector), read straight in at 588-605 MiB.
    let staging: Uint8Array | null = null;
    while (next < plan.reads.length) {
      const read = plan.reads[next++]!;
      const length = read.end - read.start;
      staging ??= new Uint8Array(chunkBytes);
      const data = await files[read.file]!.readInto(read.start, length, staging, { signal });
      staging = new Uint8Array(data.buffer, data.byteOffset, chunkBytes);
      throwIfAborted(signal);
      await room(data.length);
      try {
        throwIfAborted(signal);
        for (const segment of read.segments) {
          const tensor = plan.tensors[segment.tensor]!;
          const bytesOf = data.subarray(segment.start - read.start, segment.start - read.start + segment.length);
          const out = buffers[segment.tensor]![segment.part]!;
          if (tensor.conversion === null) writePadded(queue, out, segment.outOffset, bytesOf);
          else converter!.run(tensor.conversion, tensor.info.dtype, bytesOf, out, segment.outOffset);
          bytes += segment.length;
          left[segment.tensor]! -= segment.length;
          if (left[segment.tensor] === 0) tensors++;
        }
      } finally {
        submitted(data.length); // also on failure: the room taken is given back, and no other worker waits on it
      }
      report();
    }
  };
  const workers = Array.from({ length: Math.min(concurrency, plan.reads.length) }, worker);
  const settled = await Promise.allSettled(workers);
  const failed = settled.find((r) => r.status === "rejected");
  if (failed) throw (failed as PromiseRejectedResult).reason;
  await device.queue.onSubmittedWorkDone();
}
