/**
 * The merge kernels of the optional copy addon (native/merge_kernels.c: AVX2 + F16C where the CPU has them, a
 * portable loop elsewhere): the same bytes as the pure kernels (test/merge-native.test.ts compares them over every
 * F16 code and random inputs).
 *
 * Measured on the 2-core VM (linear merge of the bench's two 2.37 GiB F16 fine-tunes, load ~4): the JavaScript
 * table kernel and encoder took 19 s of CPU (15 + 4 s in two workers); this one well under a second.
 */
import { fileURLToPath } from "node:url";
import { addonCandidates, loadFirst, runtimeRefusal } from "../io/native-load.js";
import type { Linear16Kernel } from "./fast-kernels.js";

interface MergeAddon {
  mergeLinear16(
    srcs: readonly Uint8Array[],
    weights: Float32Array,
    divisor: number,
    bf16: boolean,
    count: number,
    dst: Uint8Array,
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
  cached = loadFirst<MergeAddon>(candidates, { mergeLinear16: "function" }).addon;
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
