/**
 * The WebAssembly SIMD Q8_0 kernel (q8-simd.wat): F16 codes to Q8_0 blocks, the same bytes as the JavaScript
 * kernel. One instance per thread, its memory grown to the largest chunk seen. Null where the engine has no
 * WebAssembly SIMD (the JavaScript kernel is used).
 *
 * Measured on the 2-core VM (16 Mi F16 values, one thread, CPU time of the call, copies in and out of the module's
 * memory included; the machine was busy, load average 13-15): JavaScript kernel 109-117 M values per CPU second,
 * this one 130-157 M (142-154 M with --no-liftoff, so not the baseline compiler), gguf-py's numpy quantizer 55-87 M
 * on the same values. The module is small (1.4 KB) and has no cost when unused, so it stays as the faster path.
 */
import { Q8_WASM_BASE64 } from "./q8-wasm.js";

export type Q8Kernel = (codes: Uint8Array, count: number, out: Uint8Array) => void;

function decodeBase64(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

let cached: Q8Kernel | null | undefined;

/** Blocks per call into the module (see the loop below). */
const PIECE_BLOCKS = 1024;

/** The SIMD kernel, or null when WebAssembly SIMD is not available. */
export function wasmQ8Kernel(): Q8Kernel | null {
  if (cached !== undefined) return cached;
  cached = null;
  try {
    const bytes = decodeBase64(Q8_WASM_BASE64);
    if (typeof WebAssembly === "undefined" || !WebAssembly.validate(bytes)) return null;
    const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes));
    const memory = instance.exports.memory as WebAssembly.Memory;
    const run = instance.exports.q8_from_f16 as (src: number, blocks: number, dst: number) => void;
    cached = (codes, count, out) => {
      const blocks = count / 32;
      const inBytes = count * 2;
      const need = inBytes + blocks * 34;
      if (memory.buffer.byteLength < need) memory.grow(Math.ceil((need - memory.buffer.byteLength) / 65536));
      const heap = new Uint8Array(memory.buffer);
      heap.set(codes.subarray(0, inBytes), 0);
      // In pieces: V8 compiles a module with its baseline compiler first and swaps in optimized code between
      // calls (never inside a running one), so one call for a whole chunk would run the baseline code throughout.
      for (let b = 0; b < blocks; b += PIECE_BLOCKS) {
        run(b * 64, Math.min(PIECE_BLOCKS, blocks - b), inBytes + b * 34);
      }
      out.set(heap.subarray(inBytes, inBytes + blocks * 34));
    };
  } catch {
    cached = null;
  }
  return cached;
}
