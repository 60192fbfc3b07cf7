/**
 * Shared constants of the benchmark: the synthetic checkpoint's layout, figure names and file locations.
 * No imports from src/ here, so the orchestrator can load it without touching the library.
 */
import * as path from "node:path";
import { fileURLToPath } from "node:url";

export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO_DIR = path.dirname(BENCH_DIR);
/** The harness's own scratch directory (gitignored). */
export const DEFAULT_OUT_DIR = path.join(BENCH_DIR, "out");

export const CHECKPOINT_NAME = "llama-synthetic-5l-fp16.safetensors";
export const PT_NAME = "llama-synthetic-5l-fp16.pt";

export const HIDDEN = 4096;
export const INTERMEDIATE = 11008;
export const VOCAB = 32000;
export const LAYERS = 5;

export interface TensorSpec {
  name: string;
  shape: number[];
}

/** The 48 tensors of the synthetic Llama-style checkpoint (all F16). */
export function checkpointSpec(): TensorSpec[] {
  const specs: TensorSpec[] = [{ name: "model.embed_tokens.weight", shape: [VOCAB, HIDDEN] }];
  for (let i = 0; i < LAYERS; i++) {
    const p = `model.layers.${i}`;
    for (const proj of ["q", "k", "v", "o"]) {
      specs.push({ name: `${p}.self_attn.${proj}_proj.weight`, shape: [HIDDEN, HIDDEN] });
    }
    specs.push({ name: `${p}.mlp.gate_proj.weight`, shape: [INTERMEDIATE, HIDDEN] });
    specs.push({ name: `${p}.mlp.up_proj.weight`, shape: [INTERMEDIATE, HIDDEN] });
    specs.push({ name: `${p}.mlp.down_proj.weight`, shape: [HIDDEN, INTERMEDIATE] });
    specs.push({ name: `${p}.input_layernorm.weight`, shape: [HIDDEN] });
    specs.push({ name: `${p}.post_attention_layernorm.weight`, shape: [HIDDEN] });
  }
  specs.push({ name: "model.norm.weight", shape: [HIDDEN] });
  specs.push({ name: "lm_head.weight", shape: [VOCAB, HIDDEN] });
  return specs;
}

export function byteLengthOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1) * 2;
}

export const FIGURES = [
  "open",
  "tensor_view_32mib",
  "tensor_owned_32mib",
  "slice_8_rows",
  "touch_all",
  "load_all",
] as const;
export type Figure = (typeof FIGURES)[number];

/**
 * The backend rows of the table. `pread-no-addon` is the pread backend with the native addon disabled
 * (`SAFETENSORS_NO_NATIVE=1` in the worker's environment): plain Node fs reads into plain memory.
 */
export const BACKENDS = ["mmap", "pread", "pread-no-addon"] as const;
export type BenchBackend = (typeof BACKENDS)[number];
/** The rows measured with the addon loaded, which the four per-backend acceptance checks cover. */
export const CHECKED_BACKENDS = ["mmap", "pread"] as const satisfies readonly BenchBackend[];

/** What each backend row runs: the library's `backend` option, and whether the native addon is disabled. */
export const BACKEND_RUN: Record<BenchBackend, { library: "mmap" | "pread"; noNative: boolean }> = {
  mmap: { library: "mmap", noNative: false },
  pread: { library: "pread", noNative: false },
  "pread-no-addon": { library: "pread", noNative: true },
};
/** The environment variable that makes `loadNative()` return null. */
export const NO_NATIVE_ENV = "SAFETENSORS_NO_NATIVE";

/** Tensor names used by the single-tensor figures. */
export const TENSOR_32MIB = "model.layers.0.self_attn.q_proj.weight";
export const SLICE_TENSOR = "model.embed_tokens.weight";
export const SLICE_SPEC = "0:8";
/** Touch stride: one byte per 4 KiB page, so lazily faulted memory is really paid for. */
export const TOUCH_STRIDE = 4096;
/** In-process repeated slice: calls after warm-up whose median is reported. */
export const SLICE_REPEAT = 1000;
export const SLICE_REPEAT_WARMUP = 100;

/** What a worker prints as its last stdout line, prefixed by `RESULT `. */
export interface WorkerResult {
  ok: boolean;
  /** Wall time of just the measured operation. */
  ms?: number;
  /** RSS after minus RSS before the operation, MiB. */
  rss_delta_mib?: number;
  /** The figure cannot be measured here (missing backend or method): not an error. */
  unavailable?: string;
  error?: string;
  /** Figure-specific extras (in-process slice median, backend actually used, ...). */
  extra?: Record<string, number | string>;
}

export const RESULT_PREFIX = "RESULT ";
