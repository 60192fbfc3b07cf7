/**
 * The synthetic checkpoint's layout and the constants every side of the benchmark shares (ours, the reference's
 * Python code, the orchestrator). No library imports here: the orchestrator and the workers load it before (or
 * without) the library.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The package root: the nearest directory above this module whose package.json is ours. Found by walking up, so the
 * answer is the same whether this file runs as bench/spec.ts or compiled under bench/out/js/.
 */
function findRepo(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { name?: string };
      if (pkg.name === PACKAGE_NAME) return dir;
    } catch {}
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error(`no package.json named ${PACKAGE_NAME} above ${import.meta.url}`);
    dir = parent;
  }
}

/** What users import; the workers resolve it through the package's own `exports` (self-reference), so dist/. */
export const PACKAGE_NAME = "safetensors-ts";
export const REPO_DIR = findRepo();
export const BENCH_DIR = path.join(REPO_DIR, "bench");
/** The harness's own scratch directory (gitignored): checkpoint files, compiled harness, JSON output. */
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

/** Tensor names used by the single-tensor figures. */
export const TENSOR_32MIB = "model.layers.0.self_attn.q_proj.weight";
export const SLICE_TENSOR = "model.embed_tokens.weight";
export const SLICE_SPEC = "0:8";
/** Touch stride: one byte per 4 KiB page, so lazily faulted memory is really paid for. */
export const TOUCH_STRIDE = 4096;
