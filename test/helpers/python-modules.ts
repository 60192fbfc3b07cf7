/**
 * The Python with torch, transformers (and peft) that the transformers checks of merge, lora and lora extract run:
 * SAFETENSORS_MERGE_PYTHON, else /work/venv's. Found by importlib.util.find_spec, which looks the modules up without
 * importing them: 0.02 s, where the `-c "import torch, transformers"` probe each file made took 3.5-4 s of CPU
 * (torch's import) before the check itself imported them again (2026-12-02, load 3-4 on 2 cores).
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { repoRoot } from "./corpus.js";

const FIND = "import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in sys.argv[1:]) else 1)";

/** The python when it exists and holds every one of `modules`, else null. */
export function mergePython(modules: readonly string[]): string | null {
  const python = process.env.SAFETENSORS_MERGE_PYTHON ?? "/work/venv/bin/python";
  if (!fs.existsSync(python)) return null;
  return spawnSync(python, ["-c", FIND, ...modules], { stdio: "ignore" }).status === 0 ? python : null;
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
