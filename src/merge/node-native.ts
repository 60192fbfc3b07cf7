/**
 * The merge kernels of the optional copy addon (native/merge_kernels.c: AVX2 + F16C where the CPU has them, a
 * portable loop elsewhere): the same bytes as the pure kernels (test/merge-native.test.ts compares them over every
 * F16 and BF16 code, random inputs and LoRA updates).
 *
 * Measured on the 2-core VM (linear merge of the bench's two 2.37 GiB F16 fine-tunes, load ~4): the JavaScript
 * table kernel and encoder took 19 s of CPU (15 + 4 s in two workers); this one well under a second.
 */
import { fileURLToPath } from "node:url";
import { addonCandidates, loadFirst, runtimeRefusal } from "../io/native-load.js";
import type { Linear16Kernel, LoraKernels } from "./fast-kernels.js";

interface MergeAddon {
  mergeLinear16(
    srcs: readonly Uint8Array[],
    weights: Float32Array,
    divisor: number,
    bf16: boolean,
    count: number,
    dst: Uint8Array,
  ): number;
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

const DELTA_DTYPES = { F32: 0, F16: 1, BF16: 2 } as const;

/** The native LoRA bake kernels, or null (no addon, an addon built before them, SAFETENSORS_NO_NATIVE=1). */
export function nativeLoraKernels(): LoraKernels | null {
  const a = addon();
  if (a === null) return null;
  return {
    decode16(bytes, dtype, count, out) {
      a.halfToFloat32(bytes, dtype === "BF16", count, out);
    },
    encode16(values, dtype) {
      const out = new Uint8Array(values.length * 2);
      a.float32ToHalf(values, dtype === "BF16", values.length, out);
      return out;
    },
    addLowRank(values, rows, cols, left, right, rank, scaling, ratio, deltaDtype, magnitude) {
      a.loraAddLowRank(values, rows, cols, left, right, rank, scaling, ratio, DELTA_DTYPES[deltaDtype], magnitude);
    },
  };
}
