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
