/**
 * Pythons for the checks that run transformers: the merge, lora and lora extract checks' (SAFETENSORS_MERGE_PYTHON, else
 * /work/venv's), and which modules a Python lacks (test/gguf-unseen.test.ts). Modules are looked up with
 * importlib.util.find_spec, without importing them: 0.02 s, where the `-c "import torch, transformers"` probe each
 * file made took 3.5-4 s of CPU (torch's import) before the check itself imported them again (2026-12-02, load 3-4
 * on 2 cores).
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { repoRoot } from "./corpus.js";

const FIND =
  "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))";

/** Which of `modules` `python` cannot find (all of them when it does not run). */
export function missingModules(python: string, modules: readonly string[]): string[] {
  const run = spawnSync(python, ["-c", FIND, ...modules], { encoding: "utf8" });
  return run.status === 0 ? run.stdout.split(/\s+/).filter(Boolean) : [...modules];
}

/** The python when it exists and holds every one of `modules`, else null. */
export function mergePython(modules: readonly string[]): string | null {
  const python = process.env.SAFETENSORS_MERGE_PYTHON ?? "/work/venv/bin/python";
  if (!fs.existsSync(python)) return null;
  return missingModules(python, modules).length === 0 ? python : null;
}

/**
 * scripts/merge_logits_check.py over `pairs` (our output directory, the reference's safetensors file): the largest
 * difference of their logits and the largest logit of the reference, one per pair, from one Python process.
 */
export function logitsDifferences(
  python: string,
  pairs: readonly (readonly [string, string])[],
): { max_abs: number; max_ref: number }[] {
  const script = path.join(repoRoot, "scripts", "merge_logits_check.py");
  const result = spawnSync(python, [script, ...pairs.flat()], { encoding: "utf8" });
  if (result.status !== 0) throw new Error(`merge_logits_check.py failed (status ${result.status}):\n${result.stderr}`);
  return result.stdout
    .trim()
    .split("\n")
    .slice(-pairs.length)
    .map((line) => JSON.parse(line));
}
