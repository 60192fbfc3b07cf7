/** Child processes that run without the native addon, for the pure-JS fallbacks' tests. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { loaderArgs } from "./compiled.js";
import { repoRoot } from "./corpus.js";

/**
 * Run the ES module `script` in a fresh node (from the repository root, with the loader helpers/compiled.ts says:
 * `script` imports the checkout's modules by moduleUrl) with the addon disabled (`SAFETENSORS_NO_NATIVE=1`); it must
 * exit 0, and what it printed on standard output is parsed as JSON.
 */
export function runWithoutAddon(script: string): unknown {
  const run = spawnSync(process.execPath, [...loaderArgs, "--input-type=module", "-e", script], {
    cwd: repoRoot,
    env: { ...process.env, SAFETENSORS_NO_NATIVE: "1" },
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}
