/**
 * Faster kernels a runtime may plug in (the Node adapter registers the optional addon's SIMD kernels): each gives
 * the same bytes as the pure kernels it replaces, which stay the path everywhere else (browsers, no addon,
 * SAFETENSORS_NO_NATIVE=1). Pure: only the registry.
 */

/**
 * A linear merge of 16-bit inputs in their own dtype, written in it: the bytes of `linearTable16Kernel` and the
 * codecs' encoder. `divisor` null: no normalize.
 */
export type Linear16Kernel = (
  codes: readonly Uint8Array[],
  weights: Float32Array,
  divisor: number | null,
  dtype: "F16" | "BF16",
  count: number,
  out: Uint8Array,
) => void;

let linear16: Linear16Kernel | null = null;

/** Use `kernel` for 16-bit linear merges in this thread (null: the pure kernel again). */
export function preferLinear16Kernel(kernel: Linear16Kernel | null): void {
  linear16 = kernel;
}

/** The registered 16-bit linear merge kernel, or null. */
export function linear16Kernel(): Linear16Kernel | null {
  return linear16;
}

/** The bytes of the codecs' 16-bit decoder and encoder. */
export interface Codec16Kernels {
  /** `count` F16 or BF16 codes to float32 in `out`. */
  decode16(bytes: Uint8Array, dtype: "F16" | "BF16", count: number, out: Float32Array): void;
  /** float32 values to F16 or BF16 codes (into `out` when given: its first 2 × values.length bytes). */
  encode16(values: Float32Array, dtype: "F16" | "BF16", out?: Uint8Array): Uint8Array;
}

let codec16: Codec16Kernels | null = null;

/** Use `kernels` for the merges' 16-bit decoding and encoding in this thread (null: the codecs again). */
export function preferCodec16Kernels(kernels: Codec16Kernels | null): void {
  codec16 = kernels;
}

/** The registered 16-bit codec kernels, or null. */
export function codec16Kernels(): Codec16Kernels | null {
  return codec16;
}

/** The LoRA bake's kernels: the bytes of the codecs' 16-bit decoder and encoder and of `addLowRank`. */
export interface LoraKernels extends Codec16Kernels {
  /**
   * A low-rank update added to float32 `values` [rows × cols] in place: `left` [rows × rank], `right` [cols × rank],
   * `magnitude` [rows] or null, as `addLowRank` adds one (after restricting the factors to their rows).
   */
  addLowRank(
    values: Float32Array,
    rows: number,
    cols: number,
    left: Float32Array,
    right: Float32Array,
    rank: number,
    scaling: number,
    ratio: number,
    deltaDtype: "F32" | "F16" | "BF16",
    magnitude: Float32Array | null,
  ): void;
}

let lora: LoraKernels | null = null;

/** Use `kernels` for LoRA bakes in this thread (null: the pure kernels again). */
export function preferLoraKernels(kernels: LoraKernels | null): void {
  lora = kernels;
}

/** The registered LoRA bake kernels, or null. */
export function loraKernels(): LoraKernels | null {
  return lora;
}

/**
 * `keepSortedMagnitudes`: keep, in place, the entries whose position after torch's unstable sort of the magnitudes
 * (descending or not) is in [from, to), zero the others.
 */
export type KeepSortedKernel = (values: Float32Array, descending: boolean, from: number, to: number) => void;

let keepSorted: KeepSortedKernel | null = null;

/** Use `kernel` for torch's sort replay in this thread (null: the pure replay again). */
export function preferKeepSortedKernel(kernel: KeepSortedKernel | null): void {
  keepSorted = kernel;
}

/** The registered sort replay, or null. */
export function keepSortedKernel(): KeepSortedKernel | null {
  return keepSorted;
}

/** Task arithmetic over float32 arrays of 16-bit values: the bytes of `subtractBase` and of `combineKernel`. */
export interface TaskKernels {
  /** x - base, rounded to the dtype, in place. */
  subtract16(x: Float32Array, base: Float32Array, dtype: "F16" | "BF16", count: number): void;
  /**
   * TIES's combination of two task vectors: `weights` holds the two rounded weights, then the rounded divisors of
   * the first alone, the second alone and both.
   */
  consensus2(
    base: Float32Array,
    a: Float32Array,
    b: Float32Array,
    weights: Float32Array,
    dtype: "F16" | "BF16",
    normalize: boolean,
    lambda: number,
    count: number,
    out: Float32Array,
  ): void;
}

let task: TaskKernels | null = null;

/** Use `kernels` for task arithmetic in this thread (null: the pure kernels again). */
export function preferTaskKernels(kernels: TaskKernels | null): void {
  task = kernels;
}

/** The registered task arithmetic kernels, or null. */
export function taskKernels(): TaskKernels | null {
  return task;
}
