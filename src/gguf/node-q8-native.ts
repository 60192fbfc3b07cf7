/**
 * The native F16 to Q8_0 kernel (native/gguf_q8.c: AVX2 + F16C where the CPU has them, a portable loop elsewhere),
 * a member of the optional copy addon; the same bytes as the JavaScript and WebAssembly kernels.
 *
 * Measured on the 2-core VM (16 Mi F16 values, one thread, CPU time of the calls, load average ~9): WebAssembly
 * kernel 163-235 M values per CPU second, this one 447-606 M. On the 2.37 GiB checkpoint, to-gguf --type q8_0
 * quantizes ~1.27 G values: ~6 CPU seconds with WebAssembly, ~2 with this.
 */
import { fileURLToPath } from "node:url";
import { addonCandidates, loadFirst, runtimeRefusal } from "../io/native-load.js";
import type { Q8Kernel } from "./q8-kernel.js";

interface Q8Addon {
  q8FromF16(src: Uint8Array, count: number, dst: Uint8Array): number;
}

/** The package root: `src/gguf/` in a checkout, `dist/gguf/` or the CLI bundle's `dist/bundle/` when installed. */
const PACKAGE_ROOT = new URL("../../", import.meta.url);

let cached: Q8Kernel | null | undefined;

/** The native kernel, or null (no addon, an addon built before it, SAFETENSORS_NO_NATIVE=1, Deno). */
export function nativeQ8Kernel(): Q8Kernel | null {
  if (cached !== undefined) return cached;
  cached = null;
  if (/^(1|true|yes|on)$/i.test((process.env.SAFETENSORS_NO_NATIVE ?? "").trim()) || runtimeRefusal()) return cached;
  const { candidates } = addonCandidates(fileURLToPath(PACKAGE_ROOT), "safetensors_copy");
  const addon = loadFirst<Q8Addon>(candidates, { q8FromF16: "function" }).addon;
  if (addon !== null) {
    cached = (codes, count, out) => {
      addon.q8FromF16(codes, count, out);
    };
  }
  return cached;
}
