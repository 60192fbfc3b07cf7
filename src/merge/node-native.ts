/**
 * The merge kernels of the optional copy addon (native/merge_kernels.c: AVX2 + F16C where the CPU has them, a
 * portable loop elsewhere): the same bytes as the pure kernels (test/merge-native.test.ts compares them over every
 * F16 and BF16 code, random inputs and LoRA updates).
 *
 * Measured on the 2-core VM (linear merge of the bench's two 2.37 GiB F16 fine-tunes, load ~4): the JavaScript
 * table kernel and encoder took 19 s of CPU (15 + 4 s in two workers); this one well under a second.
 */
import { fileURLToPath } from "node:url";
import { isMainThread } from "node:worker_threads";
import { addonCandidates, loadFirst, runtimeRefusal } from "../io/native-load.js";
import {
  type KeepSortedKernel,
  type Linear16Kernel,
  type LoraKernels,
  preferCodec16Kernels,
  preferKeepSortedKernel,
  preferLinear16Kernel,
  preferLoraKernels,
  preferTaskKernels,
  type TaskKernels,
} from "./fast-kernels.js";

interface MergeAddon {
  mergeLinear16(
    srcs: readonly Uint8Array[],
    weights: Float32Array,
    divisor: number,
    bf16: boolean,
    count: number,
    dst: Uint8Array,
  ): number;
  /** The linear merge from file to file on a thread of libuv's pool (absent from builds before it was added). */
  mergeLinear16FileAsync?: (
    fds: readonly number[],
    positions: readonly number[],
    weights: Float32Array,
    divisor: number,
    bf16: boolean,
    count: number,
    outPath: string,
    outPosition: number,
    threads: number,
  ) => Promise<number>;
  halfToFloat32(src: Uint8Array, bf16: boolean, count: number, dst: Float32Array): number;
  float32ToHalf(src: Float32Array, bf16: boolean, count: number, dst: Uint8Array): number;
  loraAddLowRank(
    values: Float32Array,
    rows: number,
    cols: number,
    left: Float32Array,
    right: Float32Array,
    rank: number,
    scaling: number,
    ratio: number,
    deltaDtype: number,
    magnitude: Float32Array | null,
  ): number;
  /** keepScratch: this thread keeps the replay's working memory for its next call (ignored by older builds). */
  keepSortedMagnitudes(
    values: Float32Array,
    descending: boolean,
    from: number,
    to: number,
    keepScratch?: boolean,
  ): number;
  subtract16(x: Float32Array, base: Float32Array, bf16: boolean, count: number): number;
  consensus2(
    base: Float32Array,
    a: Float32Array,
    b: Float32Array,
    weights: Float32Array,
    bf16: boolean,
    normalize: boolean,
    lambda: number,
    count: number,
    out: Float32Array,
  ): number;
}

/** The package root: `src/merge/` in a checkout, `dist/merge/` or the CLI bundle's `dist/bundle/` when installed. */
const PACKAGE_ROOT = new URL("../../", import.meta.url);

let cached: MergeAddon | null | undefined;

function addon(): MergeAddon | null {
  if (cached !== undefined) return cached;
  cached = null;
  if (/^(1|true|yes|on)$/i.test((process.env.SAFETENSORS_NO_NATIVE ?? "").trim()) || runtimeRefusal()) return cached;
  const { candidates } = addonCandidates(fileURLToPath(PACKAGE_ROOT), "safetensors_copy");
  cached = loadFirst<MergeAddon>(candidates, {
    mergeLinear16: "function",
    halfToFloat32: "function",
    float32ToHalf: "function",
    loraAddLowRank: "function",
    keepSortedMagnitudes: "function",
    subtract16: "function",
    consensus2: "function",
  }).addon;
  return cached;
}

/** The native 16-bit linear merge kernel, or null (no addon, an addon built before it, SAFETENSORS_NO_NATIVE=1). */
export function nativeLinear16Kernel(): Linear16Kernel | null {
  const a = addon();
  if (a === null) return null;
  return (codes, weights, divisor, dtype, count, out) => {
    a.mergeLinear16(codes, weights, divisor ?? Number.NaN, dtype === "BF16", count, out);
  };
}

/**
 * A linear merge of 16-bit inputs from file to file (`count` elements of each input, read from its descriptor at its
 * position, written at `outPosition` of the file at `outPath`), with `threads` threads, on a thread of libuv's pool:
 * the bytes of the `Linear16Kernel`. Resolves false when that is not possible here (EINVAL: no direct I/O on this
 * file system); other errors (ENOSPC, ENODATA when an input ends early) reject as raw errno errors.
 */
export type Linear16FileKernel = (
  inputs: readonly { fd: number; position: number }[],
  weights: Float32Array,
  divisor: number | null,
  dtype: "F16" | "BF16",
  count: number,
  out: { path: string; position: number },
  threads: number,
) => Promise<boolean>;

/** The native linear merge from file to file (native/merge_file.c), or null (no addon, an addon built before it). */
export function nativeLinear16FileKernel(): Linear16FileKernel | null {
  const merge = addon()?.mergeLinear16FileAsync;
  if (merge === undefined) return null;
  return (inputs, weights, divisor, dtype, count, out, threads) =>
    merge(
      inputs.map((input) => input.fd),
      inputs.map((input) => input.position),
      weights,
      divisor ?? Number.NaN,
      dtype === "BF16",
      count,
      out.path,
      out.position,
      threads,
    ).then(
      () => true,
      (error: unknown) => {
        // EINVAL: not possible here (no direct I/O on this file system, an odd position).
        if ((error as NodeJS.ErrnoException).code === "EINVAL") return false;
        throw error;
      },
    );
}

const DELTA_DTYPES = { F32: 0, F16: 1, BF16: 2 } as const;

/** The native LoRA bake kernels, or null (no addon, an addon built before them, SAFETENSORS_NO_NATIVE=1). */
export function nativeLoraKernels(): LoraKernels | null {
  const a = addon();
  if (a === null) return null;
  return {
    decode16(bytes, dtype, count, out) {
      a.halfToFloat32(bytes, dtype === "BF16", count, out);
    },
    encode16(values, dtype, into) {
      const out = into?.subarray(0, values.length * 2) ?? new Uint8Array(values.length * 2);
      a.float32ToHalf(values, dtype === "BF16", values.length, out);
      return out;
    },
    addLowRank(values, rows, cols, left, right, rank, scaling, ratio, deltaDtype, magnitude) {
      a.loraAddLowRank(values, rows, cols, left, right, rank, scaling, ratio, DELTA_DTYPES[deltaDtype], magnitude);
    },
  };
}

/**
 * The native replay of torch's sort (TIES's and breadcrumbs' magnitude ranks), or null. Measured on the 2-core VM
 * (a 16 Mi-entry F16 task vector of the bench's fine-tunes, density 0.5, load ~2): the TypeScript replay 1.02 s of
 * CPU, this one 0.37 s. The replay is bound by memory: moving only 16-bit magnitude codes and marking kept indices in
 * a bitmap, instead of undoing the permutation along its cycles (a cache miss an entry), took it from 0.85 s.
 */
export function nativeKeepSortedKernel(): KeepSortedKernel | null {
  const a = addon();
  if (a === null) return null;
  // A worker of the merge pool keeps the replay's working memory (indices and bitmap, 4.1 bytes an entry, at most 256
  // MiB) from one task vector to the next, and frees it when it ends; the calling thread frees it after each call.
  const keep = !isMainThread;
  return (values, descending, from, to) => {
    a.keepSortedMagnitudes(values, descending, from, to, keep);
  };
}

/**
 * The native task arithmetic kernels (TIES's subtraction and two-vector combination), or null. Measured on the same
 * 16 Mi-entry tensor: subtracting the base 508 ms in TypeScript, 39 here; the combination 1028 ms, 92 here.
 */
export function nativeTaskKernels(): TaskKernels | null {
  const a = addon();
  if (a === null) return null;
  return {
    subtract16(x, base, dtype, count) {
      a.subtract16(x, base, dtype === "BF16", count);
    },
    consensus2(base, x, y, weights, dtype, normalize, lambda, count, out) {
      a.consensus2(base, x, y, weights, dtype === "BF16", normalize, lambda, count, out);
    },
  };
}

/**
 * Register every native merge kernel (none when the addon is absent) for the pure code of this thread: the merge's
 * main thread and each worker of its pool (node-worker.ts) call it once.
 */
export function installNativeKernels(): void {
  const lora = nativeLoraKernels();
  preferLinear16Kernel(nativeLinear16Kernel());
  preferLoraKernels(lora);
  preferCodec16Kernels(lora);
  preferKeepSortedKernel(nativeKeepSortedKernel());
  preferTaskKernels(nativeTaskKernels());
}
