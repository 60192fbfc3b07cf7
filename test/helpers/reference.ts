/**
 * Locating the reference implementation (Hugging Face's Python `safetensors`, release 0.8.0) for interop tests.
 *
 * Looks at `SAFETENSORS_REF_PYTHON` first, then `<repo>/.venv-ref/bin/python`; a candidate counts only when it can
 * `import safetensors`. The answer is computed once per process.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

export const REFERENCE_INSTALL_HINT =
  "reference implementation not found: install it with " +
  "`python3 -m venv .venv-ref && .venv-ref/bin/pip install safetensors==0.8.0 torch numpy ml_dtypes` " +
  "(or point SAFETENSORS_REF_PYTHON at a python that can `import safetensors`)";

export interface ReferencePython {
  /** The python executable. */
  readonly python: string;
  /** `safetensors.__version__` as that python reports it. */
  readonly version: string;
}

let cached: { value: ReferencePython | null; reason: string } | undefined;

function probe(python: string): { value: ReferencePython | null; reason: string } {
  if (!python.includes(path.sep) || fs.existsSync(python)) {
    const result = spawnSync(python, ["-c", "import safetensors; print(safetensors.__version__)"], {
      encoding: "utf8",
      timeout: 30_000,
    });
    if (result.status === 0) {
      return { value: { python, version: result.stdout.trim() }, reason: "" };
    }
    const why = result.error ? String(result.error) : (result.stderr || "").trim().split("\n").pop();
    return { value: null, reason: `${python} cannot import safetensors (${why}); ${REFERENCE_INSTALL_HINT}` };
  }
  return { value: null, reason: `${python} does not exist; ${REFERENCE_INSTALL_HINT}` };
}

function locate(): { value: ReferencePython | null; reason: string } {
  if (cached) return cached;
  const fromEnv = process.env.SAFETENSORS_REF_PYTHON;
  const candidate = fromEnv && fromEnv.trim() !== "" ? fromEnv : path.join(repoRoot, ".venv-ref", "bin", "python");
  cached = probe(candidate);
  return cached;
}

/** The reference python, or null when unavailable (see `referenceMissingReason`). */
export function referencePython(): ReferencePython | null {
  return locate().value;
}

/** Why the reference is unavailable (empty when it is available). Loud on purpose: use it as a skip reason. */
export function referenceMissingReason(): string {
  return locate().reason;
}

/** A skip option for `describe`/`test`: false when the reference exists, else the reason. */
export function skipWithoutReference(): false | string {
  const found = locate();
  if (found.value) return false;
  // Make the skip visible even with terse reporters.
  process.emitWarning(found.reason, { code: "SAFETENSORS_REFERENCE_MISSING" });
  return found.reason;
}

/**
 * Run a script under the reference python with `input` as JSON on stdin; parse its stdout as JSON.
 * Throws with stderr included when the script fails.
 */
export function runReference<T = unknown>(script: string, args: readonly string[], input?: unknown): T {
  const ref = referencePython();
  if (!ref) throw new Error(referenceMissingReason());
  const result = spawnSync(ref.python, [script, ...args], {
    input: input === undefined ? "" : JSON.stringify(input),
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
    timeout: 120_000,
    env: { ...process.env, PYTHONIOENCODING: "utf-8" },
  });
  if (result.status !== 0) {
    throw new Error(
      `${path.basename(script)} ${args.join(" ")} failed (status ${result.status}${result.error ? `, ${result.error}` : ""}):\n${result.stderr}`,
    );
  }
  return JSON.parse(result.stdout) as T;
}

/** scripts/reference_check.py */
export const referenceCheckScript = path.join(repoRoot, "scripts", "reference_check.py");

/** One tensor as the reference sees it. */
export interface ReferenceTensor {
  name: string;
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
  sha256: string;
}

/** One file as the reference sees it (`reference_check.py read`). */
export interface ReferenceReport {
  file: string;
  ok: boolean;
  error: string | null;
  error_type?: string | null;
  metadata?: Record<string, string> | null;
  /** Metadata as key/value pairs in the reference's order (its hash order). */
  metadata_items?: [string, string][] | null;
  tensors?: ReferenceTensor[];
}

/** Have the reference read files (one python process for all of them). */
export function referenceRead(files: readonly string[]): ReferenceReport[] {
  return runReference<ReferenceReport[]>(referenceCheckScript, ["read"], { files });
}
